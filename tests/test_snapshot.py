"""``snapshot=initial`` against the real Postgres, driven in Spark's call order in-process.

While a workload inserts, updates (keys too) and deletes rows of the same tables, the snapshot
is read in several batches of several chunks, each batch's chunks several at once, and then the
stream follows. The messages must rebuild the tables exactly, and with the exported snapshot
*strictly*: no change applies to a row the snapshot already had or lacked. The end-to-end runs
under real Spark (and the driver kill) are in test_snapshot_e2e.py.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql
from pyspark.sql.types import VariantVal
from support.snapshot_support import InProcessQuery, in_snapshot, replay

from connector_common.change_rows import READ_SEQ
from connector_common.lsn import format_lsn, parse_lsn
from iggy_spark_testing.chaos import flush_lsn
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.oracle import read_tables
from iggy_spark_testing.records import Column, TableSpec
from iggy_spark_testing.workload import Workload
from postgres_cdc_source import snapshot
from postgres_cdc_source.rows.struct.json_text import image_renderer
from postgres_cdc_source.rows.struct.structs import StructRows
from postgres_cdc_source.snapshot import reading as snapshot_reading

pytestmark = pytest.mark.services

PLUGINS = ["pgoutput", "test_decoding"]


def _options(pg: LocalPostgres, name: str, plugin: str, **extra: str) -> dict[str, str]:
    return {
        "dsn": pg.dsn, "slot": name, "plugin": plugin, "snapshot": "initial",
        "include_tables": f"{name}\\..*", "snapshot_chunk_rows": "15",
        "snapshot_max_rows_per_trigger": "45", **extra,
    }


@pytest.mark.parametrize("plugin", PLUGINS)
def test_snapshot_under_writes_then_stream_rebuilds_tables_exactly(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    work = Workload(pg.dsn, name, seed=5)
    work.setup()
    work.run(changes=400)
    run = work.start(changes=600, rate=400)  # writes on while the slot is made and read
    query = InProcessQuery(_options(pg, name, plugin))
    try:
        point = parse_lsn(query.offset["lsn"])
        reads = query.run_snapshot()
        run.join(60)
        changes = query.run_stream(flush_lsn(pg.dsn))
    finally:
        query.close()
        work.close()

    snapshot_batches = [b for b in query.batches if in_snapshot(b[0])]
    assert len(snapshot_batches) >= 3 and max(len(b[2]) for b in snapshot_batches) >= 3
    assert reads and {r["op"] for r in reads} == {"read"}
    assert {r["commit_lsn"] for r in reads} == {format_lsn(point)}
    assert {(r["position"]["commit_lsn"], r["position"]["seq"]) for r in reads} == {
        (point, READ_SEQ)}  # after every change committed at the point, before the later ones
    assert all(parse_lsn(c["commit_lsn"]) > point for c in changes)
    assert len({r["id"] for r in reads}) == len(reads)
    # the exported snapshot lived throughout: the stream is left as Postgres sent it
    assert all("reselect_until" not in end for start, end, _, _ in query.batches
               if not in_snapshot(start))
    model, problems = replay(reads + changes, work.tables, strict=True)
    assert not problems, problems[:5]
    assert model == read_tables(pg.dsn, name, work.tables.values())


def test_replayed_batch_after_a_driver_crash_reads_later_state_and_still_converges(
    pg: LocalPostgres, name: str
) -> None:
    """The driver dies mid-snapshot (its exported snapshot with it); a new reader replays the
    interrupted batch from the checkpointed offsets and finishes at the current state."""
    work = Workload(pg.dsn, name, seed=8)
    work.setup()
    work.run(changes=400)
    run = work.start(changes=600, rate=400)
    first = InProcessQuery(_options(pg, name, "pgoutput"))
    delivered = list(first.step() or [])
    planned = first.plan()
    assert planned is not None and in_snapshot(first.offset)
    end, partitions = planned
    delivered += first.read(partitions[:1])  # half the batch reached Iggy, then the crash
    first.close()

    second = InProcessQuery(_options(pg, name, "pgoutput"), offset=first.offset)
    try:
        replayed = second.reader.partitions(first.offset, end)
        assert all(p.snapshot is None for p in replayed)  # nothing to import any more
        delivered += second.read(replayed)
        second.offset = end
        delivered += second.run_snapshot()
        run.join(60)
        delivered += second.run_stream(flush_lsn(pg.dsn))
    finally:
        second.close()
        work.close()
    model, _ = replay(delivered, work.tables, strict=False)
    assert model == read_tables(pg.dsn, name, work.tables.values())


def _table_of_ids(pg: LocalPostgres, name: str, ids: str) -> sql.Identifier:
    """``<name>.t (id int PRIMARY KEY, v text)`` holding the ids ``ids`` gives for g = 1..100."""
    table = sql.Identifier(name, "t")
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table))
        conn.execute(sql.SQL("INSERT INTO {} SELECT {}, 'v' FROM generate_series(1, 100) g"
                             ).format(table, sql.SQL(ids)))
    return table


def test_chunks_hold_snapshot_chunk_rows_in_key_order(pg: LocalPostgres, name: str) -> None:
    """Bounds are found in key order: with integer keys whose text order differs (10 < 9 as
    text), each chunk still holds exactly ``snapshot_chunk_rows`` rows, the last the rest."""
    _table_of_ids(pg, name, "g")
    query = InProcessQuery(_options(pg, name, "pgoutput", snapshot_max_rows_per_trigger="1000"))
    try:
        planned = query.plan()
        assert planned is not None
        sizes = [len(query.read([p])) for p in planned[1]]
    finally:
        query.close()
    assert sizes == [15] * 6 + [10]


@pytest.mark.parametrize(("tables", "batches"), [(1, 2), (2, 4)])
def test_a_batch_full_at_the_last_tables_end_finishes_the_snapshot(
    pg: LocalPostgres, name: str, tables: int, batches: int
) -> None:
    """90 rows a table, 45 a batch: the batch ending where the last table ends also ends the
    snapshot, so no empty batch follows it; one ending where an earlier table ends does not."""
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        for t in range(tables):
            table = sql.Identifier(name, f"t{t}")
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(table))
            conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(1, 90)").format(table))
    query = InProcessQuery(_options(pg, name, "pgoutput"))
    try:
        reads = query.run_snapshot()
    finally:
        query.close()
    assert len(reads) == 90 * tables
    assert [len(b[3]) for b in query.batches] == [45] * batches
    assert not in_snapshot(query.batches[-1][1])


def test_a_replayed_batch_reads_the_chunks_its_offset_pinned(
    pg: LocalPostgres, name: str
) -> None:
    """Rows deleted and inserted inside an interrupted batch's range before its replay: the
    new reader reads the chunks the offset pinned, so every row goes to the Spark partition
    that had its key the first time (the sink's replay reads back what each task landed), and
    each chunk holds what its range holds now."""
    table = _table_of_ids(pg, name, "g * 10")
    first = InProcessQuery(_options(pg, name, "pgoutput"))
    planned = first.plan()
    assert planned is not None
    end, partitions = planned
    bounds = [(p.table.table, p.lo, p.hi) for p in partitions]
    assert len(bounds) >= 3
    first.close()  # the driver dies, and its exported snapshot with it
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DELETE FROM {} WHERE id <= 200").format(table))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g * 10 + 5, 'new' FROM generate_series(1, 60) g"
                             ).format(table))
    second = InProcessQuery(_options(pg, name, "pgoutput"), offset=first.offset)
    try:
        replayed = second.reader.partitions(first.offset, end)
        assert [(p.table.table, p.lo, p.hi) for p in replayed] == bounds
        unpinned = {k: v for k, v in end.items() if k != "planned"}
        assert [(p.table.table, p.lo, p.hi) for p in second.reader.partitions(
            first.offset, unpinned)] != bounds  # bounds found again would split otherwise
        keys = [sorted(orjson.loads(r["key"])["id"] for r in second.read([p]))
                for p in replayed]
    finally:
        second.close()
    now = [*range(210, 1001, 10), *range(15, 606, 10)]
    assert keys == [sorted(k for k in now if (lo is None or k > int(lo[0]))
                           and (hi is None or k <= int(hi[0]))) for _, lo, hi in bounds]


_DOCS = TableSpec("docs", (Column("id", "int", "int"), Column("n", "int", "int"),
                           Column("body", "text", "text")), ("id",))


@pytest.mark.parametrize("row_format", ["json", "struct", "variant"])
@pytest.mark.parametrize("plugin", PLUGINS)
def test_resumed_snapshot_completes_unchanged_toast_values_from_the_table(
    pg: LocalPostgres, name: str, plugin: str, row_format: str
) -> None:
    """After the exported snapshot is lost, a late chunk reads row 1 as the row that took key 1
    since; the stream's key change 1 -> 2 leaves the large body unchanged, so a consumer would
    copy the newcomer's body to key 2. Changes up to the horizon, and key changes after it, carry
    the body read from the table; a same-key update after the horizon is left as sent. Typed
    rows are completed alike: rendered back to JSON, they are the JSON mode's."""
    table = sql.Identifier(name, "docs")
    big = "SELECT string_agg(md5(%s || g::text), '') FROM generate_series(1, 400) g"

    def run(statement: str, *params: object) -> None:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL(statement).format(t=table, s=sql.Identifier(name)), params)

    run("CREATE SCHEMA {s}")
    run("CREATE TABLE {t} (id int PRIMARY KEY, n int, body text)")
    run("ALTER TABLE {t} ALTER body SET STORAGE EXTERNAL")  # out of line, never compressed
    run(f"INSERT INTO {{t}} VALUES (1, 0, ({big}))", "first")
    options = _options(pg, name, plugin, row_format=row_format)
    first = InProcessQuery(options)
    first.close()  # the driver dies before the first batch: the exported snapshot is gone
    run("UPDATE {t} SET id = 2 WHERE id = 1")  # body unchanged: not logged
    run(f"INSERT INTO {{t}} VALUES (1, 0, ({big}))", "second")
    second = InProcessQuery(options, offset=first.offset)
    try:
        delivered = second.run_snapshot() + second.run_stream(flush_lsn(pg.dsn))
        horizon = second.offset["reselect_until"]
        run("UPDATE {t} SET id = 3 WHERE id = 2")  # a key change after the horizon
        run("UPDATE {t} SET n = 1 WHERE id = 3")  # same key: the consumer's row is right
        later = second.run_stream(flush_lsn(pg.dsn))
    finally:
        second.close()
    if row_format != "json":
        delivered, later = (_as_json(second, rows) for rows in (delivered, later))
    moved, inserted = [c for c in delivered if c["op"] != "read"]
    assert parse_lsn(moved["commit_lsn"]) <= parse_lsn(horizon)
    assert moved["unchanged"] == [] and "body" in orjson.loads(moved["after"])
    assert inserted["op"] == "insert"
    moved_again, same_key = later
    assert moved_again["unchanged"] == [] and "body" in orjson.loads(moved_again["after"])
    assert same_key["unchanged"] == ["body"] and "body" not in orjson.loads(same_key["after"])
    model, _ = replay(delivered + later, {"docs": _DOCS}, strict=False)
    assert model == read_tables(pg.dsn, name, [_DOCS])


