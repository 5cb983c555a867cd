"""Backfill on request: rows/s against a hand-written keyset loop, and the stream's latency while
a backfill runs.

    python -m bench.bench_backfill [--rows 200000] [--rounds 3] [--chunk-rows 5000]
                                   [--rate 1000] [--seconds 20]

One throwaway Postgres (Debian's 15), one table of ``--rows`` rows (bigint key, integer, text,
numeric, timestamptz, jsonb). No Spark: the ``pg_cdc`` reader is driven in Spark's call order in
this process (plan, read the partition, commit; back to back, no trigger interval), so the
figures are the connector's own cost; Spark adds its per-batch overhead (one chunk per batch).

* rows/s, interleaved round by round after a warm-up: ``backfill`` (``request_backfill``, then
  batches until the offsets say it is done; chunks of ``--chunk-rows``, every row's key/after
  JSON and Arrow batches) against ``handwritten``: one connection, ``SELECT ... WHERE id > $last
  ORDER BY id LIMIT n`` in a binary cursor, each row to its JSON object and key JSON with orjson.
* latency: a writer commits ``--rate`` single-row inserts per second into another captured
  table (each row carries its ``clock_timestamp()``); the reader's loop measures, per row,
  the time from that commit to the row leaving ``read``. ``--seconds`` idle, then ``--seconds``
  with a backfill of the big table running.

Writes ``bench/results/backfill.json`` (``backfill_chunk<N>k.json`` for other chunk sizes).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg

from bench import bench_snapshot, common
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import postgres
from postgres_cdc_source.backfill import request_backfill
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import PgCdcStreamReader

TABLE, EVENTS = bench_snapshot.TABLE, "bf_events"
BACKFILL_TIMED = ("request_backfill to the batch whose end offset has no backfill left; reader "
                  "driven in Spark's call order in one process, no Spark")
HAND_TIMED = ("connect, keyset pages (WHERE id > $last ORDER BY id LIMIT chunk) in a binary "
              "cursor, orjson per row (row and key)")


def make_tables(conn: psycopg.Connection[Any], rows: int) -> None:
    """The snapshot benchmark's table (the same rows), and the latency writer's table."""
    bench_snapshot.make_table(conn, rows)
    conn.execute(f"CREATE TABLE {EVENTS} (id bigserial PRIMARY KEY, "
                 "at timestamptz NOT NULL DEFAULT clock_timestamp())")


def handwritten(dsn: str, chunk: int) -> int:
    count, last = 0, 0
    dumps = orjson.dumps
    names = ("id", "n", "t", "amount", "at", "doc")
    with psycopg.connect(dsn, options="-c TimeZone=UTC") as conn:
        while True:
            with conn.cursor(binary=True) as cur:
                rows = cur.execute(f"SELECT id, n, t, amount, at, doc FROM {TABLE} WHERE id > %s "
                                   "ORDER BY id LIMIT %s", (last, chunk)).fetchall()
            if not rows:
                return count
            for row in rows:
                dumps(dict(zip(names, row, strict=True)), default=bench_snapshot.default)
                dumps({"id": row[0]})
            count += len(rows)
            last = rows[-1][0]


class Loop:
    """A reader driven as Spark drives it, back to back, counting rows and event latencies."""

    def __init__(self, dsn: str, slot: str, chunk_rows: int) -> None:
        self.reader = PgCdcStreamReader(CdcOptions.from_options({
            "dsn": dsn, "slot": slot, "include_tables": rf"public\.({TABLE}|{EVENTS})",
            "backfill_chunk_rows": str(chunk_rows)}))
        self.offset = self.reader.initialOffset()
        self.reads = 0
        self.latencies: list[float] = []

    def step(self) -> None:
        end = self.reader.latestOffset(self.offset, ReadAllAvailable())
        if end == self.offset:  # nothing new: Spark would not run a batch either
            time.sleep(0.01)
            return
        for part in self.reader.partitions(self.offset, end):
            for batch in self.reader.read(part):
                now = datetime.now(UTC)
                columns = batch.to_pydict()
                for op, table, after in zip(columns["op"], columns["table"], columns["after"],
                                            strict=True):
                    if op == "read":
                        self.reads += 1
                    elif table == EVENTS and op == "insert":
                        at = datetime.fromisoformat(orjson.loads(after)["at"])
                        self.latencies.append((now - at).total_seconds())
        self.reader.commit(end)
        self.offset = end

    @property
    def backfilling(self) -> bool:
        return "backfill" in self.offset


def backfill_run(dsn: str, number: int, chunk: int) -> common.Measure:
    loop = Loop(dsn, f"bf_{number + 1}", chunk)
    try:
        with common.stopwatch() as elapsed:
            request_backfill(dsn, f"bf_{number + 1}", [TABLE])
            loop.step()
            while loop.backfilling:
                loop.step()
            seconds = elapsed()
    finally:
        loop.reader.stop()
        _drop(dsn, f"bf_{number + 1}")
    return common.Measure(loop.reads, seconds, BACKFILL_TIMED)


def _drop(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        conn.execute(f"DROP PUBLICATION IF EXISTS {slot}, {slot}_inserts")


def _writer(dsn: str, rate: int, stop: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started, sent = time.monotonic(), 0
        while not stop.is_set():
            conn.execute(f"INSERT INTO {EVENTS} DEFAULT VALUES")
            sent += 1
            ahead = started + sent / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {"events": len(ordered), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0)}


def latency(dsn: str, rate: int, seconds: float, chunk: int) -> dict[str, Any]:
    loop = Loop(dsn, "bf_latency", chunk)
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(dsn, rate, stop), daemon=True)
    writer.start()
    try:
        results = {}
        for phase in ("idle", "backfilling"):
            if phase == "backfilling":
                request_backfill(dsn, "bf_latency", [TABLE])
            loop.latencies, loop.reads = [], 0
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                loop.step()
            results[phase] = {**_percentiles(loop.latencies), "backfill_rows": loop.reads}
            common.log(f"latency {phase}: {results[phase]}")
        return results
    finally:
        stop.set()
        writer.join(10)
        loop.reader.stop()
        _drop(dsn, "bf_latency")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-rows", type=int, default=5000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    with postgres() as pg, pg.connect() as conn:
        make_tables(conn, args.rows)

        def backfill(number: int) -> common.Measure:
            measure = backfill_run(pg.dsn, number, args.chunk_rows)
            if measure.items != args.rows:
                raise AssertionError(f"backfill read {measure.items} rows, not {args.rows}")
            return measure

        def hand(_: int) -> common.Measure:
            with common.stopwatch() as elapsed:
                count = handwritten(pg.dsn, args.chunk_rows)
            return common.Measure(count, elapsed(), HAND_TIMED)

        runs = common.paired_rounds({"handwritten": hand, "spark": backfill}, args.rounds,
                                    "backfill", warm_up=True)
        lat = latency(pg.dsn, args.rate, args.seconds, args.chunk_rows)
    results = common.compared(runs, baselines=("handwritten",))
    results["latency"] = lat
    idle, busy = lat["idle"], lat["backfilling"]
    summary = (
        f"backfill, rows/s [{args.rows:,} rows, chunks of {args.chunk_rows:,}, no Spark]: "
        f"{results['spark']['per_second']:,}/s = "
        f"{results['ratio_vs_handwritten']['median']:.2f}x a hand-written keyset loop "
        f"({results['handwritten']['per_second']:,}/s); stream latency at {args.rate:,} "
        f"inserts/s: p50/p99 {idle['p50_ms']}/{idle['p99_ms']} ms idle, "
        f"{busy['p50_ms']}/{busy['p99_ms']} ms while backfilling "
        f"({busy['backfill_rows']:,} rows backfilled meanwhile)"
    )
    name = "backfill" if args.chunk_rows == 5000 else f"backfill_chunk{args.chunk_rows // 1000}k"
    return common.publish(name, {
        "benchmark": "pg_cdc backfill (reader in-process, no Spark) vs hand-written keyset loop; "
                     "stream latency idle vs backfilling",
        "config": {"rows": args.rows, "rounds": args.rounds, "chunk_rows": args.chunk_rows,
                   "rate": args.rate, "seconds": args.seconds,
                   "contenders": {"spark": "pg_cdc backfill, in-process"}},
        "results": results,
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
