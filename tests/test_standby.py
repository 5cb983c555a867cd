"""Reading a hot standby (Postgres 16+), driven through the reader's own calls (no Spark).

Each version from 16 on gets a primary and a ``pg_basebackup -R`` standby of it
(hot_standby_feedback on, a physical slot on the primary). The query reads the standby; what
it writes goes to the primary through ``primary_dsn`` (the managed publications, the event
trigger, the requests table, backfill markers) or, without it, nothing does. Promotion comes
last: it ends the pair.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.driven_query import DrivenQuery, rows_of

from connector_common.lsn import parse_lsn
from iggy_spark_testing.harness import LocalPostgres, LocalStandby
from postgres_cdc_source.backfill import request_backfill
from postgres_cdc_source.errors import ConfigError, SlotError
from postgres_cdc_source.health import SourceHealth
from postgres_cdc_source.options import CdcOptions

pytestmark = pytest.mark.services


class Pair:
    def __init__(self, primary: LocalPostgres, standby: LocalStandby) -> None:
        self.primary = primary
        self.standby = standby

    def replayed(self) -> None:
        """Wait until the standby has replayed everything the primary has written."""
        with self.primary.connect() as conn:
            row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0')::int8").fetchone()
        assert row is not None
        deadline = time.monotonic() + 30
        while self.standby.replayed() < int(row[0]):
            assert time.monotonic() < deadline, "the standby did not replay in 30 s"
            time.sleep(0.02)

    def slot(self, server: LocalPostgres, slot: str) -> tuple[int, int] | None:
        with server.connect() as conn:
            row = conn.execute("SELECT (restart_lsn - '0/0')::int8,"
                               " (confirmed_flush_lsn - '0/0')::int8 FROM pg_replication_slots"
                               " WHERE slot_name = %s", (slot,)).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))


def _installed(version: int) -> bool:
    try:
        LocalPostgres(version=version)
    except FileNotFoundError:
        return False
    return True


VERSIONS = [v for v in (16, 17, 18) if _installed(v)]
"""The versions a standby decodes on (16+) whose servers are here."""


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    with LocalPostgres(version=request.param) as primary, \
            LocalStandby(primary, sync_slots=False) as standby:
        yield Pair(primary, standby)


def _ids(rows: list[dict[str, Any]], op: str = "insert") -> list[int]:
    return [json.loads(r["after"])["id"] for r in rows if r["op"] == op]


def test_changes_written_on_the_primary_arrive_through_the_standbys_slot(
    pair: Pair, name: str
) -> None:
    with pair.primary.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    pair.replayed()
    query = DrivenQuery(pair.standby, {"slot": name, "include_tables": rf"public\.{name}.*",
                                       "primary_dsn": pair.primary.dsn,
                                       "max_bytes_per_trigger": "8kB"})
    assert pair.slot(pair.standby, name) is not None
    assert pair.slot(pair.primary, name) is None  # the primary carries no decoding
    with pair.primary.connect() as conn:  # the managed pair, made there
        pubs = conn.execute("SELECT pubname FROM pg_publication WHERE pubname LIKE %s"
                            " ORDER BY 1", (f"{name}%",)).fetchall()
        assert pubs == [(name,), (f"{name}_inserts",)]
        for i in range(1, 201):
            conn.execute(f"INSERT INTO {name} VALUES (%s, 'x')", (i,))
        conn.execute(f"UPDATE {name} SET v = 'y' WHERE id = 7")
    pair.replayed()
    reader, rows, batches = query.reader, [], 0
    while True:
        start = query.offset
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        rows += rows_of(reader, start, end)
        slot = pair.slot(pair.standby, name)
        assert slot is not None and slot[1] <= parse_lsn(start["lsn"])  # not before commit
        reader.commit(end)
        slot = pair.slot(pair.standby, name)
        assert slot is not None and slot[1] == parse_lsn(end["lsn"])  # at the batch's end
        query.offset = end
        batches += 1
    assert batches >= 2
    assert _ids(rows) == list(range(1, 201))
    assert _ids(rows, "update") == [7]
    # a table created on the primary later joins the pair there (the event trigger: its rows
    # of the creating transaction too)
    with pair.primary.connect() as conn:
        with conn.transaction():
            conn.execute(f"CREATE TABLE {name}_new (id int PRIMARY KEY)")
            conn.execute(f"INSERT INTO {name}_new VALUES (1), (2)")
        conn.execute(f"INSERT INTO {name}_new VALUES (3)")
    pair.replayed()
    later = query.batch() + query.batch()
    assert [(r["table"], json.loads(r["after"])["id"]) for r in later] == [
        (f"{name}_new", 1), (f"{name}_new", 2), (f"{name}_new", 3)]
    health = reader.reportLatestOffset()
    assert health["slot_lag_bytes"] >= 0 and health["wal_status"] == "reserved"
    parsed = SourceHealth.from_progress(json.dumps(health))
    assert parsed is not None and parsed.slot is not None
    assert parsed.slot.slot_lag_bytes < 65536  # measured against the replay position
    reader.stop()


def test_a_backfill_requested_on_the_primary_runs_on_the_standby(pair: Pair, name: str) -> None:
    with pair.primary.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {name} SELECT i, 'old' FROM generate_series(1, 25) AS i")
    pair.replayed()
    query = DrivenQuery(pair.standby, {"slot": name, "include_tables": rf"public\.{name}",
                                       "primary_dsn": pair.primary.dsn,
                                       "backfill_chunk_rows": "10"})
    request_backfill(pair.primary.dsn, name, [name], standby_dsn=pair.standby.dsn)
    pair.replayed()
    rows: list[dict[str, Any]] = []
    for _ in range(6):
        rows += query.batch()
        with pair.primary.connect() as conn:
            conn.execute(f"UPDATE {name} SET v = 'new' WHERE id = 25")
        pair.replayed()
    assert sorted(_ids(rows, "read")) == list(range(1, 26))
    assert query.offset.get("backfill") is None
    last = {json.loads(r["after"])["id"]: json.loads(r["after"])["v"] for r in rows}
    assert last[25] == "new"
    query.reader.stop()


def test_without_primary_dsn_the_standby_is_read_with_what_the_primary_has(
    pair: Pair, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pair.primary.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    pair.replayed()
    with pytest.raises(SlotError, match=f"publication '{name}' does not exist.*primary_dsn"):
        DrivenQuery(pair.standby, {"slot": name})
    assert pair.slot(pair.standby, name) is None  # refused before the slot was made
    with pair.primary.connect() as conn:
        conn.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}")
    pair.replayed()
    caplog.set_level(logging.INFO, logger="postgres_cdc_source")
    done = threading.Event()

    def operator() -> None:  # the slot waits for the primary's running-xacts record
        with pair.primary.connect() as conn:
            while not done.wait(0.5):
                conn.execute("SELECT pg_log_standby_snapshot()")

    helper = threading.Thread(target=operator, daemon=True)
    helper.start()
    try:
        query = DrivenQuery(pair.standby, {"slot": name})
    finally:
        done.set()
        helper.join()
    assert "primary_dsn is not set" in caplog.text
    assert "pg_log_standby_snapshot() on the primary" in caplog.text
    with pair.primary.connect() as conn:
        conn.execute(f"INSERT INTO {name} SELECT generate_series(1, 50)")
    pair.replayed()
    assert _ids(query.batch()) == list(range(1, 51))
    assert "takes no backfill requests" in caplog.text
    query.reader.stop()


def test_a_standby_the_query_cannot_use_is_refused_naming_why(pair: Pair, name: str) -> None:
    with pair.primary.connect() as conn:
        conn.execute(f"CREATE PUBLICATION {name}")
    pair.replayed()
    base = {"slot": name, "primary_dsn": pair.primary.dsn}
    with pytest.raises(ConfigError, match=r"option 'primary_dsn'.*standby too"):
        DrivenQuery(pair.standby, {**base, "primary_dsn": pair.standby.dsn})
    with LocalPostgres(version=pair.primary.version) as other, \
            pytest.raises(ConfigError, match=r"option 'primary_dsn'.*another cluster"):
        DrivenQuery(pair.standby, {**base, "primary_dsn": other.dsn})
    with pytest.raises(ConfigError, match=r"option 'all_tables_publication'.*standby"):
        DrivenQuery(pair.standby, {**base, "all_tables_publication": "true"})
    if pair.primary.version >= 17:
        with pytest.raises(ConfigError, match=r"option 'failover'.*standby"):
            DrivenQuery(pair.standby, {**base, "failover": "true"})
    assert pair.slot(pair.standby, name) is None
    without_feedback = LocalStandby(pair.primary, slot=f"{name}_fb", sync_slots=False)
    without_feedback._settings["hot_standby_feedback"] = "off"
    with without_feedback:
        with pytest.raises(SlotError, match=r"hot_standby_feedback off.*rows_removed"):
            DrivenQuery(without_feedback, base)
        assert pair.slot(without_feedback, name) is None
    with pair.primary.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (f"{name}_fb",))


def test_a_standby_of_postgres_15_is_refused_naming_the_version(name: str) -> None:
    with LocalPostgres(version=15) as primary, \
            LocalStandby(primary, sync_slots=False) as standby, \
            pytest.raises(ConfigError, match=r"option 'dsn'.*Postgres 15\.\d+.*16 or later"):
        DrivenQuery(standby, {"slot": name, "primary_dsn": primary.dsn})


def test_a_snapshot_and_parallel_reads_run_on_the_standby(pair: Pair, name: str) -> None:
    """The exported snapshot, its chunks and the temporary copies of a split batch are the
    standby's; the primary only gets the publications."""
    with pair.primary.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {name} SELECT i, repeat('x', 200) FROM"
                     " generate_series(1, 300) AS i")
    pair.replayed()
    query = DrivenQuery(pair.standby, {
        "slot": name, "include_tables": rf"public\.{name}", "primary_dsn": pair.primary.dsn,
        "snapshot": "initial", "snapshot_chunk_rows": "100", "min_partitions": "3",
        "min_bytes_per_partition": "1"})
    rows = query.batch()
    assert sorted(_ids(rows, "read")) == list(range(1, 301))
    with pair.primary.connect() as conn:
        for i in range(301, 401):
            conn.execute(f"INSERT INTO {name} VALUES (%s, 'y')", (i,))
    pair.replayed()
    end = query.reader.latestOffset(query.offset, query.reader.getDefaultReadLimit())
    assert len(query.reader.partitions(query.offset, end)) == 3
    rows = []
    while not rows or query.offset != end:
        rows += query.batch()
        end = query.offset
    assert _ids(rows) == list(range(301, 401))
    assert pair.slot(pair.primary, name) is None
    query.reader.stop()


