"""Stored generated columns: the owner's writes never fail because ``pg_cdc`` runs, and the
rows leave the generated values out on every version, as pgoutput did before Postgres 18.

Postgres 18 refuses ``UPDATE`` and ``DELETE`` on a table whose replica identity holds a
generated column a publication of updates does not send (``REPLICA IDENTITY FULL`` is the
common case), so the managed pair sends them there and the decoder drops them again.
"""

from __future__ import annotations

import json

import pytest
from support.driven_query import DrivenQuery

from iggy_spark_testing.harness import LocalPostgres

pytestmark = pytest.mark.services


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_a_full_identity_table_with_a_generated_column_takes_its_owners_writes(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, a int, "
                     "g int GENERATED ALWAYS AS (a * 2) STORED, b text)")
        conn.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
        conn.execute(f"CREATE TABLE {name}_key (id int PRIMARY KEY, "
                     "g int GENERATED ALWAYS AS (id * 2) STORED)")
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin,
                             "include_tables": rf"public\.{name}(_key)?"})
    with pg.connect() as conn:  # each fails on 18 while a publication of updates holds FULL
        conn.execute(f"INSERT INTO {name} (id, a, b) VALUES (1, 1, 'x'), (2, 2, 'y')")
        conn.execute(f"UPDATE {name} SET a = 10 WHERE id = 1")
        conn.execute(f"DELETE FROM {name} WHERE id = 2")
        conn.execute(f"INSERT INTO {name}_key (id) VALUES (5)")
        conn.execute(f"UPDATE {name}_key SET id = 6")
    rows = query.batch()
    got = [(r["op"], r["table"], r["before"] and json.loads(r["before"]),
            r["after"] and json.loads(r["after"])) for r in rows]
    assert got == [
        ("insert", name, None, {"id": 1, "a": 1, "b": "x"}),
        ("insert", name, None, {"id": 2, "a": 2, "b": "y"}),
        ("update", name, {"id": 1, "a": 1, "b": "x"}, {"id": 1, "a": 10, "b": "x"}),
        ("delete", name, {"id": 2, "a": 2, "b": "y"}, None),
        ("insert", f"{name}_key", None, {"id": 5}),
        ("update", f"{name}_key", None, {"id": 6}),
    ]
