"""The local broker across restarts: its journal keeps every acknowledged write and every
deletion; its command line and its Python surface."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from apache_iggy import (
    Consumer,
    IggyClient,
    Partitioning,
    PollingStrategy,
    SendMessage,
    TopicDetails,
)
from support.broker_fixtures import (
    Polled,
    apoll_all,
    connect,
    create_topic,
    poll_all,
    run,
)
from support.local_broker import (
    get_offset,
    poll_partition,
    store_offset,
    topic_client,
)

from iggy_local import LocalIggy
from iggy_local.journal import FILE_NAME

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]

_ROOT = Path(__file__).resolve().parents[2]
SOURCES = os.pathsep.join(str(_ROOT / where) for where in ("src", "testing/src"))
"""This checkout's packages, the broker's among them, for a child process."""


# -- persistence and the process launcher -------------------------------------------------------


def test_restart_with_data_dir_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    stream, topic = "durable", "events"
    broker = LocalIggy(data_dir=tmp_path, process=True)
    with broker:
        port = broker.port

        async def before() -> tuple[list[Polled], IggyClient]:
            client = IggyClient.from_connection_string(broker.url)  # auto-login on reconnect
            await client.connect()
            await client.create_stream(stream)
            await create_topic(client, stream, topic, 3)
            await client.create_partitions(stream, topic, 1)
            for partition in range(4):
                messages = [
                    SendMessage(f"p{partition}-{i}", {"i": i}, id=partition * 100 + i + 1)
                    for i in range(partition + 2)
                ]
                await client.send_messages(stream, topic, partition, messages)
            await store_offset(client, "reader", stream, topic, 3, 2)
            await poll_partition(
                client, stream, topic, PollingStrategy.Next(), 2, consumer=Consumer.Single(5),
                auto_commit=True, partition=1,
            )
            return await apoll_all(client, stream, topic), client

        polled_before, survivor = run(before())
        broker.kill()
        assert not broker.running
        with (tmp_path / FILE_NAME).open("ab") as journal:
            journal.write(struct.pack("<IBQ", 64, 4, 0) + b"torn")  # a write the crash cut short

        broker.start()
        assert broker.port == port

        async def after() -> None:
            client = await connect(broker.address)
            details = await client.get_topic(stream, topic)
            assert details is not None and details.partitions_count == 4
            assert details.messages_count == len(polled_before) == 14
            assert await apoll_all(client, stream, topic) == polled_before
            assert await get_offset(client, "reader", stream, topic, 3) == (3, 4, 2)
            assert await get_offset(client, 5, stream, topic, 1) == (1, 2, 1)
            response = await client.send_messages(stream, topic, 0, [SendMessage(b"more")])
            assert [(c.partition_id, c.base_offset) for c in response.confirmations] == [(0, 2)]

            # The client from before the crash re-dials and logs in again by itself; its first
            # call after the outage may fail with Disconnected, as against a real server.
            deadline = time.monotonic() + 20
            while True:
                try:
                    await survivor.send_messages(stream, topic, 0, [SendMessage(b"again")])
                    break
                except RuntimeError:
                    if time.monotonic() > deadline:
                        raise

        run(after())
        broker.stop()
        broker.start()
        payloads = [m.payload for m in poll_all(broker.address, stream, topic, 0)]
        # Delivery is at-least-once: a send cut off by the crash may also have landed.
        assert payloads[:3] == [b"p0-0", b"p0-1", b"more"] and set(payloads[3:]) == {b"again"}


def test_cli_logs_its_address_and_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [SOURCES, os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-m", "iggy_local", "--port", "0", "--data-dir", str(tmp_path)],
        env=env, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stderr is not None
        line = child.stderr.readline()
        assert "listening on 127.0.0.1:" in line
        port = int(line.rsplit(":", 1)[1])

        async def streams() -> list[str]:
            client = await connect(f"127.0.0.1:{port}")
            return [stream.name for stream in await client.get_streams()]

        assert run(streams()) == []
        child.send_signal(signal.SIGTERM)
        assert child.wait(10) == 0
    finally:
        child.kill()
        child.wait()


def test_local_iggy_surface(tmp_path: Path) -> None:
    broker = LocalIggy(password="p@ss word", data_dir=tmp_path)
    assert not broker.running and "p@ss" not in repr(broker)
    with broker:
        assert broker.start() is broker
        port = broker.port
        assert port > 0 and broker.address == f"127.0.0.1:{port}"
        assert broker.url == f"iggy://iggy:p%40ss%20word@127.0.0.1:{port}"
        assert "p@ss" not in repr(broker) and "running=True" in repr(broker)
        run(connect(broker.address, password="p@ss word"))
    assert not broker.running
    broker.start()
    assert broker.port == port
    broker.kill()
    assert not broker.running
    broker.stop()




def test_a_deleted_topic_is_gone_with_its_messages_and_stays_gone_after_a_restart(
    tmp_path: Path
) -> None:
    """``delete_topic`` as an operator runs it: the topic, its partitions and messages go, the
    name can be taken again (empty), and the journal replays the deletion."""
    broker = LocalIggy(data_dir=tmp_path, process=True)
    with broker:

        async def main() -> None:
            client = await topic_client(broker.address, "s", "t", 2)
            await client.send_messages("s", "t", Partitioning.partition_id(0),
                                       [SendMessage(b"old")])
            await client.delete_topic("s", "t")
            assert await client.get_topic("s", "t") is None
            with pytest.raises(RuntimeError, match=r"Topic with name: .* was not found"):
                await client.delete_topic("s", "t")
            await create_topic(client, "s", "t", 1)

        async def details() -> TopicDetails | None:
            return await (await connect(broker.address)).get_topic("s", "t")

        run(main())
        broker.kill()
        broker.start()
        again = run(details())
        assert again is not None and again.messages_count == 0 and again.partitions_count == 1


def test_a_deleted_consumer_offset_is_gone_and_stays_gone_after_a_restart(
    tmp_path: Path
) -> None:
    """Delete-consumer-offset (sent raw: the SDK has no call for it) drops what a consumer
    stored, refuses a second delete as the server does, and the journal replays it."""
    from iggy_spark.source import wire

    broker = LocalIggy(data_dir=tmp_path, process=True)
    target = ("monitor", "s", "t", 0)
    with broker:

        async def stored() -> bytes:
            client = await connect(broker.address)
            return bytes(await client.send_binary_request(wire.GET_CONSUMER_OFFSET,
                                                          wire.offset_request(*target)))

        async def main() -> None:
            client = await topic_client(broker.address, "s", "t", 1)
            await client.send_messages("s", "t", Partitioning.partition_id(0),
                                       [SendMessage(b"a"), SendMessage(b"b")])
            await client.poll_messages("s", "t", consumer=Consumer.Single("monitor"),
                                       polling_strategy=PollingStrategy.Offset(1), count=1,
                                       auto_commit=True, partition_id=0)
            assert await stored()
            await client.send_binary_request(wire.DELETE_CONSUMER_OFFSET,
                                             wire.delete_offset_request(*target))
            assert not await stored()
            with pytest.raises(RuntimeError,
                               match=r"Consumer offset for consumer with ID: .* was not found"):
                await client.send_binary_request(wire.DELETE_CONSUMER_OFFSET,
                                                 wire.delete_offset_request(*target))

        run(main())
        broker.kill()
        broker.start()
        assert not run(stored())