def _as_json(query: InProcessQuery, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ``row_format=struct`` query's rows with the JSON mode's ``key`` and ``after`` text; a
    ``variant`` one's decoded to JSON (the same for the table's int and text columns)."""
    typed = query.reader.rows
    if isinstance(typed, StructRows):
        key, after = image_renderer(typed.key), image_renderer(typed.row)
        return [{**r, "key": key(r["key"], ()), "after": after(r["after"], r["unchanged"])}
                for r in rows]

    def text(image: dict[str, bytes] | None) -> str | None:
        return None if image is None else orjson.dumps(
            VariantVal(image["value"], image["metadata"]).toPython()).decode()
    return [{**r, "key": text(r["key"]), "after": text(r["after"])} for r in rows]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_table_without_primary_key_is_read_in_page_ranges(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        table = sql.Identifier(name, "log")
        conn.execute(sql.SQL("CREATE TABLE {} (n int, v text)").format(table))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g % 50, repeat('x', 200) FROM "
                             "generate_series(1, 600) g").format(table))
        conn.execute(sql.SQL("ANALYZE {}").format(table))
    query = InProcessQuery(_options(pg, name, plugin, snapshot_chunk_rows="100",
                                    snapshot_max_rows_per_trigger="1000000"))
    try:
        reads = query.run_snapshot()
    finally:
        query.close()
    (batch,) = query.batches
    assert len(batch[2]) >= 5  # page ranges, one partition each
    assert all(p.table.chunk_key == ("ctid",) for p in batch[2])
    assert sorted((orjson.loads(r["after"])["n"]) for r in reads) == sorted(
        g % 50 for g in range(1, 601))
    assert {r["key"] for r in reads} == {None}  # no replica identity: like the decoders
    assert len({r["id"] for r in reads}) == 600


_TYPES = """\
CREATE TYPE {schema}.mood AS ENUM ('sad', 'ok');
CREATE DOMAIN {schema}.posint AS int CHECK (VALUE > 0);"""
# (column, value): every converter, NULL and NaN; the last six have no SQL rendering
# (sql_json), so without them the snapshot builds the JSON in Postgres, with them in Python
_COLUMNS = [
    ("id int PRIMARY KEY", "1"), ('"p%s" text', "'%'"), ("b boolean", "true"),
    ("i2 smallint", "-3"),
    ("i8 bigint", "9007199254740993"), ("n numeric(10,3)", "12.5"),
    ("t text", "E'a''b\"c\\\\ \u00e9 \U0001F980\n\x01'"), ("c char(5)", "'ab'"),
    ("vc varchar(9)", "'x y'"), ("j json", "'{{\"k\": [1,  2.50]}}'"),
    ("jb jsonb", "'{{\"k\": [1, 2.50]}}'"), ("d date", "'2024-02-29'"),
    ("ts timestamp", "'2024-01-02 03:04:05.5'"), ("tz timestamptz", "'2024-01-02 03:04:05+05'"),
    ("tzi timestamptz", "'-infinity'"), ("iv interval", "'1 day 2 hours'"),
    ("u uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"), ("ip inet", "'10.1.2.3'"),
    ("m {schema}.mood", "'ok'"), ("p {schema}.posint", "7"), ("nul text", "NULL"),
    ("r real", "1.1"), ("f float8", "0.1"), ("fnan float8", "'NaN'"), ("by bytea", "'\\x00ff'"),
    ("ia int[]", "'{{1,NULL,3}}'"), ("ta text[]", "'{{\"a b\",NULL,\"c,d\"}}'"),
]
_IN_PYTHON = 6


def _wide_table(schema: str, in_sql: bool) -> tuple[str, str]:
    """CREATE TABLE and INSERT of the one-row table the identity test reads."""
    columns = _COLUMNS[:-_IN_PYTHON] if in_sql else _COLUMNS
    create = (f"CREATE TABLE {{schema}}.\"wi%de\" ({', '.join(c for c, _ in columns)}, "
              "g int GENERATED ALWAYS AS (id * 2) STORED)")
    insert = f"INSERT INTO {{schema}}.\"wi%de\" VALUES ({', '.join(v for _, v in columns)})"
    return create.format(schema=schema), insert.format(schema=schema)


@pytest.mark.parametrize(("plugin", "in_sql", "key_from"), [
    ("pgoutput", True, "key"), ("test_decoding", True, "key"), ("pgoutput", False, "key"),
    ("test_decoding", False, "key"), ("pgoutput", True, "i2")])
def test_snapshot_row_is_what_the_decoder_gives_for_the_same_row(
    pg: LocalPostgres, name: str, plugin: str, in_sql: bool, key_from: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Read by the snapshot, then deleted and inserted again: ``after``, ``key`` and the routing
    columns of the snapshot row equal those of the decoded insert, for every type, whether the
    snapshot's JSON was built by Postgres or in Python (as it is for routes by a column)."""
    create, insert = _wide_table(name, in_sql)
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(_TYPES.format(schema=name))
        conn.execute(create)
        conn.execute(insert)
        table = snapshot.describe(conn, name, "wi%de")  # '%' in names: the queries escape it
    assert table is not None
    assert (snapshot_reading._json_columns(table, 0) is not None) is in_sql
    options = _options(pg, name, plugin, topic_from="table", partition_key_from=key_from)
    query = InProcessQuery(options, available_now=True)
    try:
        with caplog.at_level(logging.INFO, logger="postgres_cdc_source.stream.coordinator"):
            (read,) = query.run_snapshot()
        assert "snapshot complete" in caplog.text  # the per-batch progress line
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(name, "wi%de")))
            conn.execute(insert)
        # the target first: WAL the server writes meanwhile (a running-transactions record)
        # would put it past the next run's ceiling
        upto = flush_lsn(pg.dsn)
        query.reader.prepareForTriggerAvailableNow()  # the next availableNow run
        changes = query.run_stream(upto)
    finally:
        query.close()
    insert = next(c for c in changes if c["op"] == "insert")
    expected: dict[str, Any] = {k: insert[k] for k in ("schema", "table", "key", "after",
                                                       "unchanged", "topic", "partition_key")}
    assert {k: read[k] for k in expected} == expected
    assert read["partition_key"] == ("-3" if key_from == "i2" else read["key"])
    assert "g" not in orjson.loads(read["after"])  # generated columns are not published
    assert query.batches[0][2][0].snapshot is not None  # read in the exported snapshot
    assert read["lsn"] == read["commit_lsn"] == query.batches[0][0]["lsn"]
    assert read["xid"] is None and read["seq"] is None and read["before"] is None


@pytest.mark.contrib  # a test_decoding slot
def test_existing_slot_falls_back_to_the_current_state(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A slot made before the query cannot export a snapshot of its position: the tables are
    read as they are, and the stream from the slot repeats what changed since."""
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(
            sql.Identifier(name, "t")))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (name,))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'a'), (2, 'b')").format(
            sql.Identifier(name, "t")))
    with caplog.at_level(logging.WARNING):
        query = InProcessQuery(_options(pg, name, "test_decoding"))
    try:
        assert "already existed" in caplog.text
        reads = query.run_snapshot()
        changes = query.run_stream(flush_lsn(pg.dsn))
    finally:
        query.close()
    assert sorted(orjson.loads(r["after"])["id"] for r in reads) == [1, 2]
    assert [c["op"] for c in changes] == ["insert", "insert"]  # the same rows, again
