"""How fast the local broker ingests what the ``apache-iggy`` SDK sends, and where time goes.

    python -m bench.bench_broker [--batches 200] [--batch-size 1000] [--payload-bytes 200]

Writes ``bench/results/broker.json`` and prints one summary line. Measured separately:

* ``sdk_build``: building the ``SendMessage`` objects in Python; SDK-side cost, no I/O.
* ``ingest``: one SDK client sending the pre-built batches, one at a time, to a broker running
  in its own process (as in the pipeline): acknowledged messages per second. The headline.
* ``ingest_4_clients``: four SDK clients sending concurrently, same total.
* ``ingest_durable``: ``ingest`` with a data directory, so every batch is fsynced before its ack.
* ``broker_handling``: the broker's request handling alone (decode, verify every XXH3, stamp,
  store, reply), in-process on equivalent frames: no SDK, no socket. The broker's ceiling.

There is no real Iggy server on this machine to compare with, so the comparison offered is
cost per message: SDK build + SDK send path + broker handling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from apache_iggy import IggyClient, SendMessage

from bench.common import machine, results_dir
from iggy_local import LocalIggy
from iggy_local.codes import HEADER_SIZE, Operation
from iggy_local.frames import decode_request_header
from iggy_local.server import BrokerServer, Connection
from iggy_local.storage import Store
from iggy_spark.sink import topic_request
from iggy_spark.sink.options import TopicDefaults
from iggy_spark_testing.iggy_frames import (
    encode_batch,
    encode_request_header,
    encode_send_messages,
)

STREAM, TOPIC = "bench", "ingest"
RUNS = 3


def build_batches(batches: int, batch_size: int, payload: bytes) -> list[list[SendMessage]]:
    return [[SendMessage(payload) for _ in range(batch_size)] for _ in range(batches)]


async def send_all(address: str, per_client: list[list[list[SendMessage]]]) -> float:
    """Send every client's batches concurrently (clients in parallel, batches in order)."""
    clients = []
    for _ in per_client:
        client = IggyClient(address)
        await client.connect()
        await client.login_user("iggy", "iggy")
        clients.append(client)
    if await clients[0].get_topic(STREAM, TOPIC) is None:
        await clients[0].create_stream(STREAM)
        await topic_request.create_topic(clients[0], STREAM, TOPIC, TopicDefaults(len(per_client)))

    async def one(client: IggyClient, partition: int, batches: list[list[SendMessage]]) -> None:
        for batch in batches:
            await client.send_messages(STREAM, TOPIC, partition, batch)

    started = time.perf_counter()
    await asyncio.gather(
        *(one(c, p, b) for p, (c, b) in enumerate(zip(clients, per_client, strict=True)))
    )
    return time.perf_counter() - started


def ingest(
    batches: list[list[SendMessage]], clients: int, data_dir: str | None
) -> dict[str, Any]:
    """Median of RUNS fresh brokers (child processes) ingesting ``batches``."""
    messages = sum(map(len, batches))
    seconds = []
    for run in range(RUNS):
        directory = None if data_dir is None else os.path.join(data_dir, f"run{run}")
        with LocalIggy(process=True, data_dir=directory) as broker:
            share = [batches[i::clients] for i in range(clients)]
            seconds.append(asyncio.run(send_all(broker.address, share)))
    median = statistics.median(seconds)
    return {
        "clients": clients,
        "messages": messages,
        "runs_seconds": [round(s, 4) for s in seconds],
        "messages_per_second": round(messages / median),
    }


def broker_handling(batches: int, batch_size: int, payload: bytes) -> dict[str, Any]:
    """Time ``BrokerServer.handle`` on send frames shaped like the SDK's, no socket involved."""
    server = BrokerServer(Store())
    server.store.create_topic(server.store.create_stream(STREAM, b"").id, TOPIC, 1, b"")
    conn = Connection("bench", session=1)
    batch = encode_batch([payload] * batch_size, origin_timestamp=time.time_ns() // 1000)
    body = encode_send_messages(STREAM, TOPIC, b"\x02\x04\x00\x00\x00\x00", batch)
    frame = encode_request_header(
        body_size=len(body), client=1, operation=Operation.SEND_MESSAGES, session=1, request=1
    ) + body
    seconds = []
    for _ in range(RUNS):
        started = time.perf_counter()
        for _ in range(batches):
            header = decode_request_header(frame[:HEADER_SIZE])
            reply = server.handle(conn, header, frame[HEADER_SIZE:])
            assert int.from_bytes(reply[0][216:220], "little") == 0, "broker rejected the batch"
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    return {
        "messages": batches * batch_size,
        "runs_seconds": [round(s, 4) for s in seconds],
        "messages_per_second": round(batches * batch_size / median),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--payload-bytes", type=int, default=200)
    args = parser.parse_args(argv)
    payload = os.urandom(args.payload_bytes)
    messages = args.batches * args.batch_size

    started = time.perf_counter()
    batches = build_batches(args.batches, args.batch_size, payload)
    build_seconds = time.perf_counter() - started

    results: dict[str, Any] = {
        "sdk_build": {
            "messages": messages,
            "seconds": round(build_seconds, 4),
            "messages_per_second": round(messages / build_seconds),
        },
        "ingest": ingest(batches, 1, None),
        "ingest_4_clients": ingest(batches, 4, None),
    }
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as data_dir:
        results["ingest_durable"] = ingest(batches, 1, data_dir)
    results["broker_handling"] = broker_handling(args.batches, args.batch_size, payload)
    for entry in results.values():
        entry["microseconds_per_message"] = round(1e6 / entry["messages_per_second"], 3)

    summary = (
        f"broker ingest: {results['ingest']['messages_per_second']:,} msg/s from one SDK client "
        f"({results['ingest_4_clients']['messages_per_second']:,} with 4 clients, "
        f"{results['ingest_durable']['messages_per_second']:,} fsynced); broker handling alone "
        f"{results['broker_handling']['messages_per_second']:,} msg/s; SDK SendMessage build "
        f"{results['sdk_build']['messages_per_second']:,} msg/s "
        f"[{args.batch_size}-message batches of {args.payload_bytes} B, {os.cpu_count()} cores]"
    )
    report = {
        "benchmark": "local broker ingest from the apache-iggy SDK",
        "machine": machine(),
        "config": {
            "batches": args.batches, "batch_size": args.batch_size,
            "payload_bytes": args.payload_bytes, "runs_per_measure": RUNS,
            "broker_mode": "child process (LocalIggy(process=True))",
        },
        "results": results,
        "summary": summary,
    }
    results_dir().mkdir(parents=True, exist_ok=True)
    (results_dir() / "broker.json").write_text(json.dumps(report, indent=2) + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
