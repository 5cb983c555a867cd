"""The local broker, driven by the real ``apache-iggy`` 0.9 SDK over TCP (and raw frames where
the SDK will not go). Every assertion is about what a client observes on the wire.

The tests that take the ``broker`` fixture hold of any Iggy server: with ``IGGY_URL`` set they
run against that server instead, which is how the local broker is checked against a real one.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from apache_iggy import (
    Consumer,
    HeaderKey,
    HeaderValue,
    IggyExpiry,
    MaxTopicSize,
    Partitioning,
    PollingStrategy,
    SendMessage,
)
from support.broker_fixtures import (
    Polled,
    apoll_all,
    connect,
    create_topic,
    run,
)
from support.local_broker import (
    get_offset,
    offsets_of,
    poll_partition,
    store_offset,
    topic_client,
)

from iggy_local import LocalIggy
from iggy_spark import sdk
from iggy_spark.sink import topic_request
from iggy_spark.sink.options import TopicDefaults

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]



# -- streams and topics -------------------------------------------------------------------------


def test_streams_and_topics_create_get_and_reject_duplicates(
    broker: LocalIggy, names: tuple[str, str]
) -> None:
    stream, topic = names

    async def main() -> None:
        client = await topic_client(broker.address, stream, topic, 3)
        details = await client.get_stream(stream)
        assert details is not None and details.name == stream and details.topics_count == 1
        assert [t.name for t in details.topics] == [topic]
        assert stream in [s.name for s in await client.get_streams()]
        with pytest.raises(RuntimeError, match="already exists"):
            await client.create_stream(stream)

        await create_topic(client, stream, "configured", 2)
        with pytest.raises(RuntimeError, match=r"Topic with name: .* already exists"):
            await create_topic(client, stream, topic, 1)
        with pytest.raises(RuntimeError, match=r"Stream with ID: .* was not found"):
            await create_topic(client, f"missing-{stream}", topic, 1)
        # A size cap below one segment (1 GiB unless the topic sets segment_size) refuses the
        # whole request.
        with pytest.raises(RuntimeError, match="Max topic size cannot be lower than segment"):
            await topic_request.create_topic(
                client, stream, "small", TopicDefaults(1, max_size=2**30 - 1))
        assert await client.get_topic(stream, "small") is None

        await client.create_partitions(stream, topic, 2)
        grown = await client.get_topic(stream, topic)
        assert grown is not None and [p.id for p in grown.partitions] == [0, 1, 2, 3, 4]
        assert sorted(t.name for t in await client.get_topics(stream)) == sorted(
            [topic, "configured"]
        )
        assert await client.get_stream(f"missing-{stream}") is None
        assert await client.get_topic(stream, "missing") is None
        assert await client.get_topics(f"missing-{stream}") == []

    run(main())


@pytest.mark.sdk_0_9
def test_the_wheels_create_topic_and_its_options_are_kept() -> None:
    """The 0.9.0 wheel's ``create_topic`` adds ``durability`` options that the 0.9.0-edge.5
    server refuses (the sink sends its own request); this broker takes them, and keeps the
    catalog options it is given. An option key outside the catalog refuses the request."""
    with LocalIggy() as broker:

        async def main() -> None:
            client = await connect(broker.address)
            await client.create_stream("s")
            with pytest.raises(RuntimeError, match="Unsupported option key"):
                await client.create_topic("s", "future", 1, options={"future_option": "x"})
            assert await client.get_topic("s", "future") is None
            await client.create_topic(
                "s", "configured", 2, compression_algorithm="gzip",
                message_expiry=IggyExpiry.NeverExpire(), segment_size=2**20,
                max_topic_size=MaxTopicSize.Custom(2**20),
            )
            configured = await client.get_topic("s", "configured")
            assert configured is not None
            assert (configured.partitions_count, configured.compression_algorithm) == (2, "gzip")
            assert configured.options.to_scalar_dict()["segment_size"] == 2**20

        run(main())


# -- round trips --------------------------------------------------------------------------------

HEADERS = {
    HeaderKey.String("raw"): HeaderValue.Raw(b"\x00\xff\x10bytes"),
    HeaderKey.String("string"): HeaderValue.String("zażółć gęślą jaźń"),
    HeaderKey.String("bool"): HeaderValue.Bool(True),
    HeaderKey.String("i8"): HeaderValue.Int8(-128),
    HeaderKey.String("i16"): HeaderValue.Int16(-32768),
    HeaderKey.String("i32"): HeaderValue.Int32(-(2**31)),
    HeaderKey.String("i64"): HeaderValue.Int64(-(2**63)),
    HeaderKey.String("i128"): HeaderValue.Int128(-(2**127)),
    HeaderKey.String("u8"): HeaderValue.UnsignedInt8(255),
    HeaderKey.String("u16"): HeaderValue.UnsignedInt16(2**16 - 1),
    HeaderKey.String("u32"): HeaderValue.UnsignedInt32(2**32 - 1),
    HeaderKey.String("u64"): HeaderValue.UnsignedInt64(2**64 - 1),
    HeaderKey.String("u128"): HeaderValue.UnsignedInt128(2**128 - 1),
    HeaderKey.String("f32"): HeaderValue.Float32(1.5),
    HeaderKey.String("f64"): HeaderValue.Float64(-2.000001),
    HeaderKey.Int32(-7): HeaderValue.String("typed key"),
    HeaderKey.Raw(b"\x01k"): HeaderValue.Bool(False),
}
ROUND_TRIP_MESSAGES = 10_000
PARTITIONINGS = {
    "balanced": Partitioning.balanced(),
    "messages_key": Partitioning.messages_key("user-42"),
    "partition_id": Partitioning.partition_id(3),
}


@pytest.mark.parametrize("kind", sorted(PARTITIONINGS))
def test_messages_round_trip_byte_exact(
    broker: LocalIggy, names: tuple[str, str], kind: str
) -> None:
    stream, topic = names
    rng = random.Random(kind)
    sent = [
        (
            2**127 + rng.getrandbits(100),
            rng.randbytes(rng.randint(1, 300)),
            {**HEADERS, HeaderKey.String("seq"): HeaderValue.UnsignedInt32(index)},
        )
        for index in range(ROUND_TRIP_MESSAGES)
    ]

    async def main() -> list[Polled]:
        client = await topic_client(broker.address, stream, topic, 4)
        for start in range(0, ROUND_TRIP_MESSAGES, 1000):
            batch = [SendMessage(p, h, id=i) for i, p, h in sent[start:start + 1000]]
            await client.send_messages(stream, topic, PARTITIONINGS[kind], batch)
        return await apoll_all(client, stream, topic)

    polled = run(main())
    # The SDK routes each 1000-message batch: round robin from partition 0, XXH32("user-42") % 4
    # = 2, or the partition asked for. Within a partition offsets follow send order.
    routes = {
        "balanced": [index % 4 for index in range(10)],
        "messages_key": [2] * 10,
        "partition_id": [3] * 10,
    }[kind]
    expected = [
        (partition, message)
        for partition in range(4)
        for batch, route in enumerate(routes) if route == partition
        for message in sent[batch * 1000:(batch + 1) * 1000]
    ]
    assert len(polled) == ROUND_TRIP_MESSAGES
    assert [(p.partition, p.id, p.payload) for p in polled] == [
        (partition, message_id, payload) for partition, (message_id, payload, _) in expected
    ]
    for message, (_, (_, _, headers)) in zip(polled, expected, strict=True):
        assert message.user_headers == headers
    by_partition: dict[int, list[int]] = {}
    for message in polled:
        by_partition.setdefault(message.partition, []).append(message.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())


def test_scalar_headers_and_generated_ids(broker: LocalIggy, names: tuple[str, str]) -> None:
    stream, topic = names

    async def main() -> list[Polled]:
        client = await topic_client(broker.address, stream, topic, 1)
        messages = [SendMessage("text payload", {"k": "v", "n": 5}), SendMessage(b"\x00")]
        await client.send_messages(stream, topic, 0, messages)
        return await apoll_all(client, stream, topic)

    first, second = run(main())
    assert first.headers == {"k": "v", "n": 5} and first.payload == b"text payload"
    assert second.user_headers == {} and second.payload == b"\x00"
    assert first.id != 0 and second.id != 0 and first.id != second.id


# -- polling and offsets ------------------------------------------------------------------------


def test_every_polling_strategy(broker: LocalIggy, names: tuple[str, str]) -> None:
    stream, topic = names

    async def main() -> None:
        client = await topic_client(broker.address, stream, topic, 1)
        for batch in range(3):  # offsets 0-4, 5-9, 10-14, appended at distinct times
            messages = [SendMessage(f"{batch}-{i}".encode()) for i in range(5)]
            await client.send_messages(stream, topic, 0, messages)
            await asyncio.sleep(0.005)

        async def offsets(strategy: PollingStrategy, count: int) -> list[int]:
            return offsets_of(await poll_partition(client, stream, topic, strategy, count))

        assert await offsets(PollingStrategy.Offset(3), 6) == [3, 4, 5, 6, 7, 8]
        assert await offsets(PollingStrategy.Offset(14), 10) == [14]
        assert await offsets(PollingStrategy.Offset(15), 10) == []
        assert await offsets(PollingStrategy.First(), 4) == [0, 1, 2, 3]
        assert await offsets(PollingStrategy.Last(), 4) == [11, 12, 13, 14]
        assert await offsets(PollingStrategy.Last(), 100) == list(range(15))

        second = (await poll_partition(client, stream, topic, PollingStrategy.Offset(5), 1))[0]
        assert second.payload() == b"1-0"
        at_second = await offsets(PollingStrategy.Timestamp(second.timestamp()), 100)
        assert at_second == list(range(5, 15))
        after_second = await offsets(PollingStrategy.Timestamp(second.timestamp() + 1), 100)
        assert after_second == list(range(10, 15))
        assert await offsets(PollingStrategy.Timestamp(2**63), 10) == []

        reader = Consumer.Single("next-reader")
        for expected in ([0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13, 14], []):
            polled = await poll_partition(
                client, stream, topic, PollingStrategy.Next(), 6, consumer=reader,
                auto_commit=True,
            )
            assert offsets_of(polled) == expected
        for _ in range(2):  # without auto_commit Next does not move
            polled = await poll_partition(
                client, stream, topic, PollingStrategy.Next(), 3, consumer=Consumer.Single(77)
            )
            assert offsets_of(polled) == [0, 1, 2]

    run(main())


def test_consumer_offsets_store_get_and_next(broker: LocalIggy, names: tuple[str, str]) -> None:
    stream, topic = names

    async def main() -> None:
        client = await topic_client(broker.address, stream, topic, 2)
        await client.send_messages(stream, topic, 1, [SendMessage(str(i)) for i in range(20)])

        assert await get_offset(client, 9, stream, topic, 1) is None
        assert await store_offset(client, 9, stream, topic, 1, 3) == b""
        assert await get_offset(client, 9, stream, topic, 1) == (1, 19, 3)
        polled = await poll_partition(
            client, stream, topic, PollingStrategy.Next(), 2, consumer=Consumer.Single(9),
            partition=1,
        )
        assert offsets_of(polled) == [4, 5]

        await store_offset(client, "alpha", stream, topic, 1, 17)
        assert await get_offset(client, "alpha", stream, topic, 1) == (1, 19, 17)
        assert await get_offset(client, "alpha", stream, topic, 0) is None
        polled = await poll_partition(
            client, stream, topic, PollingStrategy.Next(), 10, consumer=Consumer.Single("alpha"),
            partition=1,
        )
        assert offsets_of(polled) == [18, 19]

        with pytest.raises(RuntimeError, match="not found"):
            await store_offset(client, 9, stream, topic, 5, 0)
        if sdk.installed()[1] is sdk.SDK_0_9:  # an unknown topic's offset is none
            assert await get_offset(client, 9, stream, "missing", 0) is None
        else:  # the 0.10 SDK first asks for the partition's route, which the server refuses
            with pytest.raises(RuntimeError, match="not found"):
                await get_offset(client, 9, stream, "missing", 0)

    run(main())
