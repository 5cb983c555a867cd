"""``pg_cdc`` read speed against a hand-written psycopg loop and against the bare peek.

    python -m bench.bench_source [--changes 500000] [--rounds 5] [--sweep 1MB,4MB,16MB,64MB]
                                 [--no-python-path]

One throwaway Postgres, one workload (``bench.cdc``: half inserts, half updates, 1,000 changes
per transaction, 6 columns), read by these contenders per plugin, interleaved round by round:

* ``spark``: ``spark.readStream.format("pg_cdc")`` into Spark's ``noop`` sink with
  ``trigger(availableNow=True)``, on a fresh copy of the template slot. Timed from the first
  micro-batch's start to the last one's end (Spark's progress reports): the peek, decoding,
  Arrow batches, the hand-over to the JVM. JVM and query start-up are excluded (reported as
  ``wall_seconds``); a discarded warm-up round runs first. pgoutput decodes on the compiled
  core: checked in this process, its Python workers and every run's source runner
  (:mod:`bench.decoding_path`); the benchmark fails if it is not.
* ``spark_python`` (pgoutput only): the same read on the pure-Python path, in a second session
  of its own process (:mod:`bench.spark_peer`, ``IGGY_SPARK_CORE=python``), timed the same way;
  checked to be on the Python path the same way. test_decoding has no compiled decoder (it is
  Python for both), so it has no such contender. ``--no-python-path`` leaves it out.
* ``handwritten``: :func:`bench.handwritten.count_rows`, a competent user's loop: peek through a
  server-side cursor, decode every change to the same key/before/after JSON, group by
  transaction and build each output row. Timed from connecting to the last row.
* ``raw_peek``: the same peek fetched and thrown away, the floor under any reader.

Each run also records the CPU seconds spent by the JVM, Spark's Python workers, Postgres and the
benchmark process itself (for ``spark_python``, the peer's JVM, workers and process). Then the
``max_bytes_per_trigger`` sweep: ``spark`` (pgoutput) again with each limit, once. Then
parallel decoding: ``spark`` (pgoutput) with ``min_partitions`` 1, 2 and 4 interleaved round by
round, plus the cost of ``pg_replication_slot_advance`` over the whole workload (one backend):
the inputs of the scaling model in :func:`scaling_model`.
Writes ``bench/results/source.json``; the hand-written loop's JSON is first checked equal to
``pg_cdc``'s on the first transactions, so the ratio compares the same work.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import psycopg

from bench import cdc, common, decoding_path, handwritten
from bench.spark_peer import PURE_PYTHON, SparkPeer
from connector_common.units import parse_byte_size
from iggy_spark_testing.harness import postgres

SPARK_TIMED = ("pg_cdc -> noop: first micro-batch start to last micro-batch end (Spark "
               "progress); JVM and query start-up excluded")
HAND_TIMED = "connect, peek, decode every change to JSON, build its row, count; one process"
RAW_TIMED = "connect, fetch every peek row through a server-side cursor, no parsing"


def noop_read(spark: Any, options: dict[str, str], timed: str = SPARK_TIMED
              ) -> tuple[common.Measure, Any]:
    """One ``pg_cdc`` → ``noop`` run with ``trigger(availableNow=True)``: its measure and the
    finished query (for its progress)."""
    checkpoint = tempfile.mkdtemp(prefix="bench-source-")
    started: list[Any] = []

    def start() -> Any:
        started.append(spark.readStream.format("pg_cdc").options(**options).load()
                       .writeStream.format("noop").option("checkpointLocation", checkpoint)
                       .trigger(availableNow=True).start())
        return started[-1]

    try:
        measure = common.run_available_now(start, timed)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    return measure, started[-1]


def spark_read(spark: Any, options: dict[str, str]) -> common.Measure:
    """:func:`noop_read`'s measure, the source runner's decoding path in
    ``extra["runner_path"]``. Also run in a :class:`SparkPeer`."""
    measure, query = noop_read(spark, options)
    measure.extra["runner_path"] = decoding_path.runner(query)
    return measure


def check_same_json(conn: psycopg.Connection[Any], workload: cdc.CdcWorkload, plugin: str,
                    transactions: int = 3) -> int:
    """Assert the hand-written loop's key/before/after equal ``pg_cdc``'s for the first
    ``transactions`` transactions (read with the project's reader, outside Spark)."""
    from connector_common.lsn import parse_lsn
    from postgres_cdc_source.options import CdcOptions
    from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

    with handwritten.connect(workload.dsn) as hand:
        txns = handwritten.transactions(hand, plugin, workload.template[plugin],
                                        workload.publication)
        first = [next(txns) for _ in range(transactions)]
        hand.rollback()
    expected = [(handwritten.lsn_text(commit_lsn), seq, op, key, before, after)
                for _, commit_lsn, _, changes in first
                for _, seq, _, _, op, key, before, after in changes]
    with cdc.slot_copy(conn, workload.template[plugin], f"check_{plugin}") as slot:
        reader = PgCdcStreamReader(CdcOptions.from_options(workload.spark_options(plugin, slot)))
        partition = CdcPartition(parse_lsn(reader.initialOffset()["lsn"]), first[-1][1])
        rows = [row for batch in reader.read(partition) for row in batch.to_pylist()]
        reader.stop()
    got = [(r["commit_lsn"], r["seq"], r["op"], *(None if r[c] is None else r[c].encode()
                                                  for c in ("key", "before", "after")))
           for r in rows]
    if got[:len(expected)] != expected or not expected:
        raise AssertionError(f"{plugin}: the hand-written loop does not produce pg_cdc's rows")
    return len(expected)


def baselines(workload: cdc.CdcWorkload, plugin: str) -> dict[str, common.Contender]:
    """The raw peek and the hand-written loop on the template slot (peeking never moves it)."""
    template, dsn, publication = workload.template[plugin], workload.dsn, workload.publication

    def raw(_: int) -> common.Measure:
        with common.stopwatch() as elapsed:
            rows, size = handwritten.raw_peek(dsn, plugin, template, publication)
        return common.Measure(workload.changes, elapsed(), RAW_TIMED, {"rows": rows, "bytes": size})

    def hand(_: int) -> common.Measure:
        with common.stopwatch() as elapsed:
            count = handwritten.count_rows(dsn, plugin, template, publication)
        if count != workload.changes:
            raise AssertionError(f"hand-written loop counted {count}, not {workload.changes}")
        return common.Measure(count, elapsed(), HAND_TIMED)

    return {"raw_peek": raw, "handwritten": hand}


def compare_plugin(spark: Any, conn: psycopg.Connection[Any], workload: cdc.CdcWorkload,
                   plugin: str, rounds: int, cpu: common.CpuMeter,
                   peer: SparkPeer | None = None) -> dict[str, Any]:
    """The contenders on one plugin, interleaved, after a warm-up round: the baselines,
    ``spark`` and, with a ``peer`` (pgoutput), ``spark_python``."""
    template = workload.template[plugin]

    def read(name: str, path: str | None,
             run: Callable[[dict[str, str]], common.Measure]) -> common.Contender:
        def contender(number: int) -> common.Measure:
            with cdc.slot_copy(conn, template, f"run_{plugin}_{name}_{number + 1}") as slot:
                measure = run(workload.spark_options(plugin, slot))
            if measure.items != workload.changes:
                raise AssertionError(f"{name} read {measure.items}, not {workload.changes}")
            if path is not None:
                decoding_path.expect(name, path, {"source runner": measure.extra["runner_path"]})
            return measure
        return contender

    pgoutput = plugin == "pgoutput"
    contenders: dict[str, common.Contender] = {
        **baselines(workload, plugin),
        "spark": read("spark", decoding_path.COMPILED if pgoutput else None,
                      lambda options: spark_read(spark, options)),
    }
    if peer is not None and pgoutput:
        contenders["spark_python"] = read(
            "spark_python", decoding_path.PYTHON,
            lambda options: peer.call("bench.bench_source:spark_read", options=options))
    runs = common.paired_rounds(contenders, rounds, f"source {plugin}", warm_up=True, cpu=cpu)
    results = {**common.compared(runs, baselines=("handwritten", "raw_peek", *(
                   ["spark_python"] if "spark_python" in runs else []))),
               "handwritten_vs_raw_peek": common.ratio(runs["handwritten"], runs["raw_peek"])}
    if "spark_python" in runs:
        results["spark_python_vs_handwritten"] = common.ratio(runs["spark_python"],
                                                              runs["handwritten"])
        results["spark_python_vs_raw_peek"] = common.ratio(runs["spark_python"],
                                                           runs["raw_peek"])
    return results


def sweep(spark: Any, conn: psycopg.Connection[Any], workload: cdc.CdcWorkload,
          limits: list[str]) -> list[dict[str, Any]]:
    """``pg_cdc`` (pgoutput) → ``noop`` once per ``max_bytes_per_trigger`` value."""
    points = []
    for number, limit in enumerate([*limits, "unlimited"]):
        with cdc.slot_copy(conn, workload.template["pgoutput"], f"sweep_{number}") as slot:
            options = workload.spark_options("pgoutput", slot)
            if limit != "unlimited":
                options["max_bytes_per_trigger"] = limit
            measure = spark_read(spark, options)
        common.log(f"sweep max_bytes_per_trigger={limit}: {measure.rate:,.0f} changes/s in "
            f"{measure.extra['batches']} batches")
        points.append({
            "max_bytes_per_trigger": limit,
            "bytes": None if limit == "unlimited" else parse_byte_size(limit),
            "changes_per_second": round(measure.rate),
            "batches": measure.extra["batches"],
            "seconds": round(measure.seconds, 3),
            "wall_seconds": measure.extra["wall_seconds"],
        })
    return points


ADVANCE_TIMED = "copy the template slot, pg_replication_slot_advance over the whole workload"


def by_partitions(spark: Any, conn: psycopg.Connection[Any], workload: cdc.CdcWorkload,
                  counts: list[int], rounds: int, cpu: common.CpuMeter) -> dict[str, Any]:
    """``pg_cdc`` (pgoutput) → ``noop`` with ``min_partitions`` = each of ``counts``,
    interleaved (one warm-up round), and the advance cost; rates side by side in one run."""
    template = workload.template["pgoutput"]

    def contender(count: int) -> common.Contender:
        def run(number: int) -> common.Measure:
            with cdc.slot_copy(conn, template, f"parts_{count}_{number + 1}") as slot:
                options = {**workload.spark_options("pgoutput", slot),
                           "min_partitions": str(count), "min_bytes_per_partition": "1MB"}
                measure = spark_read(spark, options)
            if measure.items != workload.changes:
                raise AssertionError(f"pg_cdc read {measure.items}, not {workload.changes}")
            return measure
        return run

    def advance(_: int) -> common.Measure:
        with cdc.slot_copy(conn, template, "advance_probe") as slot, \
                common.stopwatch() as elapsed:
            conn.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_flush_lsn())",
                         (slot,))
            seconds = elapsed()
        return common.Measure(workload.changes, seconds, ADVANCE_TIMED)

    contenders = {**baselines(workload, "pgoutput"), "advance": advance,
                  **{f"partitions_{n}": contender(n) for n in counts}}
    runs = common.paired_rounds(contenders, rounds, "partitions", warm_up=True, cpu=cpu)
    result: dict[str, Any] = {name: common.summarize(measures) for name, measures in runs.items()}
    for n in counts:
        if n != counts[0]:
            result[f"ratio_{n}_vs_{counts[0]}"] = common.ratio(
                runs[f"partitions_{n}"], runs[f"partitions_{counts[0]}"])
        result[f"ratio_{n}_vs_handwritten"] = common.ratio(
            runs[f"partitions_{n}"], runs["handwritten"])
    return result


