"""``iggy_routed`` send speed against a hand-written SDK loop, for 1 to 500 destinations.

    python -m bench.bench_sink [--messages 300000] [--rounds 5] [--destinations 1,10,50,500]
        [--delivery-guarantee effectively_once|at_least_once]

The input is a table of prepared rows (``stream``, ``topic``, a string ``id``, and five payload
columns: long, string, double, boolean, an 80-character string), spread evenly over the
destinations. Per destination count, in rounds, on a fresh broker per round (its own process),
with the destinations created beforehand for both contenders:

* ``spark``: the rows as Parquet files (one per core) read by ``readStream.parquet`` and written
  with ``writeStream.format("iggy_routed")``, ``trigger(availableNow=True)``. Timed from the
  first micro-batch's start to the last one's end: reading Parquet, the Arrow hand-over to the
  Python writer tasks (one per file, so both cores), JSON encoding, routing, sending, waiting for
  every acknowledgement.
* ``handwritten``: the same rows already in memory as Python tuples (a head start: reading them
  is not timed), then per row ``orjson`` payload, xxh3-128 id, ``SendMessage``; per destination
  ``send_messages`` every 1,000 messages, each awaited; one process, one connection.

The first destination count starts with a discarded warm-up round (JIT, Python workers). Every
run's messages are counted back from the broker, and its CPU seconds per process group recorded
(JVM, Spark's Python workers, broker, this process). Writes ``bench/results/sink.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench import common, handwritten, iggy
from connector_common import compiled_core

FIELDS = ("n", "name", "amount", "active", "note")
SCHEMA = ("stream string, topic string, id string, n long, name string, amount double,"
          " active boolean, note string")
SPARK_TIMED = ("Parquet -> iggy_routed: first micro-batch start to last micro-batch end (Spark "
               "progress), every message acknowledged; JVM and query start-up excluded")
HAND_TIMED = ("rows already in memory -> orjson, xxh3 id, SendMessage, send_messages per 1,000 "
              "per destination, each awaited; one process")


def prepared_rows(messages: int, destinations: int, stream: str) -> pa.Table:
    """The input rows, round-robin over topics ``t0``..``t<destinations-1>``."""
    ids = range(messages)
    return pa.table({
        "stream": [stream] * messages,
        "topic": [f"t{i % destinations}" for i in ids],
        "id": [f"row-{i}" for i in ids],
        "n": pa.array(ids, pa.int64()),
        "name": [f"customer {i}" for i in ids],
        "amount": [i * 1.25 for i in ids],
        "active": [i % 2 == 0 for i in ids],
        "note": [f"{i:08d} " + "x" * 71 for i in ids],
    })


def write_parquet(table: pa.Table, directory: Path, files: int) -> None:
    directory.mkdir(parents=True)
    step = -(-table.num_rows // files)
    for number, start in enumerate(range(0, table.num_rows, step)):
        pq.write_table(table.slice(start, step), directory / f"part-{number}.parquet")


def spark_write(spark: Any, source: Path, url: str, messages: int,
                options: dict[str, str] | None = None) -> common.Measure:
    checkpoint = tempfile.mkdtemp(prefix="bench-sink-")

    def start() -> Any:
        return (spark.readStream.schema(SCHEMA).parquet(str(source))
                .writeStream.format("iggy_routed").option("url", url)
                .option("admission.max_destinations", "1000")
                .options(**(options or {}))
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True).start())

    return common.run_available_now(start, SPARK_TIMED, messages)


def hand_send(address: str, rows: list[tuple[Any, ...]]) -> int:
    async def main() -> int:
        client = await handwritten.sdk_client(address)
        return await handwritten.send_rows(client, handwritten.encode_rows(rows, FIELDS))

    return asyncio.run(main())


def compare(spark: Any, work: Path, messages: int, destinations: int, rounds: int,
            files: int, *, warm_up: bool, cpu: common.CpuMeter, guarantee: str
            ) -> dict[str, Any]:
    """Both contenders for one destination count, interleaved, a fresh broker per round."""
    topics = [f"t{i}" for i in range(destinations)]
    source = work / f"d{destinations}"
    write_parquet(prepared_rows(messages, destinations, "spark"), source, files)
    hand_rows = [tuple(r.values()) for r in prepared_rows(messages, destinations, "hand")
                 .to_pylist()]
    broker = iggy.RoundBrokers(("spark", "hand"), topics)

    def hand(number: int) -> common.Measure:
        address = broker.current.address
        with common.stopwatch() as elapsed:
            sent = hand_send(address, hand_rows)
        iggy.expect_messages(address, "hand", topics, messages)
        return common.Measure(sent, elapsed(), HAND_TIMED)

    def spark_run(number: int) -> common.Measure:
        current = broker.current
        measure = spark_write(spark, source, current.url, messages,
                              {"delivery_guarantee": guarantee})
        iggy.expect_messages(current.address, "spark", topics, messages)  # what items claims
        return measure

    contenders: dict[str, common.Contender] = {"handwritten": hand, "spark": spark_run}
    try:
        runs = common.paired_rounds(contenders, rounds, f"sink {destinations} destinations",
                             warm_up=warm_up, cpu=cpu, setup=broker.start)
    finally:
        broker.close()
    return {"destinations": destinations, **common.compared(runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--destinations", default="1,10,50,500")
    parser.add_argument("--files", type=int, default=os.cpu_count() or 2,
                        help="Parquet files, hence Spark write tasks (default: one per core)")
    parser.add_argument("--delivery-guarantee", default="effectively_once",
                        choices=("effectively_once", "at_least_once"),
                        help="the sink's option (the default, effectively_once, adds a header "
                             "per message the hand-written loop does not send); at_least_once "
                             "writes bench/results/sink_at_least_once.json")
    args = parser.parse_args(argv)
    guarantee = args.delivery_guarantee
    counts = [int(d) for d in args.destinations.split(",")]

    work = Path(tempfile.mkdtemp(prefix="bench-sink-"))
    try:
        spark = common.spark_session("bench-sink")
        cpu = common.CpuMeter(common.spark_groups(spark))
        results = [compare(spark, work, args.messages, d, args.rounds, args.files,
                           warm_up=number == 0, cpu=cpu, guarantee=guarantee)
                   for number, d in enumerate(counts)]
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    summary = f"sink, messages/s [{args.messages:,} messages]: " + "; ".join(
        f"{r['destinations']} dest: iggy_routed {r['spark']['per_second']:,}/s = "
        f"{r['ratio_vs_handwritten']['median']:.2f}x hand-written "
        f"({r['handwritten']['per_second']:,}/s)"
        for r in results
    )
    name = "sink" if guarantee == "effectively_once" else f"sink_{guarantee}"
    return common.publish(name, {
        "benchmark": "DataFrame -> iggy_routed vs hand-written SDK loop",
        "config": {"messages": args.messages, "rounds": args.rounds, "files": args.files,
                   "delivery_guarantee": guarantee,
                   "payload_fields": FIELDS, "schema": SCHEMA,
                   "broker": "LocalIggy(process=True), fresh per round",
                   # the Python workers inherit this process's IGGY_SPARK_CORE
                   "payload_join": compiled_core.path()},
        "results": {"by_destinations": results},
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
