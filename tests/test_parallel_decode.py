"""One batch decoded by several tasks: each reads a WAL sub-range through a temporary copy of the
slot. Driven in Spark's call order (``partitions``, then ``read`` per partition) against the real
Postgres; the order rule through Spark and Iggy is in test_reliability.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import psycopg
import pyarrow as pa
import pytest

from connector_common.change_rows import ARROW_SCHEMA
from connector_common.lsn import format_lsn, parse_lsn
from iggy_spark_testing.chaos import wait_until
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

pytestmark = pytest.mark.services


def _reader(pg: LocalPostgres, slot: str, plugin: str, partitions: int) -> PgCdcStreamReader:
    return PgCdcStreamReader(CdcOptions.from_options({
        "dsn": pg.dsn, "slot": slot, "plugin": plugin, "min_partitions": str(partitions),
        "min_bytes_per_partition": "1", "batch_rows": "50", "fetch_rows": "40",
        "spill_rows": "30",
    }))


def _read(reader: PgCdcStreamReader, start: int, end: int) -> tuple[int, list[tuple[object, ...]]]:
    """The batch's partitions and every row they give, in partition order."""
    parts = reader.partitions({"lsn": format_lsn(start)}, {"lsn": format_lsn(end)})
    rows: list[tuple[object, ...]] = []
    for part in parts:
        batches = list(reader.read(part))
        if batches:
            rows += list(zip(*pa.Table.from_batches(batches).to_pydict().values(), strict=True))
    return len(parts), rows


