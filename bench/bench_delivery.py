"""What effectively-once delivery costs: ``iggy_routed`` with it on and off, side by side.

    python -m bench.bench_delivery [--messages 300000] [--rounds 5] [--destinations 10]

The input and the timing are bench_sink's (Parquet files, one per core, read by
``readStream.parquet`` and written with ``writeStream.format("iggy_routed")``,
``trigger(availableNow=True)``, timed from the first micro-batch's start to the last one's end,
every message acknowledged and counted back). The two contenders differ only in
``delivery_guarantee``: ``effectively_once`` (the default: an origin header on every message,
the driver's started marker per batch; no replay happens here, so no tail is read) and
``at_least_once``. They run interleaved, round after round, on a fresh broker per round, each
into its own stream; the first round is a discarded warm-up. Writes
``bench/results/delivery.json`` with the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import common, iggy
from bench.bench_sink import prepared_rows, spark_write, write_parquet

TIMED = ("Parquet -> iggy_routed: first micro-batch start to last micro-batch end (Spark "
         "progress), every message acknowledged; JVM and query start-up excluded")
MODES = ("effectively_once", "at_least_once")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--destinations", type=int, default=10)
    parser.add_argument("--files", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    topics = [f"t{i}" for i in range(args.destinations)]
    work = Path(tempfile.mkdtemp(prefix="bench-delivery-"))
    try:
        sources = {}
        for mode in MODES:  # the same rows, each mode into its own stream
            sources[mode] = work / mode
            write_parquet(prepared_rows(args.messages, args.destinations, mode), sources[mode],
                          args.files)
        spark = common.spark_session("bench-delivery")
        cpu = common.CpuMeter(common.spark_groups(spark))
        broker = iggy.RoundBrokers(MODES, topics)

        def contender(mode: str) -> common.Contender:
            def run(number: int) -> common.Measure:
                current = broker.current
                measure = spark_write(spark, sources[mode], current.url, args.messages,
                                      {"delivery_guarantee": mode})
                iggy.expect_messages(current.address, mode, topics, args.messages)
                return measure
            return run

        try:
            runs = common.paired_rounds({m: contender(m) for m in MODES}, args.rounds,
                                        "delivery", warm_up=True, cpu=cpu, setup=broker.start)
        finally:
            broker.close()
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = common.compared(runs, "effectively_once", ("at_least_once",))
    ratio = result["ratio_vs_at_least_once"]["median"]
    summary = (f"delivery cost [{args.messages:,} messages, {args.destinations} destinations]: "
               f"effectively_once {result['effectively_once']['per_second']:,}/s, at_least_once "
               f"{result['at_least_once']['per_second']:,}/s: {ratio:.3f}x")
    return common.publish("delivery", {
        "benchmark": "iggy_routed throughput, delivery_guarantee effectively_once vs "
                     "at_least_once, interleaved rounds",
        "config": {"messages": args.messages, "rounds": args.rounds,
                   "destinations": args.destinations, "files": args.files, "timed": TIMED,
                   "broker": "LocalIggy(process=True), fresh per round"},
        "results": result,
        "ratio_effectively_once_vs_at_least_once": ratio,
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
