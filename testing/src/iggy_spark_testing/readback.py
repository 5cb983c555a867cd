"""Read what arrived in Iggy, as any consumer would: over TCP with the SDK, by offset.

For the demo's verification, notebooks and the consistency oracle: every message of a topic,
partition by partition from offset 0, without consumer groups or stored offsets, so reading
changes nothing on the server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iggy_spark.iggy_url import IggyUrl

if TYPE_CHECKING:
    import apache_iggy

__all__ = [
    "Delivered",
    "apoll_partition",
    "aread_topic",
    "connect",
    "messages_in",
    "read_topic",
]

_POLL_BATCH = 1000


@dataclass(frozen=True)
class Delivered:
    """One message as a consumer sees it."""

    partition: int
    offset: int
    id: int
    payload: bytes
    headers: dict[Any, Any]


async def connect(url: str | IggyUrl) -> apache_iggy.IggyClient:
    """A connected client, logged in with the URL's credentials."""
    import apache_iggy

    parsed = url if isinstance(url, IggyUrl) else IggyUrl.parse(url)
    client = apache_iggy.IggyClient(parsed.to_tcp_config())
    await client.connect()
    return client


async def apoll_partition(
    client: apache_iggy.IggyClient, stream: str | int, topic: str | int, partition: int,
) -> list[apache_iggy.ReceiveMessage]:
    """Every message of one partition, polled by offset from 0 until a poll comes back empty."""
    import apache_iggy

    consumer = apache_iggy.Consumer.Single("iggy-spark-readback")
    polled: list[apache_iggy.ReceiveMessage] = []
    while True:
        messages = await client.poll_messages(
            stream, topic, consumer=consumer, count=_POLL_BATCH, auto_commit=False,
            polling_strategy=apache_iggy.PollingStrategy.Offset(
                polled[-1].offset() + 1 if polled else 0
            ),
            partition_id=partition,
        )
        if not messages:
            return polled
        polled.extend(messages)


async def aread_topic(
    client: apache_iggy.IggyClient, stream: str, topic: str
) -> list[Delivered]:
    """Every message of ``stream/topic``, partition by partition, in offset order."""
    details = await client.get_topic(stream, topic)
    if details is None:
        raise LookupError(f"topic {topic!r} not found in stream {stream!r}")
    delivered: list[Delivered] = []
    for partition in details.partitions:
        for m in await apoll_partition(client, stream, topic, partition.id):
            headers = m.user_headers()
            delivered.append(Delivered(
                partition.id, m.offset(), m.id(), m.payload(),
                headers.to_scalar_dict() if headers else {},
            ))
    return delivered


def read_topic(url: str | IggyUrl, stream: str, topic: str) -> list[Delivered]:
    """Synchronous :func:`aread_topic` on a fresh connection."""

    async def main() -> list[Delivered]:
        return await aread_topic(await connect(url), stream, topic)

    return asyncio.run(main())


def messages_in(url: str | IggyUrl, stream: str, topic: str) -> int:
    """How many messages ``stream/topic`` holds over all partitions (0 if it does not exist):
    the server's count, without reading them."""

    async def main() -> int:
        details = await (await connect(url)).get_topic(stream, topic)
        return 0 if details is None else sum(p.messages_count for p in details.partitions)

    return asyncio.run(main())
