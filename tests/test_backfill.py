"""Backfill on request, driven through the reader's own calls (no Spark): requests found in the
WAL, one chunk per batch placed at its marker, progress in the offsets, refusals."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from decimal import Decimal
from typing import Any

import pytest
from psycopg import sql
from pyspark.sql.types import VariantVal
from support.driven_query import DrivenQuery

from connector_common.lsn import parse_lsn
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source import snapshot
from postgres_cdc_source.backfill import cancel_backfill, request_backfill, visibility
from postgres_cdc_source.backfill.progress import ChunkPlan, TableProgress
from postgres_cdc_source.backfill.requests import main as backfill_command
from postgres_cdc_source.backfill.splice import ChunkRead
from postgres_cdc_source.errors import BackfillRefused, SourceError
from postgres_cdc_source.options import MARKER_PREFIX
from postgres_cdc_source.stream.reader import CdcPartition


@pytest.mark.parametrize(("plugin", "partitions"), [("pgoutput", "1"), ("test_decoding", "1"),
                                               ("pgoutput", "3")])
def test_a_backfill_places_chunks_in_the_stream_and_ends_with_current_values(
    pg: LocalPostgres, name: str, plugin: str, partitions: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="postgres_cdc_source.backfill")
    slot = f"{name}_{plugin}_{partitions}"
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {slot} (a int, b text, v text, PRIMARY KEY (a, b))")
        conn.execute(f"INSERT INTO {slot} SELECT i % 4, 'k' || i, 'old' FROM "
                     "generate_series(1, 25) AS i")
    query = DrivenQuery(pg, {"slot": slot, "plugin": plugin, "include_tables": rf"public\.{slot}",
                        "backfill_chunk_rows": "10", "min_partitions": partitions,
                        "min_bytes_per_partition": "1"})
    backfill = request_backfill(pg.dsn, slot, [slot], where="v <> 'skip%'")
    rows: list[dict[str, Any]] = []
    with pg.connect() as conn:
        conn.autocommit = True
        rows += query.batch()  # finds the request; first chunk
        conn.execute(f"UPDATE {slot} SET v = 'new' WHERE b = 'k25'")  # beyond the first chunk
        conn.execute(f"DELETE FROM {slot} WHERE b = 'k24'")
        replayed: list[dict[str, Any]] = []
        second = query.batch(replayed)
        rows += second
        conn.execute(f"INSERT INTO {slot} VALUES (9, 'late', 'x')")
        for _ in range(4):
            rows += query.batch()
    assert query.offset.get("backfill") is None  # done: nothing left in the offset
    reads = [r for r in rows if r["op"] == "read"]
    # every row once (k24 was read before it was deleted, 'late' inserted before its chunk)
    assert len(reads) == 26 and len({r["id"] for r in reads}) == 26
    assert all(r["commit_lsn"] == r["lsn"] and r["seq"] is None for r in reads)
    # position orders the chunks' rows among the changes as the stream placed them
    positions = [(r["position"]["commit_lsn"], r["position"]["seq"]) for r in rows]
    assert positions == sorted(positions)
    state: dict[str, Any] = {}
    for r in rows:  # a consumer replaying the stream in order
        key = r["key"]
        state.pop(key, None) if r["op"] == "delete" else state.__setitem__(key, r["after"])
    with pg.connect() as conn:
        table = {json.dumps({"a": a, "b": b}, separators=(",", ":")):
                 json.dumps({"a": a, "b": b, "v": v}, separators=(",", ":"))
                 for a, b, v in conn.execute(f"SELECT a, b, v FROM {slot}")}
    assert state == table
    # the second batch read again by a new driver: the same rows, with the same ids
    assert replayed == second and any(r["op"] == "read" for r in second)
    assert backfill in caplog.text
    # progress for monitoring: the rows of the chunks' key ranges, and a rate per chunk line
    report = query.reader.reportLatestOffset()
    assert report["backfill_requests"] == 0
    (table,) = report["backfills"].items()
    assert table[0] == f"public.{slot}"
    assert (table[1]["rows"], table[1]["chunks"]) == (26, 3) and table[1]["rows_per_second"] > 0
    assert f"public.{slot}: 26 rows at " in caplog.text


@pytest.mark.parametrize("row_format", ["struct", "variant"])
def test_a_backfill_types_its_rows_as_the_changes_around_them(
    pg: LocalPostgres, name: str, row_format: str
) -> None:
    """Typed rows through a backfill (the snapshot's reading, spliced into the stream): the
    rows read and the changes between its chunks typed alike, a decimal and a timestamp among
    them, so the stream replayed in order ends equal to the table, value for value."""
    slot = f"{name}_{row_format}"
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {slot} (id int PRIMARY KEY, amount numeric(10,2), "
                     "at timestamptz)")
        conn.execute(f"INSERT INTO {slot} SELECT i, i * 1.25, timestamptz '2024-01-02 "
                     "03:04:05.5+00' + i * interval '1 day' FROM generate_series(1, 25) AS i")
    query = DrivenQuery(pg, {"slot": slot, "include_tables": rf"public\.{slot}",
                        "backfill_chunk_rows": "10", "row_format": row_format})
    request_backfill(pg.dsn, slot, [slot])
    rows: list[dict[str, Any]] = []
    with pg.connect() as conn:
        conn.autocommit = True
        rows += query.batch()  # finds the request; first chunk
        conn.execute(f"UPDATE {slot} SET amount = 99.99, at = NULL WHERE id = 25")
        conn.execute(f"DELETE FROM {slot} WHERE id = 24")
        for _ in range(4):
            rows += query.batch()
        table = {(i,): {"id": i, "amount": amount, "at": at}
                 for i, amount, at in conn.execute(f"SELECT id, amount, at FROM {slot}")}
    assert query.offset.get("backfill") is None  # done
    assert {r["op"] for r in rows} == {"read", "update", "delete"}
    state: dict[tuple[Any, ...], Any] = {}
    for r in rows:  # a consumer replaying the stream in order
        key = tuple(_value(row_format, r["key"]).values())
        if r["op"] == "delete":
            state.pop(key, None)
        else:
            state[key] = _value(row_format, r["after"])
    assert state == table and state[(25,)]["amount"] == Decimal("99.99")


def _value(row_format: str, image: dict[str, Any]) -> dict[str, Any]:
    """A typed image as Python values: a struct's as Arrow gives it, a variant decoded."""
    if row_format == "variant":
        value: dict[str, Any] = VariantVal(image["value"], image["metadata"]).toPython()
        return value
    return image


@pytest.mark.contrib  # a test_decoding slot
def test_refusals_name_the_table_and_why(pg: LocalPostgres, name: str) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_nokey (a int)")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (name,))
    try:
        with pytest.raises(BackfillRefused, match="does not exist"):
            request_backfill(pg.dsn, name, [f"{name}_missing"])
        with pytest.raises(BackfillRefused, match=f"{name}_nokey has no primary key"):
            request_backfill(pg.dsn, name, [f"{name}_nokey"])
        with pytest.raises(BackfillRefused, match="replication slot 'nope' does not exist"):
            request_backfill(pg.dsn, "nope", [f"{name}_nokey"])
        assert backfill_command(["--dsn", pg.dsn, "--slot", name, f"{name}_nokey"]) == 2
        cancel_backfill(pg.dsn, name, "anything")
    finally:
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))