def _temporary_slots(pg: LocalPostgres) -> list[str]:
    with pg.connect() as conn:
        return [r[0] for r in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE temporary")]


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_four_partitions_give_the_rows_and_ids_of_one(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """Small and large transactions, one open across every split point and one spilled to
    disk: read in 4 sub-ranges they are exactly the rows (ids included) of a one-task read, in
    the same order, every time; the query's slot does not move and no copy is left behind."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    one = _reader(pg, name, plugin, 1)
    start = parse_lsn(one.initialOffset()["lsn"])
    with pg.connect() as conn, psycopg.connect(pg.dsn) as long:
        long.execute(f"INSERT INTO {name} VALUES (-1, 'began first')")
        for i in range(60):
            conn.execute(f"INSERT INTO {name} VALUES (%s, 'x')", (i,))
            conn.execute(f"UPDATE {name} SET v = 'y' WHERE id = %s", (i // 2,))
        conn.execute(f"INSERT INTO {name} SELECT g, md5(g::text) FROM generate_series(100, 400) g")
        long.execute(f"INSERT INTO {name} VALUES (-2, 'committed late')")
        long.commit()
        conn.execute(f"DELETE FROM {name} WHERE id < 10")
        end = parse_lsn(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])  # type: ignore[index]

    count, single = _read(one, start, end)
    assert count == 1 and len(single) == 2 + 120 + 301 + 12
    four = _reader(pg, name, plugin, 4)
    count, parallel = _read(four, start, end)
    assert count == 4
    assert parallel == single
    assert _read(four, start, end)[1] == single  # a replay gives the same rows
    # the open transaction came whole, from the sub-range holding its commit
    late = [r for r in parallel if r[1] == parallel[-13][1]]
    assert len(late) == 2
    with pg.connect() as conn:
        position = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (name,)).fetchone()
    assert position is not None and parse_lsn(position[0]) == start
    assert _temporary_slots(pg) == []


_KILLED_READER = """
import pickle, sys
reader, part = pickle.loads(bytes.fromhex(sys.argv[1]))
batches = reader.read(part)
next(batches)
print("reading", flush=True)
sys.stdin.read()
"""


def test_a_reader_killed_mid_read_leaves_no_temporary_slot(pg: LocalPostgres, name: str) -> None:
    """kill -9 of the process reading a sub-range (as a Spark Python worker would die): the
    server drops its temporary copy with the session."""
    import pickle

    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    reader = _reader(pg, name, "pgoutput", 2)
    start = parse_lsn(reader.initialOffset()["lsn"])
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} SELECT generate_series(1, 2000)")
        end = parse_lsn(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])  # type: ignore[index]
    part = reader.partitions({"lsn": format_lsn(start)}, {"lsn": format_lsn(end)})[-1]
    assert isinstance(part, CdcPartition) and part.copy_from == start
    worker = subprocess.Popen(
        [sys.executable, "-c", _KILLED_READER, pickle.dumps((reader, part)).hex()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "reading\n"
        copies = [s for s in _temporary_slots(pg) if s.startswith(f"{name}_part_")]
        assert len(copies) == 1
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    # the server notices the closed socket at once; allow it a moment to end the backend
    wait_until(lambda: copies[0] not in _temporary_slots(pg), 10, "the copy to be dropped")


@pytest.mark.parametrize("copy", [False, True], ids=["slot", "copy"])
def test_a_session_ended_mid_read_goes_on_where_it_stopped(
    pg: LocalPostgres, name: str, copy: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends a task's session after its first rows (a restart, a failover, an
    administrator): the task reads the partition again and gives exactly the rows of an
    undisturbed read, none twice, rather than failing the query. Either the one task peeking
    the query's slot, or a task of a parallel read peeking a temporary copy."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    reader = _reader(pg, name, "pgoutput", 4 if copy else 1)
    start = parse_lsn(reader.initialOffset()["lsn"])
    with pg.connect() as conn:
        for i in range(0, 600, 100):
            conn.execute(f"INSERT INTO {name} SELECT g, md5(g::text) FROM generate_series("
                         f"{i}, {i + 99}) g")
        end = parse_lsn(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])  # type: ignore[index]
    # Where the sub-ranges fall depends on the server's other WAL (autovacuum, checkpoints):
    # take the partition of the wanted kind that holds the most rows.
    undisturbed, part = max(
        ((pa.Table.from_batches(list(reader.read(p)), schema=ARROW_SCHEMA), p)
         for p in reader.partitions({"lsn": format_lsn(start)}, {"lsn": format_lsn(end)})
         if isinstance(p, CdcPartition) and (p.copy_from is not None) == copy),
        key=lambda read: read[0].num_rows,
    )
    assert undisturbed.num_rows >= 100

    batches = reader.read(part)
    given = [next(batches)]
    assert pg.end_reads() == 1
    given += list(batches)
    assert pa.Table.from_batches(given).equals(undisturbed)
    # the rows given before the session ended (what the reader had already fetched) are skipped
    skipped = re.search(r"reading the partition again, skipping the (\d+) rows already given",
                        caplog.text)
    assert skipped and given[0].num_rows <= int(skipped[1]) < undisturbed.num_rows
    assert _temporary_slots(pg) == []


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_a_one_task_batch_read_in_two_halves_gives_the_rows_of_one_peek(
    pg: LocalPostgres, name: str, plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second half peeked from a copy while the first is decoded
    (:mod:`postgres_cdc_source.stream.halves`): a transaction open across the midpoint, one
    spilled to disk and a column added halfway give exactly the rows (ids included) of one
    peek, in the same order; closed after its first batch, the read leaves no copy, no
    connection and no thread behind, and the query's slot does not move."""
    import threading

    from postgres_cdc_source.stream import halves

    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    reader = _reader(pg, name, plugin, 1)
    start = parse_lsn(reader.initialOffset()["lsn"])
    with pg.connect() as conn, psycopg.connect(pg.dsn) as long:
        for i in range(60):
            conn.execute(f"INSERT INTO {name} VALUES (%s, 'x')", (i,))
        conn.execute(f"ALTER TABLE {name} ADD COLUMN w int")
        long.execute(f"INSERT INTO {name} VALUES (-1, 'began first')")
        conn.execute(f"INSERT INTO {name} SELECT g, md5(g::text), g "
                     "FROM generate_series(100, 400) g")
        long.execute(f"INSERT INTO {name} VALUES (-2, 'committed late')")
        long.commit()
        conn.execute(f"UPDATE {name} SET w = 0 WHERE id < 10")
        end = parse_lsn(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])  # type: ignore[index]

    monkeypatch.setattr(halves, "SPLIT_BYTES", 1 << 62)
    count, whole = _read(reader, start, end)
    assert count == 1 and len(whole) == 60 + 301 + 2 + 12
    seconds: list[int] = []
    first_fetch = halves._first_fetch

    def counted(*args: object) -> object:
        seconds.append(1)
        return first_fetch(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(halves, "SPLIT_BYTES", 1)
    monkeypatch.setattr(halves, "_first_fetch", counted)
    assert _read(reader, start, end)[1] == whole
    assert seconds == [1]
    threads = threading.active_count()
    (part,) = reader.partitions({"lsn": format_lsn(start)}, {"lsn": format_lsn(end)})
    batches = reader.read(part)
    next(batches)
    batches.close()
    assert threading.active_count() == threads
    assert _temporary_slots(pg) == []
    with pg.connect() as conn:
        position = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (name,)).fetchone()
        assert position is not None and parse_lsn(position[0]) == start
        assert halves._room(conn)
        monkeypatch.setattr(halves, "SPARE", 100_000)
        assert not halves._room(conn)
