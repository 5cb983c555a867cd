"""Seeding topics for the ``iggy`` source's tests: messages with known payloads, ids and headers
sent over the real SDK to the local broker."""

from __future__ import annotations

from collections.abc import Sequence

import apache_iggy

from support.broker_fixtures import connect, create_topic, run


def payload(topic: str, partition: int, index: int) -> bytes:
    """The payload of the ``index``-th message seeded into ``topic``/``partition``."""
    return f"{topic}/{partition}/{index}".encode()


def message_id(partition: int, index: int) -> int:
    """The id of a seeded message: beyond 64 bits, so the u128 column is exercised."""
    return (1 << 100) + (partition << 32) + index + 1


def seed(
    address: str, stream: str, topics: Sequence[str], *, partitions: int, per_partition: int,
    create: bool = True, first: int = 0,
) -> None:
    """Send ``per_partition`` messages to every partition of ``topics`` (created, with the
    stream, when ``create``), payloads by :func:`payload` numbered from ``first``, each with a
    header ``n`` (its number) and ``k`` (a string)."""

    async def main() -> None:
        client = await connect(address)
        if create:
            if await client.get_stream(stream) is None:
                await client.create_stream(stream)
            for topic in topics:
                await create_topic(client, stream, topic, partitions)
        for topic in topics:
            for partition in range(partitions):
                messages = []
                for index in range(first, first + per_partition):
                    messages.append(apache_iggy.SendMessage(
                        payload(topic, partition, index), {"n": index, "k": "v"},
                        message_id(partition, index)))
                for low in range(0, len(messages), 1000):
                    await client.send_messages(
                        stream, topic, apache_iggy.Partitioning.partition_id(partition),
                        messages[low:low + 1000])

    run(main())


def reported_next(address: str, stream: str, topic: str, partition: int, name: str) -> int | None:
    """The offset consumer ``name`` would read next (one past the offset stored for it), as the
    server says by polling with the ``Next`` strategy; ``None`` when nothing is there."""

    async def main() -> int | None:
        client = await connect(address)
        messages = await client.poll_messages(
            stream, topic, consumer=apache_iggy.Consumer.Single(name),
            polling_strategy=apache_iggy.PollingStrategy.Next(), count=1, auto_commit=False,
            partition_id=partition)
        return int(messages[0].offset()) if messages else None

    return run(main())
