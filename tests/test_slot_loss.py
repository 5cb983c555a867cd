"""Slots lost, held back by a long-open transaction, and made for failover (issue 24): each an
operation with a documented message, never a stack trace from Postgres.

These call the reader's methods directly (as Spark's driver and executors do). A slot is lost
on a throwaway server of each tested version with a tiny ``max_slot_wal_keep_size``: setting it
on the session's server would invalidate other tests' slots.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

import psycopg
import pytest

from connector_common.lsn import parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.errors import ConfigError, SlotError, SlotLostError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import diagnostics
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

pytestmark = pytest.mark.services


def reader(dsn: str, name: str, **extra: str) -> PgCdcStreamReader:
    return PgCdcStreamReader(CdcOptions.from_options({"dsn": dsn, "slot": name, **extra}))


def slot_row(server: LocalPostgres, name: str) -> tuple[Any, ...] | None:
    with server.connect() as conn:
        return conn.execute(
            "SELECT wal_status, safe_wal_size FROM pg_replication_slots WHERE slot_name = %s",
            (name,),
        ).fetchone()


def write_wal_segments(conn: psycopg.Connection[Any], table: str, segments: int) -> None:
    for _ in range(segments):
        conn.execute(
            f"INSERT INTO {table} SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g"
        )
        conn.execute("SELECT pg_switch_wal()")


def test_a_slot_behind_max_slot_wal_keep_size_warns_then_fails_with_the_way_back(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On its own server of ``pg``'s version (so once per tested version)."""
    version = pg.version
    settings = {"max_slot_wal_keep_size": "1MB", "checkpoint_timeout": "1h"}
    with LocalPostgres(version=version, settings=settings) as server:
        assert server.version == version
        with server.connect() as conn:
            conn.execute(f"CREATE TABLE {name} (id int, data text)")
        first = reader(server.dsn, name)
        start = first.initialOffset()
        with server.connect() as conn:
            health = diagnostics.health(conn, name)
            assert health is not None and not health.at_risk
            assert health.safe_wal_bytes is not None and health.safe_wal_bytes > 0
            # the query is stopped while WAL is written past max_slot_wal_keep_size
            write_wal_segments(conn, name, 3)
        row = slot_row(server, name)
        assert row is not None and row[0] == "unreserved" and row[1] < 0
        going_on = reader(server.dsn, name)
        with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
            going_on.latestOffset(start, ReadAllAvailable())  # still readable: warned
        assert f"replication slot {name} is about to be lost (wal_status unreserved)" in caplog.text
        report = going_on.reportLatestOffset()
        assert report["wal_status"] == "unreserved" and report["safe_wal_bytes"] < 0

        with server.connect() as conn:  # the query is stopped again; a checkpoint loses it
            write_wal_segments(conn, name, 3)
            conn.execute("CHECKPOINT")
        assert slot_row(server, name) == ("lost", None)

        expected = (f"replication slot '{name}' is lost: Postgres invalidated it \\(wal_removed\\)"
                    f".*max_slot_wal_keep_size.*pg_drop_replication_slot\\('{name}'\\).*new "
                    "checkpoint.*snapshot=initial")
        # planning, by a query going on from its checkpoint
        with pytest.raises(SlotLostError, match=expected) as info:
            reader(server.dsn, name).latestOffset(
                start, ReadAllAvailable()
            )
        assert info.value.slot == name and info.value.reason == "wal_removed"
        copy = pickle.loads(pickle.dumps(info.value))  # as Spark ships it from a task
        assert (copy.slot, copy.reason, str(copy)) == (name, "wal_removed", str(info.value))
        # a task reading a batch planned before
        lsn = parse_lsn(start["lsn"])
        with pytest.raises(SlotLostError, match=expected):
            list(going_on.read(CdcPartition(lsn, lsn + 1)))
        # a new query starting on the lost slot
        with pytest.raises(SlotLostError, match=expected):
            reader(server.dsn, name).initialOffset()
        # the way back the message names works: drop, and a new checkpoint starts cleanly
        with server.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
        assert "lsn" in reader(server.dsn, name).initialOffset()


