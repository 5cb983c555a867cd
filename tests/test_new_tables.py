"""No row of a captured table is lost to the owner's DDL, and the rows of tables the query does
not capture never reach it, with the managed pair alone (no ``<publication>_all``).

Each DDL runs in one transaction with its rows; the reader is driven through its own calls as
Spark drives it (plan, read every partition, commit), on every tested Postgres version, with
both decoders. pgoutput never sends the rows a ``CREATE TABLE AS``/``SELECT INTO`` wrote before
the event trigger added the table: they arrive as ``read`` rows of the backfill the trigger
asked for, exactly once.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from connector_common.lsn import parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.decoding.pgoutput import pgoutput_options
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import peeking
from postgres_cdc_source.replication.publication import all_name
from postgres_cdc_source.stream.reader import PgCdcStreamReader

pytestmark = pytest.mark.services

PLUGINS = ["pgoutput", "test_decoding"]


class _Query:
    """A reader run the way Spark runs it, offsets kept from batch to batch."""

    def __init__(self, pg: LocalPostgres, **options: str) -> None:
        self.reader = PgCdcStreamReader(CdcOptions.from_options({"dsn": pg.dsn, **options}))
        self.offset: dict[str, Any] = self.reader.initialOffset()

    def batch(self) -> list[dict[str, Any]]:
        end = self.reader.latestOffset(self.offset, ReadAllAvailable())
        rows = [row for part in self.reader.partitions(self.offset, end)
                for batch in self.reader.read(part) for row in batch.to_pylist()]
        self.reader.commit(end)
        self.offset = end
        return rows

    def drain(self, batches: int = 8) -> list[tuple[str, str, Any]]:
        """Every row of the next ``batches`` batches (a backfill places a chunk per batch):
        (table, op, the new row or else the key)."""
        return [(row["table"], row["op"], json.loads(row["after"] or row["key"] or "null"))
                for _ in range(batches) for row in self.batch()]


def _rows(seen: list[tuple[str, str, Any]], table: str) -> Counter[tuple[str, str]]:
    return Counter((op, json.dumps(row, sort_keys=True)) for t, op, row in seen if t == table)


def _ops(op: str, *rows: dict[str, Any]) -> Counter[tuple[str, str]]:
    return Counter((op, json.dumps(row, sort_keys=True)) for row in rows)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_each_ddl_with_its_rows_in_one_transaction_loses_nothing(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_again (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE TABLE {name}_gains (id int NOT NULL, v text)")
        conn.execute(f"CREATE TABLE {name}_full (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {name}_gains VALUES (1, 'a'), (2, 'b')")
        conn.execute(f"INSERT INTO {name}_full VALUES (1, 'a'), (2, 'b')")
    q = _Query(pg, slot=name, plugin=plugin, include_tables=rf"public\.{name}_.*",
               backfill_chunk_rows="500")
    with pg.connect() as conn:
        with conn.transaction():  # CREATE TABLE, then its rows
            conn.execute(f"CREATE TABLE {name}_new (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {name}_new VALUES (1, 'a'), (2, 'b'), (3, 'c')")
            conn.execute(f"UPDATE {name}_new SET v = 'B' WHERE id = 2")
            conn.execute(f"DELETE FROM {name}_new WHERE id = 3")
        with conn.transaction():  # CREATE TABLE AS, more rows than a chunk, then one more row
            conn.execute(f"CREATE TABLE {name}_copy AS SELECT g AS n, 'x' || g AS s"
                         " FROM generate_series(1, 1200) AS g")
            conn.execute(f"INSERT INTO {name}_copy VALUES (0, 'later')")
        with conn.transaction():  # SELECT INTO
            conn.execute(f"SELECT g AS n INTO {name}_into FROM generate_series(1, 3) AS g")
        with conn.transaction():  # CREATE TABLE AS in a savepoint, then a key and an update
            conn.execute("SAVEPOINT s")
            conn.execute(f"CREATE TABLE {name}_keyed AS SELECT g AS id FROM"
                         " generate_series(1, 3) AS g")
            conn.execute("RELEASE s")
            conn.execute(f"ALTER TABLE {name}_keyed ADD PRIMARY KEY (id)")
            conn.execute(f"UPDATE {name}_keyed SET id = 10 WHERE id = 1")
        with conn.transaction():  # drop and create again, then its rows
            conn.execute(f"DROP TABLE {name}_again")
            conn.execute(f"CREATE TABLE {name}_again (k text PRIMARY KEY, n int)")
            conn.execute(f"INSERT INTO {name}_again VALUES ('y', 2)")
            conn.execute(f"UPDATE {name}_again SET n = 3")
        with conn.transaction():  # an identity gained, then updates and deletes
            conn.execute(f"ALTER TABLE {name}_gains ADD PRIMARY KEY (id)")
            conn.execute(f"UPDATE {name}_gains SET v = 'B' WHERE id = 2")
            conn.execute(f"DELETE FROM {name}_gains WHERE id = 1")
        with conn.transaction():  # an identity changed to FULL, then updates and deletes
            conn.execute(f"ALTER TABLE {name}_full REPLICA IDENTITY FULL")
            conn.execute(f"UPDATE {name}_full SET v = 'B' WHERE id = 2")
            conn.execute(f"DELETE FROM {name}_full WHERE id = 1")
    seen = q.drain()
    copied = "insert" if plugin == "test_decoding" else "read"  # in the stream, or backfilled
    assert _rows(seen, f"{name}_new") == _ops(
        "insert", {"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}
    ) + _ops("update", {"id": 2, "v": "B"}) + _ops("delete", {"id": 3})
    assert _rows(seen, f"{name}_copy") == _ops(
        copied, *({"n": g, "s": f"x{g}"} for g in range(1, 1201))
    ) + _ops("insert", {"n": 0, "s": "later"})
    assert _rows(seen, f"{name}_into") == _ops(copied, {"n": 1}, {"n": 2}, {"n": 3})
    assert _rows(seen, f"{name}_keyed") == _ops(copied, {"id": 2}, {"id": 3}) + _ops(
        "update", {"id": 10}) + (_ops("insert", {"id": 1}) if plugin == "test_decoding"
                                 else Counter())
    assert _rows(seen, f"{name}_again") == _ops("insert", {"k": "y", "n": 2}) + _ops(
        "update", {"k": "y", "n": 3})
    assert _rows(seen, f"{name}_gains") == _ops("update", {"id": 2, "v": "B"}) + _ops(
        "delete", {"id": 1})
    assert _rows(seen, f"{name}_full") == _ops("update", {"id": 2, "v": "B"}) + _ops(
        "delete", {"id": 1, "v": "a"})


def test_a_table_created_with_its_rows_outside_the_rules_is_not_read(
    pg: LocalPostgres, name: str
) -> None:
    """The event trigger asks every pair for a new table's rows; a query whose rules do not
    capture it ignores the request, and the next planning drops the table from its pair."""
    q = _Query(pg, slot=name, include_tables=rf"public\.{name}_.*")
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE other_{name} AS SELECT g FROM generate_series(1, 50) AS g")
        conn.execute(f"CREATE TABLE {name}_t AS SELECT 1 AS g")
    assert q.drain(3) == [(f"{name}_t", "read", {"g": 1})]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_busy_uncaptured_tables_rows_never_reach_the_reader(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """pgoutput's peek does not even return them; test_decoding's does, and the reader drops
    them before their tuples are read."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_orders (id int PRIMARY KEY)")
        conn.execute(f"CREATE TABLE busy_{name} (id bigserial PRIMARY KEY, v text)")
        conn.execute(f"CREATE TABLE quiet_{name} (v text)")  # created before, no key
    q = _Query(pg, slot=name, plugin=plugin, include_tables=rf"public\.{name}_.*")
    with pg.connect() as conn:  # in the pair from its creation to the next planning
        conn.execute(f"CREATE TABLE new_busy_{name} AS SELECT g FROM generate_series(1, 99) g")
    assert q.drain(1) == []
    with pg.connect() as conn:
        for i in range(5):
            conn.execute(f"INSERT INTO busy_{name} (v) SELECT 'noise' FROM"
                         " generate_series(1, 200)")
            conn.execute(f"INSERT INTO {name}_orders VALUES ({i})")
            conn.execute(f"INSERT INTO quiet_{name} VALUES ('x')")
        conn.execute(f"UPDATE busy_{name} SET v = 'more'")
        conn.execute(f"INSERT INTO new_busy_{name} SELECT g FROM generate_series(1, 100) g")
        if plugin == "pgoutput":
            options = q.reader.options
            pubs = peeking.publications(conn, options, 0)
            assert all_name(options.publication) not in pubs
            peeked = conn.execute(
                "SELECT count(*) FILTER (WHERE get_byte(data, 0) IN (73, 85, 68)),"
                " count(*) FILTER (WHERE get_byte(data, 0) = 82"
                f"   AND position('busy_{name}'::bytea IN data) > 0)"
                " FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, VARIADIC %s)",
                (name, [x for kv in pgoutput_options(pubs).items() for x in kv]),
            ).fetchone()
            assert peeked == (5, 0)  # the five orders, and no busy table's relation
    seen = q.drain(2)
    assert seen == [(f"{name}_orders", "insert", {"id": i}) for i in range(5)]


