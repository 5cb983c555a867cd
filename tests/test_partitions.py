"""Partitioned tables as the rules name them, on every tested Postgres version, driven through
the reader's own calls as Spark drives it: a rule matching a partitioned table captures all its
partitions (created or attached later too), and its changes, snapshot, backfill, polled and
typed rows name it; a cross-partition ``UPDATE`` is a delete and an insert; a detached
partition is the root's no more; the warnings at start name what the rules matched."""

from __future__ import annotations

import json
import logging
from datetime import date, timedelta
from typing import Any

import psycopg
import pytest
from support.driven_query import DrivenQuery

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.backfill import request_backfill
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.polling.reader import PgPollingStreamReader
from postgres_cdc_source.replication.publication import MARKER, inserts_name

pytestmark = pytest.mark.services

PLUGINS = ["pgoutput", "test_decoding"]


def _create(conn: psycopg.Connection[Any], table: str, *, key: bool = True) -> None:
    """``table`` partitioned by month of ``at``, with November and December 2026."""
    primary = ", PRIMARY KEY (id, at)" if key else ""
    conn.execute(f"CREATE TABLE {table} (id int NOT NULL, at date NOT NULL, v text{primary})"
                 " PARTITION BY RANGE (at)")
    conn.execute(f"CREATE TABLE {table}_2026_11 PARTITION OF {table}"
                 " FOR VALUES FROM ('2026-11-01') TO ('2026-12-01')")
    conn.execute(f"CREATE TABLE {table}_2026_12 PARTITION OF {table}"
                 " FOR VALUES FROM ('2026-12-01') TO ('2027-01-01')")


def _seen(rows: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    return [(r["table"], r["op"], json.loads(r["after"] or r["key"] or "null")) for r in rows]


def _drop(pg: LocalPostgres, slot: str) -> None:
    with pg.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                     " WHERE slot_name = %s", (slot,))


