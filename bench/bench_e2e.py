"""The whole pipeline, ``pg_cdc`` → ``iggy_routed``, against a hand-written single process.

    python -m bench.bench_e2e [--changes 300000] [--rounds 5] [--min-partitions 1,2]
                              [--no-python-path]

One throwaway Postgres and one workload (``bench.cdc``: half inserts, half updates, 1,000 changes
per transaction); per round a fresh broker (its own process) with the destinations created for
every contender, then, interleaved:

* ``spark``: :func:`pg_to_iggy.pipeline.start_pipeline` on a fresh copy of the template slot,
  routing by table (``topic_from=table``) into stream ``spark``, ``trigger(availableNow=True)``.
  Timed from the first micro-batch's start to the last one's end: peek, decode, Arrow, JSON
  payloads, sending, every acknowledgement. JVM and query start-up excluded (``wall_seconds``).
  With ``min_partitions`` above 1 (contenders ``spark_partitions_<n>``) the pipeline decodes
  each batch in that many tasks and restores per-key order (``in_key_order``) before the sink.
  pgoutput decodes on the compiled core: checked in this process, its Python workers and every
  run's source runner (:mod:`bench.decoding_path`).
* ``spark_python``: the same pipeline (one task per batch) on the pure-Python path, into stream
  ``spark_python``, in a second session of its own process (:mod:`bench.spark_peer`,
  ``IGGY_SPARK_CORE=python``), timed the same way and checked to be on the Python path.
  ``--no-python-path`` leaves it out.
* ``handwritten``: one Python process: peek the template slot through a server-side cursor,
  decode (:mod:`bench.handwritten`), build the very same JSON payload and message id per change
  with orjson and xxh3, and send with the SDK in batches of 1,000, each awaited.

Round one checks that the pipelines sent byte-identical payloads and ids for the first 1,000
changes (each one-task ``spark`` contender against the hand-written one);
every round counts the messages back. A discarded warm-up round comes first. Writes
``bench/results/e2e.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any

import psycopg

from bench import cdc, common, decoding_path, handwritten, iggy
from bench.spark_peer import PURE_PYTHON, SparkPeer
from iggy_spark_testing.harness import postgres
from pg_to_iggy.pipeline import start_pipeline

PLUGIN = "pgoutput"
SPARK_TIMED = ("pg_cdc -> iggy_routed (start_pipeline): first micro-batch start to last "
               "micro-batch end, every message acknowledged; JVM and query start-up excluded")
HAND_TIMED = ("connect, peek, decode, orjson payload + xxh3 id per change, send_messages per "
              "1,000, each awaited; one process")


def hand_pipeline(workload: cdc.CdcWorkload, address: str) -> int:
    """The hand-written pipeline into stream ``hand``; returns the messages sent."""

    async def main() -> int:
        client = await handwritten.sdk_client(address)
        with handwritten.connect(workload.dsn) as conn:
            txns = handwritten.transactions(conn, PLUGIN, workload.template[PLUGIN],
                                            workload.publication)
            sent = await handwritten.send_rows(client, handwritten.pipeline_payload(txns, "hand"))
            conn.rollback()
        return sent

    return asyncio.run(main())


def stream_of(partitions: int) -> str:
    """Each contender's own stream: ``spark`` for one task per batch."""
    return "spark" if partitions == 1 else f"spark_partitions_{partitions}"


def spark_pipeline(spark: Any, workload: cdc.CdcWorkload, slot: str, url: str,
                   partitions: int, stream: str | None = None) -> common.Measure:
    """One ``availableNow`` run of the pipeline into ``stream`` (by default
    :func:`stream_of` ``partitions``); the source runner's decoding path in
    ``extra["runner_path"]``."""
    checkpoint = tempfile.mkdtemp(prefix="bench-e2e-")
    source = {**workload.spark_options(PLUGIN, slot), "topic_from": "table",
              "default_stream": stream or stream_of(partitions),
              "min_partitions": str(partitions), "min_bytes_per_partition": "1MB"}
    source.pop("dsn")
    source.pop("slot")
    started: list[Any] = []

    def start() -> Any:
        started.append(start_pipeline(spark, dsn=workload.dsn, slot=slot, url=url,
                                      checkpoint=checkpoint, source=source,
                                      trigger={"availableNow": True}))
        return started[-1]

    measure = common.run_available_now(start, SPARK_TIMED, workload.changes)
    measure.extra["runner_path"] = decoding_path.runner(started[-1])
    return measure


def peer_pipeline(spark: Any, workload: dict[str, Any], slot: str, url: str,
                  stream: str) -> common.Measure:
    """:func:`spark_pipeline` with one task per batch, as a :class:`SparkPeer` runs it (its
    arguments as JSON: the workload as :func:`dataclasses.asdict` gives it)."""
    return spark_pipeline(spark, cdc.CdcWorkload(**workload), slot, url, 1, stream)


def same_messages(address: str, stream: str = "spark", count: int = 1000) -> int:
    """Assert ``stream`` and the hand-written pipeline got the same first ``count`` payloads
    and ids."""
    spark, hand = (iggy.poll(address, name, cdc.TABLE)[:count] for name in (stream, "hand"))
    if [(m.payload(), m.id()) for m in spark] != [(m.payload(), m.id()) for m in hand]:
        raise AssertionError(f"the hand-written pipeline does not send what pg_cdc -> "
                             f"iggy_routed sends into {stream}")
    return len(spark)