def test_a_dropped_slot_is_lost_for_a_query_going_on_not_created_again(
    pg: LocalPostgres, name: str
) -> None:
    start = reader(pg.dsn, name).initialOffset()
    with pg.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
    with pytest.raises(SlotLostError, match=f"'{name}' is lost: it does not exist") as info:
        reader(pg.dsn, name).latestOffset(start, ReadAllAvailable())
    assert info.value.reason is None
    assert slot_row(pg, name) is None  # not created anew at today's position


@pytest.mark.parametrize("snapshot", ["never", "initial"])
@pytest.mark.pg_versions(17, 18)  # failover slots are 17+
def test_failover_creates_a_failover_slot(pg: LocalPostgres, name: str, snapshot: str) -> None:
    reader(pg.dsn, name, failover="true", snapshot=snapshot).initialOffset()
    with pg.connect() as conn:
        row = conn.execute(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = %s", (name,)
        ).fetchone()
    assert row == (True,)
    reader(pg.dsn, name, failover="true").latestOffset(
        reader(pg.dsn, name).initialOffset(), ReadAllAvailable()
    )


@pytest.mark.pg_versions(17, 18)  # failover slots are 17+
def test_failover_on_a_slot_made_without_it_says_what_to_do(pg: LocalPostgres, name: str) -> None:
    reader(pg.dsn, name).initialOffset()
    with pytest.raises(SlotError, match=f"'{name}' exists without failover.*ALTER_REPLICATION_SLOT"
                       f" {name} \\(FAILOVER true\\).*replication=database"):
        reader(pg.dsn, name, failover="true").initialOffset()
    # the command the message names, sent as it says
    with psycopg.connect(pg.dsn + " replication=database", autocommit=True) as repl:
        result = repl.pgconn.exec_(f"ALTER_REPLICATION_SLOT {name} (FAILOVER true)".encode())
        assert result.status == psycopg.pq.ExecStatus.COMMAND_OK, result.error_message
    reader(pg.dsn, name, failover="true").initialOffset()


