"""The key of a change is the identity it was written with, not the table's at read time.

The issue's reproduction, read through the streaming reader with both decoders: a key column
renamed and a primary key moved to another column, later in the same batch than the changes.
"""

from __future__ import annotations

import json
import logging

import pytest
from test_publication import batch, reader

from connector_common.lsn import parse_lsn
from iggy_spark_testing.harness import LocalPostgres

pytestmark = pytest.mark.services


def _written_then_altered(pg: LocalPostgres, name: str) -> None:
    with pg.connect() as conn:
        for sql in (
            f"INSERT INTO {name}_t VALUES (1, 'a'), (2, 'b')",
            f"UPDATE {name}_t SET id = 10 WHERE id = 1",
            f"DELETE FROM {name}_t WHERE id = 2",
            f"ALTER TABLE {name}_t RENAME COLUMN id TO key_id",
            f"INSERT INTO {name}_u VALUES (1, 'one'), (2, 'two')",
            f"UPDATE {name}_u SET id = 20 WHERE id = 2",
            f"DELETE FROM {name}_u WHERE id = 1",
        ):
            conn.execute(sql)
        with conn.transaction():
            conn.execute(f"ALTER TABLE {name}_u DROP CONSTRAINT {name}_u_pkey")
            conn.execute(f"ALTER TABLE {name}_u ADD PRIMARY KEY (code)")
        conn.execute(f"INSERT INTO {name}_u VALUES (3, 'three')")


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_keys_are_the_ones_the_changes_were_written_with(
    pg: LocalPostgres, name: str, plugin: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_t (id int PRIMARY KEY, data text)")
        conn.execute(f"CREATE TABLE {name}_u (id int PRIMARY KEY, code text NOT NULL)")
    r = reader(pg, name, plugin=plugin, include_tables=rf"public\.{name}_.*")
    start = parse_lsn(r.initialOffset()["lsn"])
    _written_then_altered(pg, name)
    with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
        _, rows = batch(r, start)
    seen = [(row["table"][len(name) + 1:], row["op"], json.loads(row["key"] or "null"))
            for row in rows]
    logged = [  # the key Postgres logged with each update and delete
        ("t", "update", {"id": 1}),
        ("t", "delete", {"id": 2}),
        ("u", "update", {"id": 2}),
        ("u", "delete", {"id": 1}),
    ]
    assert [c for c in seen if c[1] != "insert"] == logged
    inserts = [c for c in seen if c[1] == "insert"]
    if plugin == "pgoutput":  # the Relation message says which columns were the key
        assert inserts == [("t", "insert", {"id": 1}), ("t", "insert", {"id": 2}),
                           ("u", "insert", {"id": 1}), ("u", "insert", {"id": 2}),
                           ("u", "insert", {"code": "three"})]
        assert "key is null" not in caplog.text
    else:
        # test_decoding prints no key for an insert: the catalog's key column is gone from t's
        # rows, so their key is null, and a warning says so; u's key moved between columns
        # both rows have, which nothing in the output shows (documented: pg_cdc, Keys)
        assert inserts == [("t", "insert", None), ("t", "insert", None),
                           ("u", "insert", {"code": "one"}), ("u", "insert", {"code": "two"}),
                           ("u", "insert", {"code": "three"})]
        assert f"public.{name}_t changed" in caplog.text and "key is null" in caplog.text
