"""Requests the local broker's wire tests make that the SDK has no call for, and shortcuts."""

from __future__ import annotations

import struct

from apache_iggy import (
    Consumer,
    IggyClient,
    PollingStrategy,
    ReceiveMessage,
)

from iggy_spark_testing.iggy_frames import (
    encode_identifier,
)
from support.broker_fixtures import (
    connect,
    create_topic,
)

__all__ = [
    "get_offset",
    "offset_request",
    "offsets_of",
    "poll_partition",
    "store_offset",
    "topic_client",
]


async def topic_client(address: str, stream: str, topic: str, partitions: int) -> IggyClient:
    client = await connect(address)
    await client.create_stream(stream)
    await create_topic(client, stream, topic, partitions)
    return client


async def poll_partition(
    client: IggyClient, stream: str, topic: str, strategy: PollingStrategy, count: int,
    *, consumer: Consumer | None = None, auto_commit: bool = False, partition: int = 0,
) -> list[ReceiveMessage]:
    return await client.poll_messages(
        stream, topic, consumer=consumer or Consumer.Single(1), polling_strategy=strategy,
        count=count, auto_commit=auto_commit, partition_id=partition,
    )


def offsets_of(messages: list[ReceiveMessage]) -> list[int]:
    return [message.offset() for message in messages]


def offset_request(consumer: int | str, stream: str, topic: str, partition: int) -> bytes:
    """Body of get_consumer_offset (120); store (121) appends ``[offset u64][ack u8]``."""
    return (
        b"\x01" + encode_identifier(consumer) + encode_identifier(stream)
        + encode_identifier(topic) + b"\x01" + struct.pack("<I", partition)
    )


async def store_offset(
    client: IggyClient, consumer: int | str, stream: str, topic: str, partition: int, offset: int
) -> bytes:
    body = offset_request(consumer, stream, topic, partition) + struct.pack("<QB", offset, 0)
    return await client.send_binary_request(121, body)


async def get_offset(
    client: IggyClient, consumer: int | str, stream: str, topic: str, partition: int
) -> tuple[int, int, int] | None:
    raw = await client.send_binary_request(120, offset_request(consumer, stream, topic, partition))
    return struct.unpack("<IQQ", raw) if raw else None