@pytest.mark.parametrize("plugin", PLUGINS)
def test_changes_of_every_partition_name_the_partitioned_table(
    pg: LocalPostgres, name: str, plugin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two partitions, a third created (and filled in the same transaction) while the stream
    runs, a row moved across partitions by an UPDATE: every change names the table the rule
    names, and the move is a delete and an insert."""
    with pg.connect() as conn:
        _create(conn, name)
    with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
        query = DrivenQuery(pg, {"slot": name, "plugin": plugin,
                                 "include_tables": rf"public\.{name}"})
    assert "partitions of" not in caplog.text and "match no table" not in caplog.text
    try:
        with pg.connect() as conn:
            conn.execute(f"INSERT INTO {name} VALUES (1, '2026-11-05', 'a'), "
                         "(2, '2026-12-05', 'b')")
        first = _seen(query.batch())
        with pg.connect() as conn, conn.transaction():
            conn.execute(f"CREATE TABLE {name}_2027_01 PARTITION OF {name}"
                         " FOR VALUES FROM ('2027-01-01') TO ('2027-02-01')")
            conn.execute(f"INSERT INTO {name} VALUES (3, '2027-01-05', 'c')")
        with pg.connect() as conn:
            conn.execute(f"UPDATE {name} SET at = '2027-01-09' WHERE id = 1")  # 11 -> 2027-01
            conn.execute(f"UPDATE {name} SET v = 'B' WHERE id = 2")  # stays in its partition
            conn.execute(f"INSERT INTO {name}_2026_12 VALUES (4, '2026-12-24', 'd')")  # directly
        second = _seen(query.batch())
    finally:
        _drop(pg, name)
    assert first == [(name, "insert", {"id": 1, "at": "2026-11-05", "v": "a"}),
                     (name, "insert", {"id": 2, "at": "2026-12-05", "v": "b"})]
    assert second == [
        (name, "insert", {"id": 3, "at": "2027-01-05", "v": "c"}),
        (name, "delete", {"id": 1, "at": "2026-11-05"}),  # the move: its old key ...
        (name, "insert", {"id": 1, "at": "2027-01-09", "v": "a"}),  # ... and the new row
        (name, "update", {"id": 2, "at": "2026-12-05", "v": "B"}),
        (name, "insert", {"id": 4, "at": "2026-12-24", "v": "d"}),
    ]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_truncate_of_the_table_is_one_truncate_and_of_a_partition_none(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """As pgoutput publishes them under publish_via_partition_root: a truncate of one partition
    is not the table's (a truncate of the table would empty it all for a consumer)."""
    with pg.connect() as conn:
        _create(conn, name)
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin,
                             "include_tables": rf"public\.{name}"})
    try:
        with pg.connect() as conn:
            conn.execute(f"TRUNCATE {name}_2026_12")
            conn.execute(f"INSERT INTO {name} VALUES (1, '2026-11-05', 'a')")
            conn.execute(f"TRUNCATE {name}")
        seen = _seen(query.batch())
    finally:
        _drop(pg, name)
    assert seen == [(name, "insert", {"id": 1, "at": "2026-11-05", "v": "a"}),
                    (name, "truncate", None)]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_detached_partition_leaves_and_an_attached_table_joins_without_its_rows(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """DETACH: the table's later changes are not the root's (the rule does not match it). ATTACH:
    the rows the table held are no changes; its later changes are the root's, and a backfill of
    the root reads the rows it brought, key ranges across the partitions."""
    with pg.connect() as conn:
        _create(conn, name)
        conn.execute(f"CREATE TABLE {name}_2027_01 (LIKE {name} INCLUDING ALL)")
        conn.execute(f"INSERT INTO {name}_2027_01 VALUES (10, '2027-01-02', 'old')")
        conn.execute(f"INSERT INTO {name} VALUES (1, '2026-11-05', 'a'), (2, '2026-12-05', 'b')")
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin, "backfill_chunk_rows": "2",
                             "include_tables": rf"public\.{name}"})
    try:
        with pg.connect() as conn:
            conn.execute(f"INSERT INTO {name}_2027_01 VALUES (11, '2027-01-03', 'old')")
            conn.execute(f"INSERT INTO {name} VALUES (3, '2026-11-06', 'c')")
        assert _seen(query.batch()) == [(name, "insert", {"id": 3, "at": "2026-11-06",
                                                          "v": "c"})]
        with pg.connect() as conn:
            conn.execute(f"ALTER TABLE {name} DETACH PARTITION {name}_2026_12")
            conn.execute(f"ALTER TABLE {name} ATTACH PARTITION {name}_2027_01"
                         " FOR VALUES FROM ('2027-01-01') TO ('2027-02-01')")
            conn.execute(f"INSERT INTO {name}_2026_12 VALUES (5, '2026-12-06', 'gone')")
            conn.execute(f"UPDATE {name} SET v = 'new' WHERE id = 10")
        assert _seen(query.batch()) == [(name, "update", {"id": 10, "at": "2027-01-02",
                                                          "v": "new"})]
        request_backfill(pg.dsn, name, [name])
        rows = [r for _ in range(5) for r in query.batch()]
    finally:
        _drop(pg, name)
    reads = sorted(((t, v) for t, op, v in _seen(rows) if op == "read"),
                   key=lambda r: r[1]["id"])  # a chunk's rows in the order its scan met them
    assert reads == [(name, {"id": i, "at": at, "v": v}) for i, at, v in [
        (1, "2026-11-05", "a"), (3, "2026-11-06", "c"), (10, "2027-01-02", "new"),
        (11, "2027-01-03", "old")]]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_the_initial_snapshot_reads_a_partitioned_table_whole(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """snapshot=initial of a partitioned table with a key (chunked in key ranges across its
    partitions) and of one without (read whole, a row's id naming its partition), then its
    changes."""
    with pg.connect() as conn:
        _create(conn, name)
        _create(conn, f"{name}_nokey", key=False)
        for table in (name, f"{name}_nokey"):  # same ctid in each partition
            conn.execute(f"INSERT INTO {table} SELECT i, DATE '2026-11-01' + i * 10, 'v'"
                         " FROM generate_series(1, 5) AS i")
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin, "snapshot": "initial",
                             "snapshot_chunk_rows": "2",
                             "include_tables": rf"public\.{name}(_nokey)?"})
    try:
        rows = [r for _ in range(6) for r in query.batch()]
        with pg.connect() as conn:
            conn.execute(f"INSERT INTO {name}_nokey VALUES (6, '2026-12-31', 'w')")
        rows += query.batch()
    finally:
        _drop(pg, name)
    expected = [{"id": i, "at": (date(2026, 11, 1) + timedelta(days=i * 10)).isoformat(),
                 "v": "v"} for i in range(1, 6)]
    seen = _seen(rows)
    for table in (name, f"{name}_nokey"):
        assert sorted((r for t, op, r in seen if t == table and op == "read"),
                      key=lambda r: r["id"]) == expected
    assert seen[-1] == (f"{name}_nokey", "insert", {"id": 6, "at": "2026-12-31", "v": "w"})
    ids = [r["id"] for r in rows if r["op"] == "read"]
    assert len(ids) == len(set(ids)) == 10


