"""Stored generated columns: the owner's writes never fail because ``pg_cdc`` runs, and the
rows leave the generated values out on every version, as pgoutput did before Postgres 18.

Postgres 18 refuses ``UPDATE`` and ``DELETE`` on a table whose replica identity holds a
generated column a publication of updates does not send (``REPLICA IDENTITY FULL`` is the
common case), so the managed pair sends them there and the decoder drops them again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.driven_query import DrivenQuery

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.backfill import request_backfill
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.source import PgCdcDataSource

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


def _include_cases(pg: LocalPostgres) -> list[str]:
    return ["test_decoding", "pgoutput"] if pg.version >= 18 else ["test_decoding"]


@pytest.mark.contrib  # test_decoding on every version
@pytest.mark.parametrize("row_format", ["json", "struct"])
def test_generated_columns_include_delivers_stored_values_everywhere(
    pg: LocalPostgres, name: str, row_format: str
) -> None:
    """Changes, the snapshot and a backfill carry the stored value; typed rows type it."""
    for plugin in _include_cases(pg):
        slot = f"{name}_{plugin[:2]}"
        with pg.connect() as conn:
            conn.execute(f"CREATE TABLE {slot} (id int PRIMARY KEY, a int, "
                         "g int GENERATED ALWAYS AS (a * 2) STORED)")
            conn.execute(f"ALTER TABLE {slot} REPLICA IDENTITY FULL")
            conn.execute(f"INSERT INTO {slot} (id, a) VALUES (1, 1)")
        query = DrivenQuery(pg, {"slot": slot, "plugin": plugin, "snapshot": "initial",
                                 "include_tables": rf"public\.{slot}", "row_format": row_format,
                                 "generated_columns": "include"})
        with pg.connect() as conn:
            conn.execute(f"UPDATE {slot} SET a = 5")
        request_backfill(pg.dsn, slot, [slot])
        rows = [r for _ in range(4) for r in query.batch()]
        after = [(r["op"], _image(r["after"])) for r in rows]
        assert after == [("read", {"id": 1, "a": 1, "g": 2}),
                         ("update", {"id": 1, "a": 5, "g": 10}),
                         ("read", {"id": 1, "a": 5, "g": 10})], plugin


def _image(value: Any) -> dict[str, Any]:
    return dict(json.loads(value) if isinstance(value, str) else value)  # struct: a dict


def test_polling_with_generated_columns_include_selects_them(pg: LocalPostgres, name: str) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, a int, "
                     "g int GENERATED ALWAYS AS (a * 2) STORED)")
        conn.execute(f"INSERT INTO {name} (id, a) VALUES (1, 3)")
    source = PgCdcDataSource({"dsn": pg.dsn, "mode": "polling", "table": name,
                              "tracking_column": "id", "generated_columns": "include"})
    reader = source.streamReader(source.schema())
    end = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    rows = [row for part in reader.partitions(reader.initialOffset(), end)
            for batch in reader.read(part) for row in batch.to_pylist()]
    assert [json.loads(r["after"]) for r in rows] == [{"id": 1, "a": 3, "g": 6}]


def test_generated_columns_include_with_pgoutput_before_18_names_the_version(
    pg: LocalPostgres, name: str
) -> None:
    if pg.version >= 18:
        return  # 18 sends them: the other tests deliver them
    with pytest.raises(ConfigError, match=f"generated_columns.*this server is {pg.version}"):
        DrivenQuery(pg, {"slot": name, "generated_columns": "include"})