def compare(spark: Any, conn: psycopg.Connection[Any], workload: cdc.CdcWorkload,
            rounds: int, cpu: common.CpuMeter, partitions: list[int],
            peer: SparkPeer | None = None) -> tuple[dict[str, Any], int]:
    streams = ["hand", *map(stream_of, partitions), *(["spark_python"] if peer else [])]
    broker = iggy.RoundBrokers(streams, [cdc.TABLE])
    checked = 0

    def hand(number: int) -> common.Measure:
        address = broker.current.address
        with common.stopwatch() as elapsed:
            sent = hand_pipeline(workload, address)
        iggy.expect_messages(address, "hand", [cdc.TABLE], workload.changes)
        return common.Measure(sent, elapsed(), HAND_TIMED)

    def spark_run(count: int) -> common.Contender:
        def run(number: int) -> common.Measure:
            nonlocal checked
            current = broker.current
            with cdc.slot_copy(conn, workload.template[PLUGIN],
                               f"e2e_{count}_{number + 1}") as slot:
                measure = spark_pipeline(spark, workload, slot, current.url, count)
            iggy.expect_messages(current.address, stream_of(count), [cdc.TABLE],
                                 workload.changes)
            decoding_path.expect(stream_of(count), decoding_path.COMPILED,
                                 {"source runner": measure.extra["runner_path"]})
            if number == 0 and count == 1:  # in_key_order reorders across keys: compare one
                checked = same_messages(current.address)
            return measure
        return run

    def python_run(number: int) -> common.Measure:
        assert peer is not None
        current = broker.current
        with cdc.slot_copy(conn, workload.template[PLUGIN], f"e2e_python_{number + 1}") as slot:
            measure = peer.call("bench.bench_e2e:peer_pipeline", workload=asdict(workload),
                                slot=slot, url=current.url, stream="spark_python")
        iggy.expect_messages(current.address, "spark_python", [cdc.TABLE], workload.changes)
        decoding_path.expect("spark_python", decoding_path.PYTHON,
                             {"source runner": measure.extra["runner_path"]})
        if number == 0:
            same_messages(current.address, "spark_python")
        return measure

    contenders: dict[str, common.Contender] = {
        "handwritten": hand,
        stream_of(1): spark_run(1),
        **({"spark_python": python_run} if peer is not None else {}),
        **{stream_of(n): spark_run(n) for n in partitions[1:]},
    }
    try:
        runs = common.paired_rounds(contenders, rounds, "e2e", warm_up=True, cpu=cpu,
                             setup=broker.start)
    finally:
        broker.close()
    results = common.compared(runs, baselines=("handwritten", *(
        ["spark_python"] if "spark_python" in runs else [])))
    if "spark_python" in runs:
        results["spark_python_vs_handwritten"] = common.ratio(runs["spark_python"],
                                                              runs["handwritten"])
    for n in partitions[1:]:
        results[f"ratio_partitions_{n}_vs_handwritten"] = common.ratio(
            runs[f"spark_partitions_{n}"], runs["handwritten"])
    return results, checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=300_000)
    parser.add_argument("--txn-rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-partitions", default="1,2",
                        help="min_partitions values run side by side (the first must be 1)")
    parser.add_argument("--no-python-path", action="store_true",
                        help="leave out spark_python, the pipeline on the pure-Python path "
                             "(it runs in a second Spark session, in a process of its own)")
    args = parser.parse_args(argv)
    partitions = [int(s) for s in args.min_partitions.split(",")]
    if partitions[0] != 1:
        parser.error("--min-partitions must start with 1 (the ratio reported as e2e_ratio)")

    with postgres() as pg, pg.connect() as conn, ExitStack() as stack:
        workload = cdc.write_workload(conn, pg.dsn, args.changes, args.txn_rows)
        # the peer's JVM starts while this one does; stopped on the way out, errors included
        peer = None if args.no_python_path else stack.enter_context(
            SparkPeer("bench-e2e-python", PURE_PYTHON))
        spark = common.spark_session("bench-e2e")
        paths = decoding_path.checked(spark, peer)
        cpu = common.CpuMeter(cdc.with_postgres(common.spark_groups(
            spark, [(peer.pid, peer.jvm_pid)] if peer is not None else []), pg))
        results, checked = compare(spark, conn, workload, args.rounds, cpu, partitions, peer)
        spark.stop()

    summary = (f"end to end, changes/s [{workload.changes:,} changes, pgoutput]: pg_cdc -> "
               f"iggy_routed {results['spark']['per_second']:,}/s = "
               f"{results['ratio_vs_handwritten']['median']:.2f}x hand-written pipeline "
               f"({results['handwritten']['per_second']:,}/s)" + "".join(
                   f"; min_partitions={n}: {results[f'spark_partitions_{n}']['per_second']:,}/s "
                   f"= {results[f'ratio_partitions_{n}_vs_handwritten']['median']:.2f}x"
                   for n in partitions[1:]))
    if "spark_python" in results:
        summary += (f"; pure-Python path {results['spark_python']['per_second']:,}/s = "
                    f"{results['spark_python_vs_handwritten']['median']:.2f}x hand-written, "
                    f"compiled / pure {results['ratio_vs_spark_python']['median']:.2f}x")
    return common.publish("e2e", {
        "benchmark": "pg_cdc -> iggy_routed vs hand-written single-process pipeline",
        "config": {"changes": workload.changes, "txn_rows": args.txn_rows, "plugin": PLUGIN,
                   "rounds": args.rounds, "identical_messages_checked": checked,
                   "min_partitions": partitions, "shuffle_partitions": 2,
                   "broker": "LocalIggy(process=True), fresh per round",
                   # each session's process and Python workers, checked before the rounds
                   # (each run's source runner is checked too, in its runs_extra)
                   "decoding_paths": {
                       "spark": {"path": decoding_path.COMPILED, **paths["spark"]},
                       **({"spark_python": {"path": decoding_path.PYTHON,
                                            **paths["spark_python"],
                                            "environment": dict(PURE_PYTHON)}}
                          if "spark_python" in paths else {})}},
        "results": results,
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