def test_polling_a_partitioned_table_without_a_key_gives_each_row_its_own_id(
    pg: LocalPostgres, name: str
) -> None:
    """mode=polling reads a partitioned table whole; without a key a row's id is its place,
    which names its partition (the first rows of two partitions share a ctid)."""
    with pg.connect() as conn:
        _create(conn, name, key=False)
        conn.execute(f"INSERT INTO {name} VALUES (1, '2026-11-05', 'a'), (2, '2026-12-05', 'b')")
    reader = PgPollingStreamReader(CdcOptions.from_options({
        "dsn": pg.dsn, "mode": "polling", "table": name, "tracking_column": "at"}))
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    rows = [r for p in reader.partitions(start, end) for b in reader.read(p)
            for r in b.to_pylist()]
    assert _seen(rows) == [(name, "read", {"id": 1, "at": "2026-11-05", "v": "a"}),
                           (name, "read", {"id": 2, "at": "2026-12-05", "v": "b"})]
    assert len({r["id"] for r in rows}) == 2


@pytest.mark.parametrize("plugin", PLUGINS)
def test_typed_rows_of_a_partitioned_table_have_its_struct(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    with pg.connect() as conn:
        _create(conn, name)
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin, "row_format": "struct",
                             "include_tables": rf"public\.{name}"})
    try:
        assert list(query.reader.rows.fixed_tables) == [f"public.{name}"]  # type: ignore[arg-type]
        with pg.connect() as conn:
            conn.execute(f"INSERT INTO {name} VALUES (1, '2026-11-05', 'a'), "
                         "(2, '2026-12-05', 'b')")
            conn.execute(f"UPDATE {name} SET at = '2026-11-30' WHERE id = 2")
        rows = query.batch()
    finally:
        _drop(pg, name)
    assert [(r["table"], r["op"], r["key"]["id"], str(r["after"]["at"]) if r["after"] else None)
            for r in rows] == [(name, "insert", 1, "2026-11-05"), (name, "insert", 2, "2026-12-05"),
                               (name, "delete", 2, None), (name, "insert", 2, "2026-11-30")]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_non_superuser_owner_captures_partitions_created_later(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """No event trigger and no superuser: the managed pair holds the partitioned table, which
    covers a partition its owner creates and fills in one transaction."""
    with pg.connect() as conn:
        conn.execute(f"CREATE DATABASE {name}")
        conn.execute(f"CREATE ROLE {name} LOGIN REPLICATION")
        conn.execute(f"GRANT CREATE ON DATABASE {name} TO {name}")
    with psycopg.connect(f"{pg.dsn} dbname={name}", autocommit=True) as conn:
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {name}")
    dsn = f"host=127.0.0.1 port={pg.port} dbname={name} user={name}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            _create(conn, "events")
            conn.execute("INSERT INTO events VALUES (1, '2026-11-05', 'a')")
        source = DrivenQuery(_Dsn(dsn), {  # type: ignore[arg-type]
            "slot": name, "plugin": plugin, "snapshot": "initial",
            "include_tables": r"public\.events"})
        rows = [r for _ in range(2) for r in source.batch()]
        with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
            conn.execute("CREATE TABLE events_2027_01 PARTITION OF events"
                         " FOR VALUES FROM ('2027-01-01') TO ('2027-02-01')")
            conn.execute("INSERT INTO events VALUES (2, '2027-01-05', 'b'), (3, '2026-12-05', 'c')")
        rows += source.batch()
    finally:
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                         " WHERE slot_name = %s", (name,))
            conn.execute(f"DROP DATABASE {name} (FORCE)")
    assert _seen(rows) == [("events", "read", {"id": 1, "at": "2026-11-05", "v": "a"}),
                           ("events", "insert", {"id": 2, "at": "2027-01-05", "v": "b"}),
                           ("events", "insert", {"id": 3, "at": "2026-12-05", "v": "c"})]