def scaling_model(parts: dict[str, Any], changes: int, wal_bytes: int,
                  cores: tuple[int, ...] = (8, 32, 128),
                  server_cores: tuple[int, ...] = (8, 32)) -> dict[str, Any]:
    """What one slot can deliver with ``c`` executor cores (``min_partitions`` = c), from the
    per-core costs measured in :func:`by_partitions` (CPU seconds, so the other work on a shared
    machine does not enter): ``peek`` and ``advance`` are the changes one Postgres backend
    decodes per CPU second with and without output, ``task`` those one pg_cdc task (its Python
    worker and its JVM share) handles per CPU second.

    Partition ``i`` of ``k`` advances over ``i/k`` of the batch, then peeks ``1/k``. So:

    * executors: ``c * task`` (tasks in parallel, one core each);
    * the last task: it finishes after ``(k-1)/(k*advance) + 1/(k*min(peek, task))`` per change;
    * Postgres: ``(k-1)/(2*advance) + 1/peek`` CPU seconds per change in all, over ``s`` cores;
    * WAL: read ``(k+1)/2`` times (from the page cache when the batch is recent).

    The model's rate is the smallest bound.
    """
    def per_cpu_second(name: str, *groups: str) -> float:
        spent = sum(parts[name]["median_cpu_seconds"][g] for g in groups)
        return changes / max(spent, 1e-9)

    peek = per_cpu_second("raw_peek", "postgres")
    advance = per_cpu_second("advance", "postgres")
    task = per_cpu_second("partitions_1", "python_workers", "jvm")
    points = []
    for c in cores:
        k = c
        last_task = 1 / ((k - 1) / (k * advance) + 1 / (k * min(peek, task)))
        server = {s: s / ((k - 1) / (2 * advance) + 1 / peek) for s in server_cores}
        points.append({
            "executor_cores": c,
            "executors_bound": round(c * task),
            "last_task_bound": round(last_task),
            **{f"postgres_{s}_cores_bound": round(v) for s, v in server.items()},
            "changes_per_second": {f"postgres_{s}_cores": round(min(c * task, last_task, v))
                                   for s, v in server.items()},
            "wal_read_bytes_per_second": {
                f"postgres_{s}_cores": round(min(c * task, last_task, v) * wal_bytes / changes
                                             * (k + 1) / 2) for s, v in server.items()},
        })
    return {"per_cpu_second": {"peek": round(peek), "advance": round(advance),
                               "task": round(task)}, "points": points}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=500_000)
    parser.add_argument("--txn-rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plugins", default=",".join(cdc.PLUGINS))
    parser.add_argument("--sweep", default="1MB,4MB,16MB,64MB",
                        help="max_bytes_per_trigger values ('' for none)")
    parser.add_argument("--partitions", default="1,2,4",
                        help="min_partitions values compared side by side ('' for none)")
    parser.add_argument("--partitions-only", action="store_true",
                        help="only the min_partitions comparison (pgoutput, with its baselines), "
                             "written to source_partitions.json")
    parser.add_argument("--no-python-path", action="store_true",
                        help="leave out spark_python, the pgoutput read on the pure-Python path "
                             "(it runs in a second Spark session, in a process of its own)")
    args = parser.parse_args(argv)
    only = args.partitions_only
    plugins = ["pgoutput"] if only else [p for p in args.plugins.split(",") if p]
    limits = [] if only else [s for s in args.sweep.split(",") if s]
    counts = [int(s) for s in args.partitions.split(",") if s]
    with_peer = "pgoutput" in plugins and not only and not args.no_python_path

    load = os.getloadavg()[0]
    with postgres() as pg, pg.connect() as conn, ExitStack() as stack:
        before = conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchone()
        with common.stopwatch() as elapsed:
            workload = cdc.write_workload(conn, pg.dsn, args.changes, args.txn_rows)
        after = conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchone()
        assert before is not None and after is not None
        wal_bytes = int(after[0] - before[0])
        common.log(f"workload: {workload.changes:,} changes, {wal_bytes / 1e6:.0f} MB of WAL, "
            f"written in {elapsed():.1f}s")
        checked = {plugin: check_same_json(conn, workload, plugin) for plugin in plugins}
        common.log(f"hand-written loops produce pg_cdc's JSON: {checked} rows compared")
        # the peer's JVM starts while this one does; stopped on the way out, errors included
        peer = stack.enter_context(SparkPeer("bench-source-python", PURE_PYTHON)) \
            if with_peer else None
        spark = common.spark_session("bench-source")
        paths = decoding_path.checked(spark, peer, compiled="pgoutput" in plugins)
        cpu = common.CpuMeter(cdc.with_postgres(common.spark_groups(
            spark, [(peer.pid, peer.jvm_pid)] if peer is not None else []), pg))
        results: dict[str, Any] = {} if only else {
            plugin: compare_plugin(spark, conn, workload, plugin, args.rounds, cpu, peer)
            for plugin in plugins
        }
        if peer is not None:
            peer.close()  # before the sweeps: a second idle JVM is of no use to them
        if limits and "pgoutput" in plugins:
            results["max_bytes_sweep"] = sweep(spark, conn, workload, limits)
        if counts and "pgoutput" in plugins:
            partitioned = by_partitions(spark, conn, workload, counts, args.rounds, cpu)
            if "partitions_1" in partitioned:
                partitioned["model"] = scaling_model(partitioned, workload.changes, wal_bytes)
            results["partitions"] = partitioned
        spark.stop()

    config = {"changes": workload.changes, "txn_rows": args.txn_rows, "rounds": args.rounds,
              "wal_bytes": wal_bytes, "plugins": plugins, "partitions": counts,
              "min_bytes_per_partition": "1MB", "load_1m_at_start": round(load, 2),
              "equivalence_rows_checked": checked,
              # pgoutput's: each session's process and Python workers, checked before the
              # rounds (each run's source runner is checked too, in its runs_extra); the
              # pure-Python contender is pgoutput's only: test_decoding is Python on both
              "decoding_paths": {
                  **({"spark": {"path": decoding_path.COMPILED, **paths["spark"]}}
                     if "spark" in paths else {}),
                  **({"spark_python": {"path": decoding_path.PYTHON, **paths["spark_python"],
                                       "environment": dict(PURE_PYTHON)}}
                     if "spark_python" in paths else {}),
                  **({"test_decoding": "python (no compiled decoder)"}
                     if "test_decoding" in plugins else {})}}
    if only:
        by = results["partitions"]
        return common.publish("source_partitions", {
            "benchmark": "pg_cdc -> noop by min_partitions, side by side with the hand-written "
                         "loop, the raw peek and pg_replication_slot_advance",
            "config": config,
            "results": by,
            "summary": f"source by min_partitions [{workload.changes:,} changes]: " + ", ".join(
                f"{n}: {by[f'partitions_{n}']['per_second']:,}/s "
                f"({by[f'ratio_{n}_vs_handwritten']['median']:.2f}x hand-written)"
                for n in counts),
        })
    parts = [
        f"{p}: pg_cdc {results[p]['spark']['per_second']:,}/s = "
        f"{results[p]['ratio_vs_handwritten']['median']:.2f}x hand-written "
        f"({results[p]['handwritten']['per_second']:,}/s), "
        f"{results[p]['ratio_vs_raw_peek']['median']:.2f}x raw peek "
        f"({results[p]['raw_peek']['per_second']:,}/s)"
        for p in plugins
    ]
    pure = results.get("pgoutput", {})
    if "spark_python" in pure:
        parts.append(
            f"pgoutput on the pure-Python path: {pure['spark_python']['per_second']:,}/s = "
            f"{pure['spark_python_vs_handwritten']['median']:.2f}x hand-written, "
            f"{pure['spark_python_vs_raw_peek']['median']:.2f}x raw peek; compiled / pure "
            f"{pure['ratio_vs_spark_python']['median']:.2f}x")
    if "partitions" in results:
        parts.append("min_partitions " + ", ".join(
            f"{n}: {results['partitions'][f'partitions_{n}']['per_second']:,}/s"
            for n in counts))
    summary = f"source, changes/s [{workload.changes:,} changes]: " + "; ".join(parts)
    return common.publish("source", {
        "benchmark": "pg_cdc -> noop vs hand-written psycopg loop vs raw peek",
        "config": config,
        "results": results,
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