def test_primary_dsn_is_redacted_like_dsn() -> None:
    options = CdcOptions.from_options({
        "dsn": "host=replica user=cdc password=s3cret-standby", "slot": "s",
        "primary_dsn": "host=db user=cdc password=s3cret-primary"})
    assert options.primary_dsn is not None
    for text in (repr(options), str(options), options.on_primary().safe_dsn):
        assert "s3cret" not in text
    assert "host=db" in repr(options)
    with pytest.raises(ConfigError, match=r"option 'primary_dsn': bad value: not a valid"):
        CdcOptions.from_options({"dsn": "host=a", "slot": "s", "primary_dsn": "host='x"})


def test_the_slot_survives_the_standbys_promotion_and_the_stream_goes_on(
    pair: Pair, name: str
) -> None:
    """Last in the module: the pair is a pair no more after it."""
    with pair.primary.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    pair.replayed()
    query = DrivenQuery(pair.standby, {"slot": name, "include_tables": rf"public\.{name}",
                                       "primary_dsn": pair.primary.dsn})
    with pair.primary.connect() as conn:
        conn.execute(f"INSERT INTO {name} SELECT generate_series(1, 100)")
    pair.replayed()
    rows = query.batch()
    with pair.primary.connect() as conn:  # replayed, then the primary dies: read after it
        conn.execute(f"INSERT INTO {name} SELECT generate_series(101, 150)")
    pair.replayed()
    before = pair.slot(pair.standby, name)
    pair.primary.stop()
    pair.standby.promote()
    after = pair.slot(pair.standby, name)
    assert after == before  # the same slot, where it was
    with pair.standby.connect() as conn:
        row = conn.execute("SELECT temporary, wal_status, pg_is_in_recovery()"
                           " FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone()
        assert row == (False, "reserved", False)
        conn.execute(f"INSERT INTO {name} SELECT generate_series(151, 200)")
        conn.execute(f"CREATE TABLE {name}_x (id int PRIMARY KEY)")  # not captured
    rows += query.batch() + query.batch()  # the same reader: now writing on the promoted one
    assert _ids(rows) == list(range(1, 201))
    query.reader.stop()