def test_a_table_the_query_does_not_capture_is_skipped_with_a_warning(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pg.connect() as conn:
        for table in (f"{name}_in", f"{name}_out"):
            conn.execute(f"CREATE TABLE {table} AS SELECT 1 AS id")
            conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id)")
    query = DrivenQuery(pg, {"slot": name, "include_tables": rf"public\.{name}_in"})
    backfill = request_backfill(pg.dsn, name, [f"{name}_out", f"{name}_in"])
    rows = query.batch() + query.batch()
    assert [(r["op"], r["table"]) for r in rows] == [("read", f"{name}_in")]
    assert f"backfill {backfill}: table public.{name}_out is not captured" in caplog.text
    assert query.offset.get("backfill") is None


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_a_request_in_a_backlog_read_in_capped_batches_is_found(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """A request written while no query listens, then a backlog the query reads in batches
    capped by ``max_bytes_per_trigger``: each batch's range is searched before the slot passes
    it (a search only once caught up found nothing: the slot was past the request by then)."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {name} SELECT i, 'old' FROM generate_series(1, 50) AS i")
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin, "include_tables": rf"public\.{name}",
                        "max_bytes_per_trigger": "64k"})
    backfill = request_backfill(pg.dsn, name, [name])
    with pg.connect() as conn:
        for first in range(1_000, 21_000, 1_000):  # 20 transactions, well over 64k of WAL
            conn.execute(f"INSERT INTO {name} SELECT i, 'new' FROM "
                         "generate_series(%s::int, %s::int) AS i", (first, first + 999))
    rows: list[dict[str, Any]] = []
    for _ in range(60):
        batch = query.batch()
        rows += batch
        if not batch and query.offset.get("backfill") is None:
            break
    assert len([o for o in query.offsets if o["lsn"] != query.offsets[0]["lsn"]]) > 2  # capped
    read = sorted(json.loads(r["after"])["id"] for r in rows if r["op"] == "read")
    assert read[:50] == list(range(1, 51)), f"backfill {backfill} never read the old rows"
    inserted = [r for r in rows if r["op"] == "insert"]
    assert len(inserted) == 20_000


def _standby_names(pg: LocalPostgres, admin: Any, value: str) -> None:
    """Set ``synchronous_standby_names`` and wait until a new session has it: the reload is
    signalled, and a session started before the server took it would commit without waiting."""
    if value:
        # ALTER SYSTEM takes no parameters
        admin.execute(sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}").format(
            sql.Literal(value)))
    else:
        admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
    admin.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 10
    while True:
        with pg.connect() as conn:
            if conn.execute("SHOW synchronous_standby_names").fetchone() == (value,):
                return
        assert time.monotonic() < deadline, f"the server never took {value!r}"
        time.sleep(0.05)


def _in_sync_rep(pg: LocalPostgres, sessions: int) -> None:
    """Wait until ``sessions`` sessions wait for a synchronous standby."""
    deadline = time.monotonic() + 10
    with pg.connect() as conn:
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                           ).fetchone() != (sessions,):
            assert time.monotonic() < deadline, "no session waits in SyncRep"
            time.sleep(0.05)


def _commit_in_thread(pg: LocalPostgres, statement: str, *params: str) -> threading.Thread:
    def run() -> None:
        with pg.connect() as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute(statement, params)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_a_chunk_is_not_read_before_changes_committed_ahead_of_its_marker_are_visible(
    pg: LocalPostgres, name: str, plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that is in the WAL before the marker but still waits for a synchronous standby
    (invisible): the chunk read waits for it, so the stream ends with its value, not the old."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (k int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {name} SELECT i, 'old' FROM generate_series(1, 5) AS i")
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin, "include_tables": rf"public\.{name}"})
    reader = query.reader
    start = parse_lsn(query.offset["lsn"])
    nonce = uuid.uuid4().hex
    threads: list[threading.Thread] = []
    with pg.connect() as admin:
        table = snapshot.describe(admin, "public", name)
        assert table is not None
        _standby_names(pg, admin, "nobody")
        try:
            threads.append(_commit_in_thread(pg, f"UPDATE {name} SET v = 'new' WHERE k = 3"))
            _in_sync_rep(pg, 1)  # committed in the WAL and the clog, not visible
            threads.append(_commit_in_thread(
                pg, "SELECT pg_logical_emit_message(true, %s, %s)", MARKER_PREFIX, nonce))
            _in_sync_rep(pg, 2)
            (flush,) = admin.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
            part = CdcPartition(start, parse_lsn(flush), backfill=ChunkRead(
                ChunkPlan("b", nonce, ("public", name), None, None, None), table))
            monkeypatch.setattr(visibility, "SETTLE_SECONDS", 0.3)
            with pytest.raises(SourceError, match=f"backfill chunk of public.{name}: "
                                                  "transactions .* committed before"):
                list(reader.read(part))
            monkeypatch.setattr(visibility, "SETTLE_SECONDS", 60.0)
            rows: list[dict[str, Any]] = []
            read = threading.Thread(target=lambda: rows.extend(
                r for b in reader.read(part) for r in b.to_pylist()))
            read.start()
            read.join(1.0)
            assert read.is_alive()  # waits for the update to become visible
        finally:
            _standby_names(pg, admin, "")
            for thread in threads:
                thread.join(10)
    read.join(10)
    assert not read.is_alive()
    three = [(r["op"], json.loads(r["after"])["v"]) for r in rows
             if r["after"] and json.loads(r["after"])["k"] == 3]
    assert three == [("update", "new"), ("read", "new")]
    assert [r["op"] for r in rows].count("read") == 5


def test_a_tables_rate_counts_the_chunks_delivered_before_the_last() -> None:
    progress = TableProgress()
    assert progress.rows_per_second == 0.0
    progress = progress.planned(100, 10.0)
    assert (progress.rows, progress.chunks, progress.rows_per_second) == (100, 1, 0.0)
    progress = progress.planned(100, 12.0).planned(30, 14.0)  # 200 rows delivered in 4 s
    assert (progress.rows, progress.chunks, progress.rows_per_second) == (230, 3, 50.0)