class _Dsn:
    """A server reached as another role: what :class:`DrivenQuery` reads of ``pg``."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn


def test_the_warnings_at_start_name_what_the_rules_matched(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pg.connect() as conn:
        _create(conn, name)
    try:
        with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
            DrivenQuery(pg, {"slot": name,
                             "include_tables": rf"public\.{name}_none"})
        assert "include_tables/exclude_tables match no table of the database" in caplog.text
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
            DrivenQuery(pg, {"slot": name,
                             "include_tables": rf"public\.{name}_.*"})
        assert (f"match partitions of the partitioned table public.{name} "
                f"(public.{name}_2026_11, public.{name}_2026_12) but not the table itself"
                in caplog.text)
        assert "match no table" not in caplog.text
    finally:
        _drop(pg, name)


@pytest.mark.parametrize(("rule", "named_as"), [(".*", ""), ("_.*", "_2026_11")])
def test_a_pair_made_before_partitioned_tables_publishes_through_them_from_the_next_start(
    pg: LocalPostgres, name: str, rule: str, named_as: str
) -> None:
    """A managed pair created by an earlier release (no publish_via_partition_root, the
    partitions as members) is altered at start: a query whose rule matches the partitioned
    table then holds and names it; one whose rule matches only its partitions keeps them, and
    their names."""
    with pg.connect() as conn:
        _create(conn, name)
        for pub, publish in ((name, "insert, update, delete, truncate"),
                             (inserts_name(name), "insert, truncate")):
            conn.execute(f"CREATE PUBLICATION {pub} WITH (publish = '{publish}')")
            conn.execute(f"COMMENT ON PUBLICATION {pub} IS '{MARKER}'")
        conn.execute(f"ALTER PUBLICATION {name} ADD TABLE {name}_2026_11, {name}_2026_12")
    query = DrivenQuery(pg, {"slot": name, "include_tables": rf"public\.{name}{rule}"})
    try:
        with pg.connect() as conn:
            via_root = conn.execute("SELECT bool_and(pubviaroot) FROM pg_publication"
                                    " WHERE pubname IN (%s, %s)", (name, inserts_name(name))
                                    ).fetchone()
            members = conn.execute("SELECT prrelid::regclass::text FROM pg_publication_rel r"
                                   " JOIN pg_publication p ON p.oid = r.prpubid"
                                   " WHERE p.pubname = %s ORDER BY 1", (name,)).fetchall()
            conn.execute(f"INSERT INTO {name} VALUES (1, '2026-11-05', 'a')")
        named = _seen(query.batch())
    finally:
        _drop(pg, name)
    assert via_root == (True,)
    assert members == ([(name,)] if not named_as
                       else [(f"{name}_2026_11",), (f"{name}_2026_12",)])
    assert named == [(name + named_as, "insert", {"id": 1, "at": "2026-11-05", "v": "a"})]
