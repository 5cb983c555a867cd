"""End-to-end latency: Postgres commit → message visible in Iggy, at a steady change rate.

    python -m bench.bench_latency [--rates 1000,10000] [--seconds 30] [--trigger 500ms]

One pipeline (:func:`pg_to_iggy.pipeline.start_pipeline`, pgoutput, ``topic_from=table``) runs
with a ``processingTime`` trigger while a writer thread commits changes at a fixed rate: every
10 ms one transaction of ``rate / 100`` inserts. Each rate writes its own table, hence its own
topic. Latency per message = the broker's append timestamp (when the message became readable)
minus the transaction's commit time (``commit_ts`` in the payload, from Postgres' commit record);
same machine, same clock. The first ``--settle`` seconds of each rate are left out.

A rate counts as *sustained* when the writer kept it up (>= 95 %), the pipeline caught up within
``--drain`` seconds of the writer stopping, and latency did not grow over the run (median of the
last third <= 2x the first third's + the trigger interval). When a target rate is not sustained,
lower rates are tried (halving) and the highest sustained one is reported as such.
Writes ``bench/results/latency.json``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from typing import Any

import orjson
import psycopg

from bench import cdc, iggy
from bench.common import log, publish, spark_session
from connector_common.units import parse_positive_duration
from iggy_spark_testing.harness import postgres
from pg_to_iggy.pipeline import start_pipeline

STREAM = "latency"
TICK = 0.01
_tables = itertools.count(1)


class Writer(threading.Thread):
    """Commits ``rate`` inserts per second into ``table`` for ``seconds``, one transaction per
    10 ms tick, on an absolute schedule (a late tick is caught up, not skipped)."""

    def __init__(self, dsn: str, table: str, rate: int, seconds: float) -> None:
        super().__init__(name=f"writer-{table}", daemon=True)
        self.dsn, self.table, self.rate, self.seconds = dsn, table, rate, seconds
        self.written = 0
        self.elapsed = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                per_tick = max(1, round(self.rate * TICK))
                started = time.monotonic()
                ticks = int(self.seconds / TICK)
                for tick in range(ticks):
                    delay = started + tick * TICK - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    cdc.insert_rows(conn, self.table, self.written + 1, self.written + per_tick)
                    self.written += per_tick
                self.elapsed = time.monotonic() - started
        except BaseException as exc:  # reported by the main thread
            self.error = exc


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latencies(address: str, table: str) -> list[tuple[float, float]]:
    """``(commit time, latency)`` in seconds for every message of the table's topic."""
    points = []
    for message in iggy.poll(address, STREAM, table):
        committed = datetime.fromisoformat(orjson.loads(message.payload())["commit_ts"])
        points.append((committed.timestamp(), message.timestamp() / 1e6 - committed.timestamp()))
    return sorted(points)