@pytest.mark.pg_versions(17, 18)  # failover slots are 17+
def test_a_failover_slot_waiting_for_a_missing_standby_is_named(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A promoted server that kept ``synchronized_standby_slots`` (or a standby that is down)
    makes every read of a failover slot wait: planning says which standby and what to set."""
    settings = {"synchronized_standby_slots": "gone_standby,down_standby"}
    with LocalPostgres(version=pg.version, settings=settings) as server:
        with server.connect() as conn:
            conn.execute("SELECT pg_create_physical_replication_slot('down_standby')")
        start = reader(server.dsn, name, failover="true").initialOffset()
        with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
            reader(server.dsn, name, failover="true").latestOffset(start, ReadAllAvailable())
        assert (f"replication slot {name} is a failover slot" in caplog.text
                and "no standby streams from gone_standby (missing), down_standby (inactive)"
                in caplog.text)
        caplog.clear()
        other = f"{name}_plain"  # a slot without failover does not wait
        start = reader(server.dsn, other).initialOffset()
        with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
            reader(server.dsn, other).latestOffset(start, ReadAllAvailable())
        assert "failover slot" not in caplog.text


@pytest.mark.pg_versions(15, 16)
def test_failover_is_refused_on_a_server_without_failover_slots(
    pg: LocalPostgres, name: str
) -> None:
    with pytest.raises(ConfigError, match="option 'failover': failover slots need Postgres 17 "
                       f"or later; this server is {pg.version}") as info:
        reader(pg.dsn, name, failover="true").initialOffset()
    assert info.value.option == "failover"
    assert slot_row(pg, name) is None  # refused before anything was created


def test_on_slot_lost_is_fail_or_resnapshot_and_resnapshot_needs_create_slot() -> None:
    base = {"dsn": "host=x", "slot": "s"}
    assert CdcOptions.from_options(base).on_slot_lost == "fail"
    with pytest.raises(ConfigError, match="option 'on_slot_lost': bad value: 'skip' "
                       "\\(expected one of fail, resnapshot\\)"):
        CdcOptions.from_options({**base, "on_slot_lost": "skip"})
    with pytest.raises(ConfigError, match="option 'on_slot_lost': resnapshot recreates the "
                       "slot, so it needs create_slot=true"):
        CdcOptions.from_options({**base, "on_slot_lost": "resnapshot", "create_slot": "false"})
    # the snapshot's sizing applies to the snapshot a lost slot takes
    options = CdcOptions.from_options(
        {**base, "on_slot_lost": "resnapshot", "snapshot_chunk_rows": "7"})
    assert (options.on_slot_lost, options.snapshot_chunk_rows) == ("resnapshot", 7)
    with pytest.raises(ConfigError, match="option 'snapshot_chunk_rows': only applies with "
                       "snapshot=initial or on_slot_lost=resnapshot"):
        CdcOptions.from_options({**base, "snapshot_chunk_rows": "7"})


def test_resnapshot_skips_a_replayed_batch_of_the_lost_slot_then_snapshots(
    pg: LocalPostgres, name: str
) -> None:
    """A batch planned before the slot was dropped and replayed after (Spark replays the last
    uncommitted batch at restart without planning it) reads nothing: its changes are gone, and
    reading would fail the query on every restart. The planning after it takes the snapshot."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
        options = {"include_tables": f"public\\.{name}", "on_slot_lost": "resnapshot"}
        start = reader(pg.dsn, name, **options).initialOffset()
        conn.execute(f"INSERT INTO {name} VALUES (1), (2)")
        end = reader(pg.dsn, name, **options).latestOffset(start, ReadAllAvailable())
        assert end != start
        conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
    restarted = reader(pg.dsn, name, **options)
    assert restarted.partitions(start, end) == []
    failing = reader(pg.dsn, name)
    [replayed] = failing.partitions(start, end)
    with pytest.raises(SlotLostError):  # the default fails the replay's task
        list(failing.read(replayed))
    snapshot_start = restarted.latestOffset(end, ReadAllAvailable())
    assert snapshot_start["snapshot"] == {"after": None, "chunks": 0, "table": None}
    assert restarted.partitions(end, snapshot_start) == []
    snapshot_end = restarted.latestOffset(snapshot_start, ReadAllAvailable())
    [chunk] = restarted.partitions(snapshot_start, snapshot_end)
    rows = [row for batch in restarted.read(chunk) for row in batch.to_pylist()]
    assert sorted((r["op"], r["key"]) for r in rows) == [("read", '{"id":1}'), ("read", '{"id":2}')]
    restarted.stop()


def test_failover_option_is_a_boolean() -> None:
    with pytest.raises(ConfigError, match="option 'failover'"):
        CdcOptions.from_options({"dsn": "host=x", "slot": "s", "failover": "maybe"})
    assert CdcOptions.from_options({"dsn": "host=x", "slot": "s"}).failover is False


def test_a_long_open_transaction_holding_the_restart_point_back_is_named(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(diagnostics, "REREAD_WARN_BYTES", 1024 * 1024)  # 64MB in production
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int, data text)")
    first = reader(pg.dsn, name)
    start = first.initialOffset()
    with pg.connect(application_name="forgotten") as holder, pg.connect() as writer:
        holder.execute("BEGIN")
        holder.execute(f"INSERT INTO {name} VALUES (0, 'held')")  # takes a transaction id
        pid = holder.info.backend_pid
        writer.execute(f"INSERT INTO {name} SELECT g, repeat('x', 100)"
                       " FROM generate_series(1, 20000) g")
        writer.execute("CHECKPOINT")  # a running-xacts record: the restart point could move
        end = first.latestOffset(start, ReadAllAvailable())
        first.commit(end)  # the batch is delivered; the slot moves, its restart point cannot
        going_on = reader(pg.dsn, name)
        with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
            going_on.latestOffset(end, ReadAllAvailable())
        assert f"replication slot {name} re-decodes" in caplog.text
        assert f"PID {pid} (user 'postgres', application 'forgotten', idle in transaction)" in (
            caplog.text)
        assert f"pg_terminate_backend({pid})" in caplog.text
        report = going_on.reportLatestOffset()
        assert report["reread_wal_bytes"] > 1024 * 1024
        holder.execute("COMMIT")
    # once it ends, the restart point moves on and the warning stops
    with pg.connect() as writer:
        writer.execute(f"INSERT INTO {name} VALUES (1, 'after')")
        writer.execute("CHECKPOINT")
    later = reader(pg.dsn, name)
    end2 = later.latestOffset(end, ReadAllAvailable())
    later.commit(end2)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
        reader(pg.dsn, name).latestOffset(end2, ReadAllAvailable())
    assert "re-decodes" not in caplog.text
    assert reader(pg.dsn, name).reportLatestOffset()[
        "reread_wal_bytes"] < 1024 * 1024
