"""``iggy`` source read speed against a hand-written single-process SDK poll loop.

    python -m bench.bench_iggy_source [--messages 200000] [--partitions 1,2] [--rounds 3]
                                      [--payload-bytes 200 | 50-350]
                                      [--url iggy://user:password@host:port]

For each partition count, one fresh broker (in its own process) holds one topic of
``--messages`` messages of 200-byte payloads (or of sizes drawn from ``--payload-bytes``, a
range: the source lays out batches of one size without walking them, so both are measured)
spread evenly over the partitions, read whole by
three contenders, interleaved round by round after a discarded warm-up round. With ``--url``
the topic lives on that server instead (a real Iggy server the reader runs; a stream of its
own per partition count, deleted afterwards): the local broker is Python, and its serving
speed, not the readers', can bound every contender.

* ``spark``: ``spark.readStream.format("iggy")`` into Spark's ``noop`` sink with
  ``trigger(availableNow=True)`` and a fresh checkpoint (reading changes nothing on the server,
  so every round reads the same messages). Timed from the first micro-batch's start to the last
  one's end (Spark's progress reports); JVM and query start-up are excluded.
* ``handwritten``: one asyncio client polling each partition by offset, 1,000 messages per poll
  (its best size: as fast as 10,000 against a real server, and much faster against the local
  broker), touching every message's payload.
* ``ceiling``: :mod:`bench.memory_source`, a Python streaming source yielding the same rows,
  schema, batch size and number of tasks from memory into the same sink, timed the same way:
  what pyspark's Python data source path alone allows, the most any Python source can reach.

Writes ``bench/results/iggy_source.json`` (``iggy_source_server.json`` with ``--url``;
``_varied`` added for a range of payload sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from apache_iggy import Consumer, Partitioning, PollingStrategy, SendMessage

from bench import common
from bench.handwritten import sdk_client
from bench.iggy import fresh_broker
from bench.memory_source import NAME, MemorySource
from iggy_spark.iggy_url import IggyUrl
from iggy_spark.sink import topic_request
from iggy_spark.sink.options import TopicDefaults
from iggy_spark.source.offsets import Position, split
from iggy_spark.source.options import SourceOptions

CEILING_TIMED = ("a Python source yielding the same rows from memory -> noop, timed as the "
                 "iggy source is")
SPARK_TIMED = ("iggy -> noop: first micro-batch start to last micro-batch end (Spark progress); "
               "JVM and query start-up excluded")
HAND_TIMED = "one asyncio client, each partition polled by offset 1,000 at a time, payloads read"
TOPIC = "events"
SEND = POLL = 1_000


def payload_sizes(spec: str) -> tuple[int, int]:
    """``--payload-bytes``: ``200`` (every payload that size) or ``50-350`` (sizes drawn
    evenly from that range, the same draw every run)."""
    low, _, high = spec.partition("-")
    return int(low), int(high or low)


def seed(address: str, stream: str, messages: int, partitions: int,
         sizes: tuple[int, int] = (200, 200)) -> None:
    """The topic, its messages spread evenly over its partitions (untimed)."""
    draw = random.Random(7)

    async def main() -> None:
        client = await sdk_client(address)
        await client.create_stream(stream)
        await topic_request.create_topic(client, stream, TOPIC, TopicDefaults(partitions))
        for partition in range(partitions):
            share = messages // partitions + (partition < messages % partitions)
            for low in range(0, share, SEND):
                await client.send_messages(
                    stream, TOPIC, Partitioning.partition_id(partition),
                    [SendMessage(b"x" * draw.randint(*sizes))
                     for _ in range(min(SEND, share - low))])

    asyncio.run(main())


def handwritten(address: str, stream: str, partitions: int) -> int:
    """Every message of the topic, polled partition by partition; how many."""

    async def main() -> int:
        client = await sdk_client(address)
        consumer = Consumer.Single("bench")
        count = 0
        for partition in range(partitions):
            offset = 0
            while batch := await client.poll_messages(
                    stream, TOPIC, consumer=consumer, polling_strategy=PollingStrategy.Offset(
                        offset), count=POLL, auto_commit=False, partition_id=partition):
                for message in batch:
                    message.payload()
                count += len(batch)
                offset = batch[-1].offset() + 1
        return count

    return asyncio.run(main())


def tasks(messages: int, partitions: int) -> int:
    """How many tasks the source plans for the seeded topic with its default split."""
    shares = {Position(TOPIC, p): messages // partitions + (p < messages % partitions)
              for p in range(partitions)}
    defaults = SourceOptions.from_options(
        {"url": "iggy://u:p@localhost", "stream": "s", "topics": TOPIC})
    return len(split({}, shares, defaults.max_messages_per_partition))


@contextmanager
def _server(url: str | None) -> Iterator[tuple[str, str]]:
    """``(address, url)`` of the server to read from: ``url``'s, or a fresh local broker's."""
    if url:
        yield IggyUrl.parse(url).server_address, url
        return
    broker = fresh_broker()
    try:
        yield broker.address, broker.url
    finally:
        broker.stop()


def drop(address: str, stream: str) -> None:
    """Delete a measurement's stream from a server that outlives the benchmark."""

    async def main() -> None:
        client = await sdk_client(address)
        await client.delete_stream(stream)

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--payload-bytes", default="200",
                        help="payload size, or a range like 50-350 to draw sizes from")
    parser.add_argument("--url", help="a running Iggy server to read from instead of a fresh "
                        "local broker (its user must create and delete streams)")
    args = parser.parse_args(argv)
    sizes = payload_sizes(args.payload_bytes)
    # Spark's Python workers import the memory source by name: they need the repository root
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    spark = common.spark_session("bench-iggy-source")
    spark.dataSource.register(MemorySource)
    by_partitions: dict[str, Any] = {}
    for partitions in (int(p) for p in args.partitions.split(",")):
        stream = f"bench-{partitions}-{secrets.token_hex(4)}"
        with _server(args.url) as (address, url):
            with common.stopwatch() as elapsed:
                seed(address, stream, args.messages, partitions, sizes)
            common.log(f"{partitions} partition(s): {args.messages:,} messages in "
                       f"{elapsed():.1f}s")

            def spark_run(_: int, url: str = url, stream: str = stream) -> common.Measure:
                return common.read_to_noop(
                    lambda: spark.readStream.format("iggy").option("url", url)
                    .option("stream", stream).option("topics", TOPIC).load(),
                    SPARK_TIMED, args.messages, "iggy")

            def hand(_: int, address: str = address, stream: str = stream,
                     count: int = partitions) -> common.Measure:
                with common.stopwatch() as elapsed:
                    read = handwritten(address, stream, count)
                if read != args.messages:
                    raise AssertionError(f"hand-written loop read {read}, not {args.messages}")
                return common.Measure(read, elapsed(), HAND_TIMED)

            def ceiling(_: int, count: int = tasks(args.messages, partitions)) -> common.Measure:
                return common.read_to_noop(
                    lambda: spark.readStream.format(NAME).option("messages", args.messages)
                    .option("tasks", count).option("payload_bytes", sum(sizes) // 2).load(),
                    CEILING_TIMED, args.messages, "the memory source")

            runs = common.paired_rounds({"handwritten": hand, "spark": spark_run,
                                         "ceiling": ceiling}, args.rounds,
                                        f"iggy source, {partitions} partition(s)", warm_up=True)
            if args.url:
                drop(address, stream)
        by_partitions[str(partitions)] = {
            **common.compared(runs, baselines=("handwritten", "ceiling")),
            "ceiling_vs_handwritten": common.ratio(runs["ceiling"], runs["handwritten"]),
        }
    spark.stop()
    summary = f"iggy source, messages/s [{args.messages:,} messages]: " + "; ".join(
        f"{p} partition(s) {r['spark']['per_second']:,}/s = "
        f"{r['ratio_vs_handwritten']['median']:.2f}x hand-written "
        f"({r['handwritten']['per_second']:,}/s), {r['ratio_vs_ceiling']['median']:.2f}x a "
        f"Python source reading from memory ({r['ceiling']['per_second']:,}/s = "
        f"{r['ceiling_vs_handwritten']['median']:.2f}x hand-written)"
        for p, r in by_partitions.items())
    name = "iggy_source" + ("_server" if args.url else "") + (
        "_varied" if sizes[0] != sizes[1] else "")
    return common.publish(name, {
        "benchmark": "iggy -> noop vs a hand-written single-process SDK poll loop, and the "
                     "ceiling of a Python source reading from memory",
        "config": {"messages": args.messages, "payload_bytes": args.payload_bytes,
                   "rounds": args.rounds, "partitions": args.partitions,
                   "server": "an Iggy server at --url" if args.url else
                   "the local broker, in its own process"},
        "results": by_partitions,
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