def measure_rate(conn: psycopg.Connection[Any], dsn: str, address: str, rate: int,
                 seconds: float, settle: float, drain: float, interval: float) -> dict[str, Any]:
    """Run the writer at ``rate`` into a new table, wait for the pipeline to catch up, judge."""
    table = f"rate_{rate}_{next(_tables)}"
    cdc.create_table(conn, table)
    writer = Writer(dsn, table, rate, seconds)
    writer.start()
    writer.join()
    if writer.error is not None:
        raise writer.error
    deadline = time.monotonic() + drain
    arrived = 0
    while time.monotonic() < deadline:
        arrived = iggy.messages_in(address, STREAM, [table])
        if arrived >= writer.written:
            break
        time.sleep(0.25)
    caught_up = arrived >= writer.written
    points = latencies(address, table) if arrived else []
    first_commit = points[0][0] if points else 0.0
    steady = [lat for at, lat in points if at >= first_commit + settle]
    third = max(1, len(steady) // 3)
    early, late = steady[:third], steady[-third:]
    achieved = writer.written / writer.elapsed if writer.elapsed else 0.0
    growing = bool(steady) and statistics.median(late) > 2 * statistics.median(early) + interval
    sustained = caught_up and achieved >= 0.95 * rate and not growing
    result: dict[str, Any] = {
        "target_changes_per_second": rate,
        "achieved_changes_per_second": round(achieved),
        "changes": writer.written,
        "arrived": arrived,
        "caught_up_within_drain": caught_up,
        "latency_growing": growing,
        "sustained": sustained,
        "measured_messages": len(steady),
    }
    if steady:
        result.update({
            "p50_s": round(_percentile(steady, 0.50), 3),
            "p99_s": round(_percentile(steady, 0.99), 3),
            "max_s": round(max(steady), 3),
            "first_third_median_s": round(statistics.median(early), 3),
            "last_third_median_s": round(statistics.median(late), 3),
        })
    log(f"latency at {rate:,}/s: {result}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,10000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--drain", type=float, default=30.0)
    parser.add_argument("--trigger", default="500ms", help="processingTime interval")
    parser.add_argument("--min-rate", type=int, default=1000,
                        help="lowest rate tried when a target is not sustained")
    args = parser.parse_args(argv)
    interval = parse_positive_duration(args.trigger).total_seconds()
    targets = [int(r) for r in args.rates.split(",")]

    results: list[dict[str, Any]] = []
    with postgres() as pg, pg.connect() as conn, iggy.fresh_broker() as broker:
        spark = spark_session("bench-latency")
        query = start_pipeline(
            spark, dsn=pg.dsn, slot="latency", url=broker.url,
            checkpoint=tempfile.mkdtemp(prefix="bench-latency-"),
            source={"topic_from": "table", "default_stream": STREAM},
            trigger={"processingTime": f"{round(interval * 1000)} milliseconds"},
        )
        try:
            while not query.recentProgress:  # the slot exists once the first batch ran
                if query.exception() is not None:
                    raise RuntimeError(f"pipeline failed: {query.exception()}")
                time.sleep(0.5)
            warm = measure_rate(conn, pg.dsn, broker.address, 100, 5, 0, 60, interval)
            log(f"warm-up done (first batch included): {warm.get('p50_s')}s median")
            for target in targets:
                for rate in _fallbacks(target, args.min_rate):
                    outcome = measure_rate(conn, pg.dsn, broker.address, rate, args.seconds,
                                           args.settle, args.drain, interval)
                    outcome["requested_rate"] = target
                    results.append(outcome)
                    if outcome["sustained"]:
                        break
        finally:
            query.stop()
            spark.stop()

    headline = max((r for r in results if r["sustained"]),
                   key=lambda r: r["target_changes_per_second"], default=results[-1])
    summary = "latency commit -> visible in Iggy: " + "; ".join(
        f"{r['target_changes_per_second']:,}/s "
        f"{'sustained' if r['sustained'] else 'NOT sustained'}: p50 {r.get('p50_s')}s "
        f"p99 {r.get('p99_s')}s" for r in results
    ) + f" [processingTime {args.trigger}]"
    return publish("latency", {
        "benchmark": "Postgres commit -> message visible in Iggy, pg_cdc -> iggy_routed",
        "config": {"rates": targets, "seconds": args.seconds, "settle_seconds": args.settle,
                   "drain_seconds": args.drain, "trigger": f"processingTime {args.trigger}",
                   "transactions": "one per 10 ms tick, rate/100 inserts each",
                   "plugin": "pgoutput"},
        "results": {"by_rate": results, "headline": headline},
        "summary": summary,
    })


def _fallbacks(target: int, minimum: int) -> list[int]:
    """``target``, then halved rates down to ``minimum``, tried until one is sustained."""
    rates = [target]
    while rates[-1] // 2 >= minimum and rates[-1] > minimum:
        rates.append(rates[-1] // 2)
    return rates


if __name__ == "__main__":
    sys.exit(main())
