"""Soak: the pipeline job under sustained load, watched for slow leaks.

    python -m bench.bench_soak [--seconds 600] [--rate 5000] [--warmup 60] [--sample-every 5]

A leak in a streaming job shows only over time: a Python worker that keeps every batch's
objects, a connection opened per batch and never closed, a thread per reconnect, a slot that
stops advancing so Postgres keeps all WAL. This runs ``python -m pg_to_iggy.pipeline`` (a child
process group) against a throwaway Postgres and a local broker in its own process while a
seeded workload commits up to ``--rate`` changes per second for ``--seconds`` (inserts, updates
and deletes in balance, so the tables stay the same size), and samples every
``--sample-every`` seconds:

* resident memory (RSS) and threads of the job's Python driver, its JVM and Spark's Python
  workers (all of them, summed), and of the broker;
* retained WAL, ``pg_current_wal_lsn() - restart_lsn`` of the slot, and the pipeline's lag,
  the server's flush position minus the end of the last committed batch;
* open client connections in ``pg_stat_activity``.

Each series is summarised after ``--warmup`` seconds (JVM and Python workers start, heaps
size themselves): the median of the first third against the median of the last third
(``growth_pct``), and the least-squares slope per minute. The verdicts in ``flat``: the largest
Python worker and the Python driver grow less than 10% (worker processes come and go, so their
sum is reported but not judged), the JVM less than 25% (its heap sizes itself for minutes), JVM
threads less than 10%; retained WAL grows at under a tenth of the rate WAL is written (a stuck
slot retains all of it); client connections vary by at most 2. The local broker keeps every
message in memory, so its RSS grows by design and is reported, not judged. Writes
``bench/results/soak.json``.
The workload keeps no per-change log here (millions of changes), so correctness is not judged
by the oracle (bench/bench_reliability.py does that); the job must catch up at the end and
Iggy must hold at least as many messages as changes were committed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from bench.common import descendants, log, process, write_result
from iggy_local import LocalIggy
from iggy_spark_testing import readback
from iggy_spark_testing.chaos import (
    SlotWatch,
    committed_end,
    flush_lsn,
    prepare_capture,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.job import PipelineJob
from iggy_spark_testing.records import Mix

NAME = "soak"
MB = 1024 * 1024
SOAK_MIX = Mix(insert=0.3, update=0.4, delete=0.3, max_statements=30)
"""Inserts and deletes in balance (the tables keep their size); larger transactions than the
default, for throughput."""


def _sample(groups: dict[str, Callable[[], list[psutil.Process]]]) -> dict[str, float]:
    """Per group: summed RSS, the largest single process's RSS (a leak shows there even when
    Spark starts or retires workers), threads, and how many processes were alive."""
    row: dict[str, float] = {}
    for name, find in groups.items():
        sizes, threads = [], 0
        for p in find():
            try:
                sizes.append(p.memory_info().rss / MB)
                threads += p.num_threads()
            except psutil.Error:
                continue
        row[f"{name}_rss_mb"] = round(sum(sizes), 1)
        row[f"{name}_max_process_rss_mb"] = round(max(sizes, default=0.0), 1)
        row[f"{name}_threads"] = threads
        row[f"{name}_processes"] = len(sizes)
    return row


def _summary(times: Sequence[float], values: Sequence[float]) -> dict[str, float]:
    third = max(1, len(values) // 3)
    first, last = statistics.median(values[:third]), statistics.median(values[-third:])
    slope = statistics.linear_regression(times, values).slope if len(set(times)) > 1 else 0.0
    return {
        "first_third_median": round(first, 2),
        "last_third_median": round(last, 2),
        "growth_pct": round(100 * (last - first) / first, 1) if first else 0.0,
        "slope_per_minute": round(slope * 60, 3),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def _messages_in(url: str, stream: str) -> int:
    async def main() -> int:
        client = await readback.connect(url)
        return sum(int(t.messages_count) for t in await client.get_topics(stream))

    return asyncio.run(main())


def run(args: argparse.Namespace, pg: LocalPostgres, broker: LocalIggy, root: Path
        ) -> dict[str, Any]:
    work, source = prepare_capture(pg.dsn, NAME, seed=args.seed)
    work.record = False  # millions of changes: keep the tables, not a log of every change
    work.mix = SOAK_MIX
    checkpoint = root / "checkpoint"
    job = PipelineJob(dsn=pg.dsn, slot=NAME, url=broker.url, checkpoint=checkpoint,
                      log_path=root / "job.log", source=source,
                      sink={"topic_defaults.partitions_count": "3"})
    samples: list[dict[str, float]] = []
    job.start()
    try:
        job.wait_for_batch_after(0, 180, committed=True)  # first batch: JVM and workers up
        driver = job.pid
        assert driver is not None
        groups = {
            "driver": lambda: process(driver),
            "jvm": lambda: descendants(driver, "java"),
            "python_workers": lambda: [
                w for j in descendants(driver, "java") for w in descendants(j.pid, "python")
            ],
            "broker": lambda: descendants(os.getpid(), "iggy_local"),
        }
        with SlotWatch(pg.dsn, NAME, checkpoint, interval=args.sample_every) as watch:
            started = time.monotonic()
            wal_start: int | None = None
            background = work.start(seconds=args.seconds, rate=args.rate)
            while background.running:
                time.sleep(args.sample_every)
                slot = watch.sample()
                wal_start = slot.wal_lsn if wal_start is None else wal_start
                samples.append({
                    "t": round(time.monotonic() - started, 1),
                    "changes": work.changes,
                    **_sample(groups),
                    "retained_wal_mb": round((slot.retained_wal or 0) / MB, 2),
                    "wal_written_mb": round(((slot.wal_lsn or 0) - (wal_start or 0)) / MB, 2),
                    "lag_mb": round(
                        max(0, (slot.wal_lsn or 0) - (slot.committed_end or 0)) / MB, 2),
                    "pg_client_connections": slot.connections or 0,
                })
                if len(samples) % 12 == 0:
                    log(f"{samples[-1]['t']:.0f}s: {work.changes:,} changes; "
                        f"workers {samples[-1]['python_workers_rss_mb']} MB, "
                        f"lag {samples[-1]['lag_mb']} MB")
            stats = background.join(60)
            ended = time.monotonic()
            target = flush_lsn(pg.dsn)
            wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 600,
                       "the job to catch up", alive=lambda: job.running)
            caught_up = time.monotonic() - ended
        stopped = job.stop()
    finally:
        if job.running:
            job.kill()
    messages = _messages_in(broker.url, NAME)

    steady = [s for s in samples if s["t"] >= args.warmup]
    times = [s["t"] for s in steady]
    series = [k for k in samples[0] if k not in ("t", "changes")] if samples else []
    # the sink's local broker keeps every message in memory: its RSS grows by design
    summaries = {k: _summary(times, [s[k] for s in steady]) for k in series} if steady else {}
    flat: dict[str, bool] = {}
    if summaries:
        wal_per_minute = summaries["wal_written_mb"]["slope_per_minute"]
        connections = summaries["pg_client_connections"]
        flat = {
            "python_worker_rss": summaries["python_workers_max_process_rss_mb"]["growth_pct"] < 10,
            "python_driver_rss": summaries["driver_rss_mb"]["growth_pct"] < 10,
            "jvm_rss": summaries["jvm_rss_mb"]["growth_pct"] < 25,
            "jvm_threads": summaries["jvm_threads"]["growth_pct"] < 10,
            "retained_wal_bounded":
                summaries["retained_wal_mb"]["slope_per_minute"] < 0.1 * wal_per_minute,
            "connections_constant": connections["max"] - connections["min"] <= 2,
        }
    return {
        "benchmark": "soak: the pipeline job under sustained CDC load, sampled for leaks",
        "config": {"seconds": args.seconds, "target_rate_per_second": args.rate,
                   "warmup_seconds": args.warmup, "sample_every_seconds": args.sample_every,
                   "mix": "insert 0.3 / update 0.4 / delete 0.3, up to 30 statements per txn",
                   "pipeline": "python -m pg_to_iggy.pipeline --master local[2], default "
                               "trigger, 3 partitions per topic"},
        "workload": {"changes": stats.changes, "transactions": stats.transactions,
                     "changes_per_second": round(stats.changes_per_second),
                     "rolled_back": stats.rolled_back},
        "caught_up_seconds_after_load": round(caught_up, 1),
        "messages_in_iggy": messages,
        "all_changes_delivered_at_least_once": messages >= stats.changes,
        "job_exit_code": stopped,
        "slot_ahead_of_checkpoint": len(watch.violations),
        "flat": flat,
        "steady_state": summaries,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="length of the load")
    parser.add_argument("--rate", type=float, default=5000.0, help="target changes per second")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds left out of trends")
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp, LocalPostgres() as pg:
        broker = LocalIggy(process=True).start()
        try:
            result = run(args, pg, broker, Path(tmp))
        finally:
            broker.stop()
    path = write_result("soak", result)
    steady = result["steady_state"]
    print(f"soak: {'flat' if all(result['flat'].values()) else 'NOT FLAT'}: "
          f"{result['workload']['changes']:,} changes at "
          f"{result['workload']['changes_per_second']:,}/s for {args.seconds:g}s; largest worker "
          f"RSS {steady['python_workers_max_process_rss_mb']['growth_pct']:+}%, retained WAL max "
          f"{steady['retained_wal_mb']['max']} MB, connections "
          f"{steady['pg_client_connections']['min']:.0f}-"
          f"{steady['pg_client_connections']['max']:.0f} -> {path}")
    healthy = all(result["flat"].values()) and result["all_changes_delivered_at_least_once"]
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
