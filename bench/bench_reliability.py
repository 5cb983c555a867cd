"""Effectively-once under a campaign of faults: one long pg_cdc -> iggy_routed run, judged whole.

    python -m bench.bench_reliability [--faults 100] [--rate 150] [--off-faults 12]

One throwaway Postgres, one local Iggy broker in its own process with a data directory, and a
seeded workload committing changes at ``--rate`` per second (hostile values, key changes,
interleaved and rolled-back transactions) for as long as the campaign lasts. Faults, drawn in a
seeded random order:

* ``kill``: SIGKILL of the whole job (driver, JVM, Python workers) a random 0.2-3 s after a
  committed batch, then a restart from the checkpoint;
* ``kill_in_batch``: the same, 0-0.4 s after a batch was planned (``offsets/N`` written): during
  its reads and sends;
* ``kill_after_sink_commit``: the same, the moment the sink's ledger records a batch: between the
  sink's commit and ``commits/N`` (or the slot's advance);
* ``broker_restart``: the broker process stopped and started again;
* ``postgres_fast`` / ``postgres_immediate``: ``pg_ctl restart -m fast`` / ``-m immediate`` (a
  crash of Postgres) under the job and the workload;
* then, in this process's Spark with the test-only faulty sources (tests/support/faulty_sources.py),
  an exception at each commit point in turn (``write``: a task fails after sending half its
  rows; ``writer_commit``; ``latest_offset``; ``reader_commit``), the query restarted each time.

Then the job catches up, every message is read back and judged by the consistency oracle
(:mod:`iggy_spark_testing.oracle`): nothing missing or invented, per-key order, content, and the
duplicates counted; the slot, sampled every 0.5 s, never ahead of the checkpoint's last committed
batch. The same campaign, shorter (``--off-faults``), runs again with
``delivery_guarantee=at_least_once`` for comparison. Writes ``bench/results/reliability.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import decoding_path
from bench.common import log, write_result
from iggy_local import LocalIggy
from iggy_spark import read_ledger
from iggy_spark_testing.chaos import (
    SlotWatch,
    committed_end,
    flush_lsn,
    in_flight,
    prepare_capture,
    read_checkpoint,
    unexplained_duplicates,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.job import PipelineJob
from iggy_spark_testing.oracle import verify

NAME = "reliability"
SINK = {"topic_defaults.partitions_count": "3"}
KINDS = ("kill", "kill_in_batch", "kill_after_sink_commit", "broker_restart", "postgres_fast",
         "postgres_immediate")
WEIGHTS = (1, 1, 1, 8, 5, 5)
OFF_SCHEDULE = ("kill_in_batch", "kill_after_sink_commit", "broker_restart")
_TESTS = Path(__file__).resolve().parent.parent / "tests"


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


def _ledger_batch(url: str, checkpoint: Path) -> int:
    """The last batch the sink's ledger (in the query's control topic) holds; -1: none yet."""
    try:
        return read_ledger(url, checkpoint).last_batch
    except ValueError:  # the query has not written its checkpoint's metadata yet
        return -1


def _last_planned(checkpoint: Path) -> int:
    return max((b.id for b in read_checkpoint(checkpoint)), default=-1)


class Campaign:
    """The job, the servers and the fault log of one run."""

    def __init__(self, pg: LocalPostgres, broker: LocalIggy, root: Path, job: PipelineJob,
                 rng: random.Random) -> None:
        self.pg, self.broker, self.root, self.job, self.rng = pg, broker, root, job, rng
        self.checkpoint = job.checkpoint
        self.faults: list[Fault] = []
        self.job_exits = 0

    def settle(self, spacing: float) -> None:
        """The job running and past its first committed batch since a (re)start; after other
        faults, a committed batch or ``spacing`` seconds, whichever comes first (faults may
        then overlap a recovery: that is part of the test)."""
        if not self.job.running:
            if self.faults and self.faults[-1].kind.startswith("kill"):
                pass
            elif self.job.pid is not None:
                # The query failed under the fault and the job exited: restart it, as its
                # supervisor would, and count it.
                self.job.stop()
                self.job_exits += 1
                log(f"the job exited after {self.faults[-1].kind if self.faults else 'start'}; "
                    "restarting it")
            self.job.start()
            self.job.wait_for_batch_after(self.job.started_at or 0, 300, committed=True)
            return
        since = self.faults[-1].ended if self.faults else 0.0
        with contextlib.suppress(TimeoutError, RuntimeError):
            self.job.wait_for_batch_after(since, spacing, committed=True)

    def inject(self, kind: str) -> bool:
        """Apply one fault; ``False`` if its moment never came (the job died meanwhile)."""
        try:
            getattr(self, kind)()
        except (TimeoutError, RuntimeError) as exc:
            log(f"{kind} not injected: {exc}")
            return False
        return True

    def _kill(self, kind: str) -> None:
        killed = self.job.kill()
        self.faults.append(Fault(kind, killed, killed))

    def kill(self) -> None:
        time.sleep(self.rng.uniform(0.2, 3.0))
        self._kill("kill")

    def kill_in_batch(self) -> None:
        planned = _last_planned(self.checkpoint)
        wait_until(lambda: _last_planned(self.checkpoint) > planned, 120, "a planned batch",
                   every=0.01, alive=lambda: self.job.running)
        time.sleep(self.rng.uniform(0.0, 0.4))
        self._kill("kill_in_batch")

    def kill_after_sink_commit(self) -> None:
        last = _ledger_batch(self.broker.url, self.checkpoint)
        wait_until(lambda: _ledger_batch(self.broker.url, self.checkpoint) > last, 120,
                   "the sink's commit",
                   every=0.005, alive=lambda: self.job.running)
        self._kill("kill_after_sink_commit")

    def broker_restart(self) -> None:
        began = time.time()
        self.broker.stop()
        self.broker.start()
        self.faults.append(Fault("broker_restart", began, time.time()))

    def postgres_fast(self) -> None:
        began = time.time()
        self.pg.restart("fast")
        self.faults.append(Fault("postgres_fast", began, time.time()))

    def postgres_immediate(self) -> None:
        began = time.time()
        self.pg.restart("immediate")
        self.faults.append(Fault("postgres_immediate", began, time.time()))


def _exceptions(
    pg: LocalPostgres, broker: LocalIggy, root: Path, checkpoint: Path, slot: str,
    source: dict[str, str], sink: dict[str, str], rounds: int,
) -> list[Fault]:
    """Each commit point's exception ``rounds`` times, in this process's Spark."""
    if not rounds:
        return []
    sys.path.insert(0, str(_TESTS))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_TESTS),
                                                             os.environ.get("PYTHONPATH")]))
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession
    from support.faulty_sources import POINTS, fired_at, register, start_faulty_pipeline

    spark = (SparkSession.builder.master("local[2]").appName("bench-reliability")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    faults: list[Fault] = []
    marker = root / "armed"
    try:
        for _ in range(rounds):
            for point in POINTS:
                fault = {"fault_at": point, "fault_marker": str(marker)}
                query = start_faulty_pipeline(
                    spark, checkpoint=str(checkpoint),
                    source={"dsn": pg.dsn, "slot": slot, "batch_rows": "200", **source, **fault},
                    sink={"url": broker.url, **sink, **fault})
                before = _last_planned(checkpoint)
                try:
                    wait_until(lambda b=before: _last_planned(checkpoint) > b,  # type: ignore[misc]
                               300, "a batch of the restarted query")
                except TimeoutError as exc:
                    log(f"exception at {point} not injected: {exc}")
                    query.stop()
                    continue
                marker.touch()
                with contextlib.suppress(StreamingQueryException):
                    query.awaitTermination(180)
                if query.isActive:
                    marker.unlink(missing_ok=True)
                    query.stop()
                    log(f"exception at {point} did not fire within 180 s; skipped")
                    continue
                at = fired_at(marker)
                faults.append(Fault(f"exception_{point}", at, at))
                log(f"exception at {point}: query failed; restarting it")
    finally:
        for query in spark.streams.active:
            query.stop()
        spark.stop()
    return faults


def run_campaign(
    pg: LocalPostgres, broker: LocalIggy, root: Path, *, name: str, delivery: str,
    schedule: list[str], exception_rounds: int, rate: float, seed: int, budget: float,
    spacing: float,
) -> dict[str, Any]:
    work, source = prepare_capture(pg.dsn, name, seed=seed)
    checkpoint = root / f"checkpoint-{name}"
    sink = {**SINK, "delivery_guarantee": delivery}
    job = PipelineJob(dsn=pg.dsn, slot=name, url=broker.url, checkpoint=checkpoint,
                      log_path=root / f"job-{name}.log", source=source, sink=sink)
    rng = random.Random(seed)
    campaign = Campaign(pg, broker, root, job, rng)
    stop = threading.Event()
    started = time.monotonic()
    with SlotWatch(pg.dsn, name, checkpoint, interval=0.5) as watch:
        background = work.start(rate=rate, stop=stop)
        try:
            if exception_rounds:  # first: in this process's Spark, before the job's JVM starts
                campaign.faults += _exceptions(pg, broker, root, checkpoint, name, source,
                                               sink, exception_rounds)
            for number, kind in enumerate(schedule):
                if time.monotonic() - started > budget:
                    log(f"[{name}] the time budget is spent after {number} faults")
                    break
                campaign.settle(spacing)
                if not campaign.inject(kind):
                    continue
                log(f"[{name}] fault {number + 1}/{len(schedule)}: {kind} "
                    f"({work.changes:,} changes committed, {time.monotonic() - started:.0f}s)")
            campaign.settle(300)
            stop.set()
            stats = background.join(600)
            target = flush_lsn(pg.dsn)
            for _ in range(3):  # a job that exits under a late fault is restarted
                campaign.settle(300)
                with contextlib.suppress(RuntimeError):
                    wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 900,
                               "the job to catch up", alive=lambda: job.running)
                    break
            stopped = job.stop()
        finally:
            stop.set()
            if job.running:
                job.kill()
    wall = time.monotonic() - started
    log(f"[{name}] workload done ({stats.changes:,} changes in {stats.seconds:.0f}s); job exit "
        f"{stopped}; reading back")
    report = verify(broker.url, [name], work)
    batches = watch.batches()
    all_faults = campaign.faults
    for f in all_faults:
        f.batches_in_flight = len(in_flight(batches, [f.window]))
        after = [b.committed_at for b in batches if b.committed_at and b.committed_at > f.ended]
        f.recover_seconds = round(min(after) - f.ended, 2) if after else None
    suspects = in_flight(batches, [f.window for f in all_faults])
    unexplained = unexplained_duplicates(report.duplicated_commits, suspects, report.commits)
    ledger = read_ledger(broker.url, checkpoint).data
    kinds = sorted({f.kind for f in all_faults})
    return {
        "delivery_guarantee": delivery,
        "faults_injected": len(all_faults),
        "faults_by_kind": {k: sum(1 for f in all_faults if f.kind == k) for k in kinds},
        "job_exits_restarted": campaign.job_exits,
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
        "ledger_delivery": ledger.get("delivery"),
        "slot_samples": len(watch.samples),
        "slot_ahead_of_checkpoint": len(watch.violations),
        "max_retained_wal_bytes": max((s.retained_wal or 0) for s in watch.samples),
        "max_recover_seconds_by_kind": {
            k: max((f.recover_seconds or 0) for f in all_faults if f.kind == k) for k in kinds},
        "batches": len(batches),
        "batches_hit_by_a_fault": len(suspects),
        "workload": asdict(stats),
        "job_exit_code": stopped,
        "wall_seconds": round(wall, 1),
        "ok": report.ok and not watch.violations and (
            report.duplicates == 0 if delivery == "effectively_once" else not unexplained),
        "problems": list(report.problems[:10]),
        "faults": [asdict(f) for f in all_faults],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=100,
                        help="faults from outside (kills, restarts) with the feature on")
    parser.add_argument("--exception-rounds", type=int, default=3,
                        help="rounds of one exception at each of the 4 commit points")
    parser.add_argument("--off-faults", type=int, default=len(OFF_SCHEDULE),
                        help="faults of the at_least_once comparison run (0: none)")
    parser.add_argument("--inject-minutes", type=float, default=30.0,
                        help="stop injecting outside faults after this long (then the "
                             "exceptions, the catch-up and the verdict)")
    parser.add_argument("--spacing", type=float, default=8.0,
                        help="seconds at most between faults other than kills (a committed "
                             "batch ends the wait sooner)")
    parser.add_argument("--rate", type=float, default=80.0, help="changes per second")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    started = time.time()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-reliability-") as tmp, LocalPostgres() as pg:
        broker = LocalIggy(process=True, data_dir=Path(tmp) / "iggy").start()
        try:
            runs["effectively_once"] = run_campaign(
                pg, broker, Path(tmp), name=NAME, delivery="effectively_once",
                schedule=random.Random(args.seed).choices(KINDS, WEIGHTS, k=args.faults),
                exception_rounds=args.exception_rounds, rate=args.rate, seed=args.seed,
                budget=args.inject_minutes * 60, spacing=args.spacing)
            write_result("reliability", _result(args, runs, started))
            if args.off_faults:
                runs["at_least_once"] = run_campaign(
                    pg, broker, Path(tmp), name=f"{NAME}_off", delivery="at_least_once",
                    schedule=[OFF_SCHEDULE[i % len(OFF_SCHEDULE)] for i in range(args.off_faults)],
                    exception_rounds=0, rate=args.rate, seed=args.seed + 1, budget=1e9,
                    spacing=300)
        finally:
            broker.stop()
    result = _result(args, runs, started)
    path = write_result("reliability", result)
    print(f"reliability: {result['verdict']}: {result['faults_injected']} faults, "
          f"{result['changes']:,} changes, missing {result['missing']}, duplicates "
          f"{result['duplicates']:,} (at_least_once: {result['duplicates_at_least_once']} over "
          f"{result['faults_at_least_once']} faults) -> {path}")
    return 0 if result["verdict"] == "ok" else 1


def _result(args: argparse.Namespace, runs: dict[str, Any], started: float) -> dict[str, Any]:
    on = runs["effectively_once"]
    return {
        "benchmark": "effectively-once delivery under a campaign of faults (kill -9 of the job at "
                     "random moments, in a batch and right after the sink's commit; broker "
                     "restarts; Postgres fast and immediate restarts; an exception at each "
                     "commit point), judged by the consistency oracle",
        "config": {"faults": args.faults, "inject_minutes": args.inject_minutes,
                   "spacing_seconds": args.spacing,
                   "weights": dict(zip(KINDS, WEIGHTS, strict=True)),
                   "exception_rounds": args.exception_rounds,
                   "off_faults": args.off_faults, "rate_per_second": args.rate,
                   "seed": args.seed, "partitions_per_topic": int(SINK["topic_defaults."
                                                                      "partitions_count"]),
                   # the job's processes run this one's Python and environment
                   "decoding_path": decoding_path.here(),
                   "pipeline": "python -m pg_to_iggy --master local[2], default trigger; "
                               "exceptions: the same query in the benchmark's Spark, "
                               "2 s trigger"},
        **{k: on[k] for k in ("faults_injected", "changes", "missing", "invented", "duplicates",
                              "order_violations", "slot_ahead_of_checkpoint")},
        "duplicates_at_least_once": runs.get("at_least_once", {}).get("duplicates"),
        "faults_at_least_once": runs.get("at_least_once", {}).get("faults_injected"),
        "verdict": "ok" if all(r["ok"] for r in runs.values()) else "FAILED",
        "wall_seconds": round(time.time() - started, 1),
        "runs": runs,
    }


if __name__ == "__main__":
    sys.exit(main())