def test_a_slot_that_read_the_all_tables_publication_stops_after_its_position(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``all_tables_publication=true`` (the old default) reads ``<publication>_all``, and a
    new table's first rows arrive in the stream, not backfilled again. Restarted with the
    default, the query's batches from after the slot's position no longer read it (the
    batch that may be replayed still does, so a replay reads the same rows) and the trigger's
    requests take over."""
    q = _Query(pg, slot=name, include_tables=rf"public\.{name}_.*",
               all_tables_publication="true")
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_a AS SELECT 1 AS n")
    assert q.drain(2) == [(f"{name}_a", "insert", {"n": 1})]
    restarted = _Query.__new__(_Query)
    restarted.reader = PgCdcStreamReader(CdcOptions.from_options(
        {"dsn": pg.dsn, "slot": name, "include_tables": rf"public\.{name}_.*"}))
    restarted.offset = q.offset
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_b AS SELECT 2 AS n")
    r = restarted.reader
    with caplog.at_level("WARNING", logger="postgres_cdc_source"):
        end = r.latestOffset(restarted.offset, ReadAllAvailable())
    assert f"no longer reads publication {name}_all" in caplog.text
    again = PgCdcStreamReader(r.options)  # the same batch, replayed by another driver
    for reader in (r, again):
        assert [(row["table"], row["op"]) for part in reader.partitions(restarted.offset, end)
                for batch in reader.read(part) for row in batch.to_pylist()] == [
            (f"{name}_b", "insert")]
    r.commit(end)
    restarted.offset = end
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_c AS SELECT 3 AS n")
        assert all_name(name) not in peeking.publications(
            conn, r.options, parse_lsn(end["lsn"]) + 1)
    assert restarted.drain(3) == [(f"{name}_c", "read", {"n": 3})]
