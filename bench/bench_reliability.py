"""Reliability under repeated faults: kill -9 of the driver, a broker outage, a Postgres restart.

    python -m bench.bench_reliability [--changes 100000] [--kills 10] [--rate 300] [--outage 20]

The heavy variant of tests/test_reliability.py. One throwaway Postgres, one local Iggy broker
in its own process with a data directory, and the pipeline job (``python -m
pg_to_iggy.pipeline``) as a child process group. While a seeded workload commits ``--changes``
changes at ``--rate`` per second (hostile values, key changes, interleaved and rolled-back
transactions), the benchmark

1. ``--kills`` times: waits until the job has committed a batch since its (re)start, waits a
   random 0.2-3 s, SIGKILLs the whole job (driver, JVM, Python workers) and restarts it from
   the checkpoint;
2. stops the broker for ``--outage`` seconds and starts it again (the job keeps running);
3. restarts Postgres (``pg_ctl restart -m fast``) under the job and the workload.

Then it lets the job catch up, stops it, reads every message back and runs the consistency
oracle (:mod:`iggy_spark_testing.oracle`), explains every duplicate by a batch in flight at a fault
(:mod:`iggy_spark_testing.chaos`), and checks that the slot, sampled every 0.5 s, was never ahead of
the checkpoint's last committed batch.

``recover_seconds`` of a fault is from its end (the kill, the broker back, Postgres back) to the
next batch Spark commits; for a kill it includes the JVM's cold start and the first batch
(about 25 s on two cores). Writes ``bench/results/reliability.json``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import log, write_result
from iggy_local import LocalIggy
from iggy_spark_testing.chaos import (
    PipelineJob,
    SlotWatch,
    committed_end,
    flush_lsn,
    in_flight,
    prepare_capture,
    unexplained_duplicates,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.oracle import verify

NAME = "reliability"
SINK = {"topic_defaults.partitions_count": "3"}


@dataclass
class Fault:
    kind: str
    began: float
    ended: float
    recover_seconds: float | None = None
    batches_in_flight: int = 0

    @property
    def window(self) -> float | tuple[float, float]:
        return self.began if self.began == self.ended else (self.began, self.ended)


def run(
    args: argparse.Namespace, pg: LocalPostgres, broker: LocalIggy, root: Path
) -> dict[str, Any]:
    work, source = prepare_capture(pg.dsn, NAME, seed=args.seed)
    checkpoint = root / "checkpoint"
    job = PipelineJob(dsn=pg.dsn, slot=NAME, url=broker.url, checkpoint=checkpoint,
                      log_path=root / "job.log", source=source, sink=SINK)
    rng = random.Random(args.seed)
    faults: list[Fault] = []
    started = time.monotonic()
    with SlotWatch(pg.dsn, NAME, checkpoint, interval=0.5) as watch:
        background = work.start(changes=args.changes, rate=args.rate)
        try:
            for number in range(args.kills):
                job.start()
                committed = job.wait_for_batch_after(job.started_at or 0, 180, committed=True)
                time.sleep(max(0.0, committed + rng.uniform(0.2, 3.0) - time.time()))
                killed = job.kill()
                faults.append(Fault("kill", killed, killed))
                log(f"kill {number + 1}/{args.kills} at {work.changes:,} changes committed")
            job.start()
            job.wait_for_batch_after(job.started_at or 0, 180, committed=True)

            faults.append(_outage(broker, args.outage))
            log(f"broker back after {args.outage:g}s, {work.changes:,} changes committed")
            job.wait_for_batch_after(faults[-1].ended, 180, committed=True)

            began = time.time()
            pg.restart("fast")
            faults.append(Fault("postgres_restart", began, time.time()))
            log(f"postgres restarted, {work.changes:,} changes committed")

            stats = background.join(3600)
            target = flush_lsn(pg.dsn)
            wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 600,
                       "the job to catch up", alive=lambda: job.running)
            stopped = job.stop()
        finally:
            if job.running:
                job.kill()
    wall = time.monotonic() - started
    log(f"workload done ({stats.changes:,} changes in {stats.seconds:.0f}s); job exit {stopped}; "
        "reading back")

    report = verify(broker.url, [NAME], work)
    batches = watch.batches()
    for fault in faults:
        fault.batches_in_flight = len(in_flight(batches, [fault.window]))
        after = [b.committed_at for b in batches if b.committed_at and b.committed_at > fault.ended]
        fault.recover_seconds = round(min(after) - fault.ended, 2) if after else None
    suspects = in_flight(batches, [f.window for f in faults])
    unexplained = unexplained_duplicates(report.duplicated_commits, suspects, report.commits)
    recoveries = [f.recover_seconds for f in faults if f.recover_seconds is not None]
    return {
        "benchmark": "at-least-once under kill -9 of the driver, a broker outage and a Postgres "
                     "restart, judged by the consistency oracle",
        "config": {"changes": args.changes, "rate_per_second": args.rate, "kills": args.kills,
                   "outage_seconds": args.outage, "seed": args.seed,
                   "partitions_per_topic": int(SINK["topic_defaults.partitions_count"]),
                   "pipeline": "python -m pg_to_iggy.pipeline --master local[2], default trigger"},
        "faults_injected": len(faults),
        "changes": report.changes,
        "messages": report.messages,
        "delivered": report.delivered,
        "missing": report.missing,
        "invented": report.invented,
        "duplicates": report.duplicates,
        "unexplained_duplicates": len(unexplained),
        "order_violations": report.order_violations,
        "table_mismatches": report.table_mismatches,
        "content_mismatches": report.content_mismatches,
        "bad_ids": report.bad_ids,
        "slot_samples": len(watch.samples),
        "slot_ahead_of_checkpoint": len(watch.violations),
        "max_retained_wal_bytes": max((s.retained_wal or 0) for s in watch.samples),
        "max_recover_seconds": max(recoveries) if recoveries else None,
        "max_recover_seconds_by_kind": {
            kind: max((f.recover_seconds or 0) for f in faults if f.kind == kind)
            for kind in sorted({f.kind for f in faults})
        },
        "faults": [asdict(f) for f in faults],
        "batches": len(batches),
        "workload": asdict(stats),
        "job_exit_code": stopped,
        "wall_seconds": round(wall, 1),
        "verdict": "ok" if report.ok and not unexplained and not watch.violations else "FAILED",
        "problems": list(report.problems[:10]),
    }


def _outage(broker: LocalIggy, seconds: float) -> Fault:
    began = time.time()
    broker.stop()
    time.sleep(seconds)  # the outage itself
    broker.start()
    return Fault("broker_outage", began, time.time())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--rate", type=float, default=300.0, help="changes per second")
    parser.add_argument("--outage", type=float, default=20.0, help="broker outage, seconds")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-reliability-") as tmp, LocalPostgres() as pg:
        broker = LocalIggy(process=True, data_dir=Path(tmp) / "iggy").start()
        try:
            result = run(args, pg, broker, Path(tmp))
        finally:
            broker.stop()
    path = write_result("reliability", result)
    print(f"reliability: {result['verdict']}: {result['faults_injected']} faults, "
          f"{result['changes']:,} changes, missing {result['missing']}, duplicates "
          f"{result['duplicates']:,} (unexplained {result['unexplained_duplicates']}), "
          f"max recovery {result['max_recover_seconds']}s -> {path}")
    return 0 if result["verdict"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
