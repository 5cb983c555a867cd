"""The local broker, driven by the real ``apache-iggy`` 0.9 SDK over TCP (and raw frames where
the SDK will not go). Every assertion is about what a client observes on the wire.

The tests that take the ``broker`` fixture hold of any Iggy server: with ``IGGY_URL`` set they
run against that server instead, which is how the local broker is checked against a real one.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from apache_iggy import (
    Consumer,
    HeaderKey,
    HeaderValue,
    IggyClient,
    IggyExpiry,
    MaxTopicSize,
    Partitioning,
    PollingStrategy,
    ReceiveMessage,
    SendMessage,
    TopicDetails,
)
from support.broker_fixtures import (
    Polled,
    RawClient,
    apoll_all,
    connect,
    create_topic,
    poll_all,
    run,
)

from iggy_local import LocalIggy
from iggy_local.batches import batch_message_count, slice_batch, stamp_batch, verify_batch
from iggy_local.codes import BrokerError, ErrorCode, FrameError, Operation, ReadCode
from iggy_local.frames import decode_request_header
from iggy_local.journal import FILE_NAME
from iggy_local.requests import parse_options
from iggy_spark.sink import topic_request
from iggy_spark.sink.options import TopicDefaults
from iggy_spark.sink.partitioning import partition_for_key
from iggy_spark_testing.brokers import ExternalIggy, iggy_server
from iggy_spark_testing.iggy_frames import (
    encode_batch,
    encode_identifier,
    encode_login,
    encode_request_header,
    encode_send_messages,
)

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalIggy | ExternalIggy]:
    with iggy_server() as started:
        yield started


@pytest.fixture
def names() -> tuple[str, str]:
    """A fresh stream and topic name per test, so tests share one broker safely."""
    suffix = uuid.uuid4().hex[:8]
    return f"stream-{suffix}", f"topic-{suffix}"


async def _topic(address: str, stream: str, topic: str, partitions: int) -> IggyClient:
    client = await connect(address)
    await client.create_stream(stream)
    await create_topic(client, stream, topic, partitions)
    return client


async def _poll(
    client: IggyClient, stream: str, topic: str, strategy: PollingStrategy, count: int,
    *, consumer: Consumer | None = None, auto_commit: bool = False, partition: int = 0,
) -> list[ReceiveMessage]:
    return await client.poll_messages(
        stream, topic, consumer=consumer or Consumer.Single(1), polling_strategy=strategy,
        count=count, auto_commit=auto_commit, partition_id=partition,
    )


def _offsets(messages: list[ReceiveMessage]) -> list[int]:
    return [message.offset() for message in messages]


def _offset_request(consumer: int | str, stream: str, topic: str, partition: int) -> bytes:
    """Body of get_consumer_offset (120); store (121) appends ``[offset u64][ack u8]``."""
    return (
        b"\x01" + encode_identifier(consumer) + encode_identifier(stream)
        + encode_identifier(topic) + b"\x01" + struct.pack("<I", partition)
    )


async def _store_offset(
    client: IggyClient, consumer: int | str, stream: str, topic: str, partition: int, offset: int
) -> bytes:
    body = _offset_request(consumer, stream, topic, partition) + struct.pack("<QB", offset, 0)
    return await client.send_binary_request(121, body)


async def _get_offset(
    client: IggyClient, consumer: int | str, stream: str, topic: str, partition: int
) -> tuple[int, int, int] | None:
    raw = await client.send_binary_request(120, _offset_request(consumer, stream, topic, partition))
    return struct.unpack("<IQQ", raw) if raw else None


# -- streams and topics -------------------------------------------------------------------------


def test_streams_and_topics_create_get_and_reject_duplicates(
    broker: LocalIggy, names: tuple[str, str]
) -> None:
    stream, topic = names

    async def main() -> None:
        client = await _topic(broker.address, stream, topic, 3)
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
        # An option key outside the server's catalog refuses the whole request.
        with pytest.raises(RuntimeError, match="Unsupported option key"):
            await client.create_topic(stream, "future", 1, options={"future_option": "x"})
        # So does a size cap below one segment (1 GiB unless the topic sets segment_size).
        with pytest.raises(RuntimeError, match="Max topic size cannot be lower than segment"):
            await topic_request.create_topic(
                client, stream, "small", TopicDefaults(1, max_size=2**30 - 1))
        assert await client.get_topic(stream, "future") is None
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


def test_the_wheels_create_topic_and_its_options_are_kept() -> None:
    """The 0.9.0 wheel's ``create_topic`` adds ``durability`` options that the 0.9.0-edge.5
    server refuses (the sink sends its own request); this broker takes them, and keeps the
    catalog options it is given."""
    with LocalIggy() as broker:

        async def main() -> None:
            client = await connect(broker.address)
            await client.create_stream("s")
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
        client = await _topic(broker.address, stream, topic, 4)
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
        client = await _topic(broker.address, stream, topic, 1)
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
        client = await _topic(broker.address, stream, topic, 1)
        for batch in range(3):  # offsets 0-4, 5-9, 10-14, appended at distinct times
            messages = [SendMessage(f"{batch}-{i}".encode()) for i in range(5)]
            await client.send_messages(stream, topic, 0, messages)
            await asyncio.sleep(0.005)

        async def offsets(strategy: PollingStrategy, count: int) -> list[int]:
            return _offsets(await _poll(client, stream, topic, strategy, count))

        assert await offsets(PollingStrategy.Offset(3), 6) == [3, 4, 5, 6, 7, 8]
        assert await offsets(PollingStrategy.Offset(14), 10) == [14]
        assert await offsets(PollingStrategy.Offset(15), 10) == []
        assert await offsets(PollingStrategy.First(), 4) == [0, 1, 2, 3]
        assert await offsets(PollingStrategy.Last(), 4) == [11, 12, 13, 14]
        assert await offsets(PollingStrategy.Last(), 100) == list(range(15))

        second = (await _poll(client, stream, topic, PollingStrategy.Offset(5), 1))[0]
        assert second.payload() == b"1-0"
        at_second = await offsets(PollingStrategy.Timestamp(second.timestamp()), 100)
        assert at_second == list(range(5, 15))
        after_second = await offsets(PollingStrategy.Timestamp(second.timestamp() + 1), 100)
        assert after_second == list(range(10, 15))
        assert await offsets(PollingStrategy.Timestamp(2**63), 10) == []

        reader = Consumer.Single("next-reader")
        for expected in ([0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13, 14], []):
            polled = await _poll(
                client, stream, topic, PollingStrategy.Next(), 6, consumer=reader,
                auto_commit=True,
            )
            assert _offsets(polled) == expected
        for _ in range(2):  # without auto_commit Next does not move
            polled = await _poll(
                client, stream, topic, PollingStrategy.Next(), 3, consumer=Consumer.Single(77)
            )
            assert _offsets(polled) == [0, 1, 2]

    run(main())


def test_consumer_offsets_store_get_and_next(broker: LocalIggy, names: tuple[str, str]) -> None:
    stream, topic = names

    async def main() -> None:
        client = await _topic(broker.address, stream, topic, 2)
        await client.send_messages(stream, topic, 1, [SendMessage(str(i)) for i in range(20)])

        assert await _get_offset(client, 9, stream, topic, 1) is None
        assert await _store_offset(client, 9, stream, topic, 1, 3) == b""
        assert await _get_offset(client, 9, stream, topic, 1) == (1, 19, 3)
        polled = await _poll(
            client, stream, topic, PollingStrategy.Next(), 2, consumer=Consumer.Single(9),
            partition=1,
        )
        assert _offsets(polled) == [4, 5]

        await _store_offset(client, "alpha", stream, topic, 1, 17)
        assert await _get_offset(client, "alpha", stream, topic, 1) == (1, 19, 17)
        assert await _get_offset(client, "alpha", stream, topic, 0) is None
        polled = await _poll(
            client, stream, topic, PollingStrategy.Next(), 10, consumer=Consumer.Single("alpha"),
            partition=1,
        )
        assert _offsets(polled) == [18, 19]

        with pytest.raises(RuntimeError, match="not found"):
            await _store_offset(client, 9, stream, topic, 5, 0)
        assert await _get_offset(client, 9, stream, "missing", 0) is None

    run(main())


# -- authentication -----------------------------------------------------------------------------


def test_wrong_credentials_are_rejected() -> None:
    with LocalIggy(username="alice", password="s3cret") as custom:
        assert "s3cret" not in repr(custom)

        async def main() -> None:
            client = IggyClient(custom.address)
            await client.connect()
            with pytest.raises(RuntimeError, match="Invalid credentials"):
                await client.login_user("alice", "wrong")
            with pytest.raises(RuntimeError, match="Invalid credentials"):
                await client.login_user("iggy", "iggy")
            with pytest.raises(RuntimeError, match="Unauthenticated"):
                await client.get_streams()
            await client.login_user("alice", "s3cret")
            assert await client.get_streams() == []
            with_url = IggyClient.from_connection_string(custom.url)
            await with_url.connect()
            assert await with_url.get_streams() == []

        run(main())


def test_login_required_for_everything_but_ping(broker: LocalIggy) -> None:
    async def main() -> None:
        client = IggyClient(broker.address)
        await client.connect()
        await client.ping()
        with pytest.raises(RuntimeError, match="Unauthenticated"):
            await client.get_streams()
        await client.login_user("iggy", "iggy")
        await client.get_streams()
        await client.logout_user()
        with pytest.raises(RuntimeError, match="Unauthenticated"):
            await client.get_streams()

    run(main())

    raw = RawClient(broker.address)
    try:
        assert raw.call(Operation.NON_REPLICATED, code=ReadCode.PING).status == 0
        denied = raw.call(Operation.NON_REPLICATED, code=ReadCode.GET_STREAMS)
        assert (denied.command, denied.status, denied.body) == (8, ErrorCode.UNAUTHENTICATED, b"")
        raw.session = 12345  # a session this connection never got: a stale client
        evicted = raw.call(Operation.CREATE_STREAM, b"\x01x")
        assert evicted.command == 13  # eviction frame, reason NoSession
    finally:
        raw.close()
    raw = RawClient(broker.address)
    try:
        assert raw.login("iggy", "nope").command == 13
    finally:
        raw.close()
    raw = RawClient(broker.address)
    try:
        assert raw.login().status == 0
        assert raw.call(Operation.NON_REPLICATED, code=ReadCode.GET_STREAMS).status == 0
    finally:
        raw.close()


def test_a_header_the_server_refuses_is_dropped_and_the_connection_kept(broker: LocalIggy) -> None:
    """The server's header field rules: what breaks them gets no reply at all, so the next
    request's reply is the next frame on the connection."""
    raw = RawClient(broker.address)
    try:
        raw.call_unanswered(Operation.CREATE_STREAM, b"\x01x")  # replicated, session 0
        raw.call_unanswered(200, b"")  # not a client operation
        raw.call_unanswered(Operation.REGISTER, encode_login("iggy", "iggy"), request=1)
        assert raw.login().status == 0
        raw.call_unanswered(Operation.CREATE_STREAM, b"\x01x", request=0)
        raw.call_unanswered(Operation.REGISTER, encode_login("iggy", "iggy"))  # session set
        assert raw.call(Operation.NON_REPLICATED, code=ReadCode.GET_STREAMS).status == 0
    finally:
        raw.close()


# -- robustness ---------------------------------------------------------------------------------


def test_malformed_frames_close_only_their_connection(
    broker: LocalIggy, names: tuple[str, str]
) -> None:
    stream, topic = names

    async def main() -> None:
        client = await _topic(broker.address, stream, topic, 1)
        await client.send_messages(stream, topic, 0, [SendMessage(b"before")])

        garbage = RawClient(broker.address)
        garbage.send_raw(os.urandom(256).replace(b"\x05", b"\x06"))
        oversized = RawClient(broker.address)
        header = bytearray(encode_request_header(body_size=0, client=1, operation=2))
        struct.pack_into("<I", header, 48, 2**32 - 1)  # a 4 GiB frame
        oversized.send_raw(bytes(header))
        truncated = RawClient(broker.address)
        truncated.send_raw(encode_request_header(body_size=100, client=1, operation=2) + b"x")
        truncated.close()
        try:
            assert garbage.at_eof() and oversized.at_eof()
        finally:
            garbage.close()
            oversized.close()

        await client.send_messages(stream, topic, 0, [SendMessage(b"after")])
        polled = await _poll(client, stream, topic, PollingStrategy.First(), 10)
        assert [m.payload() for m in polled] == [b"before", b"after"]

    run(main())


def test_unknown_commands_get_an_error_not_a_hang(broker: LocalIggy) -> None:
    async def main() -> None:
        client = await connect(broker.address)
        with pytest.raises(RuntimeError, match="Invalid command"):
            await asyncio.wait_for(client.send_binary_request(9999, b"payload"), 5)
        await client.ping()

    run(main())

    raw = RawClient(broker.address)
    try:
        raw.login()
        read = raw.call(Operation.NON_REPLICATED, code=9999)
        assert (read.operation, read.status, read.body) == (2, ErrorCode.INVALID_COMMAND, b"")
        assert raw.call(Operation.NON_REPLICATED, code=ReadCode.PING).status == 0
    finally:
        raw.close()


def test_a_metadata_operation_it_does_not_implement_is_refused_in_the_result_section() -> None:
    with LocalIggy() as broker:  # the real server implements them all
        raw = RawClient(broker.address)
        try:
            raw.login()
            delete_stream = raw.call(130, encode_identifier(0))
            assert delete_stream.status == 0  # metadata ops reject inside the result section
            assert struct.unpack("<III", delete_stream.body) == (
                1, 0, ErrorCode.FEATURE_UNAVAILABLE)
            assert raw.call(Operation.NON_REPLICATED, code=ReadCode.PING).status == 0
        finally:
            raw.close()


def test_broker_routes_balanced_and_keyed_sends_like_the_server(
    broker: LocalIggy, names: tuple[str, str]
) -> None:
    """The SDK resolves Balanced and MessagesKey itself; other clients leave it to the server."""
    stream, topic = names
    client = run(_topic(broker.address, stream, topic, 4))
    raw = RawClient(broker.address)
    try:
        raw.login()

        def send(partitioning: bytes, batch: bytes) -> tuple[int, bytes]:
            body = encode_send_messages(stream, topic, partitioning, batch)
            reply = raw.call(Operation.SEND_MESSAGES, body)
            return reply.status, reply.body

        status, body = send(b"\x03\x07user-42", encode_batch([b"keyed"], first_id=100))
        assert status == 0 and struct.unpack("<IIIIQ", body)[3:] == (2, 0)
        routed = []
        for i in range(5):
            status, body = send(b"\x01\x00", encode_batch([b"rr"], first_id=200 + i))
            routed.append(struct.unpack("<IIIIQ", body)[3])
        assert routed == [0, 1, 2, 3, 0]

        # A send the server cannot place: ResourceNotFound, whatever was missing.
        partition_9 = b"\x02\x04" + struct.pack("<I", 9)
        assert send(partition_9, encode_batch([b"lost"])) == (ErrorCode.RESOURCE_NOT_FOUND, b"")
        missing = encode_send_messages(stream, "missing", b"\x01\x00", encode_batch([b"lost"]))
        assert raw.call(Operation.SEND_MESSAGES, missing).status == ErrorCode.RESOURCE_NOT_FOUND
    finally:
        raw.close()

    polled = run(apoll_all(client, stream, topic))
    assert [(m.partition, m.id, m.payload) for m in polled] == [
        (0, 200, b"rr"), (0, 204, b"rr"), (1, 201, b"rr"), (2, 100, b"keyed"), (2, 202, b"rr"),
        (3, 203, b"rr"),
    ]


def test_a_corrupt_or_miscounted_batch_is_refused_with_its_error(names: tuple[str, str]) -> None:
    """Here only: the 0.9.0-edge.5 server logs these and never replies (the SDK never sends
    them); this broker answers, so a test frame that gets them wrong fails at once."""
    stream, topic = names
    with LocalIggy() as broker:
        run(_topic(broker.address, stream, topic, 2))
        raw = RawClient(broker.address)
        try:
            raw.login()
            good = bytearray(encode_batch([b"one", b"two"]))
            corrupt_message = bytearray(good)
            corrupt_message[-1] ^= 0xFF
            corrupt_batch = bytearray(good)
            corrupt_batch[40] ^= 0xFF
            partition_1 = b"\x02\x04" + struct.pack("<I", 1)
            for batch, count, code in [
                (corrupt_message, None, ErrorCode.INVALID_MESSAGE_CHECKSUM),
                (corrupt_batch, None, ErrorCode.INVALID_BATCH_CHECKSUM),
                (good, 3, ErrorCode.INVALID_MESSAGES_COUNT),
            ]:
                body = encode_send_messages(stream, topic, partition_1, bytes(batch), count=count)
                assert raw.call(Operation.SEND_MESSAGES, body).status == code
        finally:
            raw.close()


def test_concurrent_producers_all_acked_exactly_once(
    broker: LocalIggy, names: tuple[str, str]
) -> None:
    stream, topic = names
    producers, batches, batch_size = 8, 25, 200

    async def produce(producer: int) -> list[tuple[int, int]]:
        client = await connect(broker.address)
        acks = []
        for batch in range(batches):
            first = (producer * batches + batch) * batch_size
            messages = [
                SendMessage(f"{producer}:{first + i}", id=first + i + 1) for i in range(batch_size)
            ]
            response = await client.send_messages(stream, topic, producer % 4, messages)
            acks += [(c.partition_id, c.base_offset) for c in response.confirmations]
        return acks

    async def main() -> list[list[tuple[int, int]]]:
        await _topic(broker.address, stream, topic, 4)
        return await asyncio.gather(*(produce(p) for p in range(producers)))

    acks = [ack for per_producer in run(main()) for ack in per_producer]
    assert len(acks) == producers * batches and len(set(acks)) == len(acks)
    polled = poll_all(broker.address, stream, topic)
    total = producers * batches * batch_size
    assert sorted(m.id for m in polled) == list(range(1, total + 1))
    for message in polled:  # routed to the partition its producer asked for
        sender, number = map(int, message.payload.decode().split(":"))
        assert message.partition == sender % 4 and message.id == number + 1
    for partition in range(4):  # and each producer's messages keep their order there
        ids = [m.id for m in polled if m.partition == partition]
        for sender in (partition, partition + 4):
            mine = [i for i in ids if (i - 1) // (batches * batch_size) == sender]
            assert len(mine) == batches * batch_size and mine == sorted(mine)


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
            await client.create_topic(stream, topic, 3)
            await client.create_partitions(stream, topic, 1)
            for partition in range(4):
                messages = [
                    SendMessage(f"p{partition}-{i}", {"i": i}, id=partition * 100 + i + 1)
                    for i in range(partition + 2)
                ]
                await client.send_messages(stream, topic, partition, messages)
            await _store_offset(client, "reader", stream, topic, 3, 2)
            await _poll(
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
            assert await _get_offset(client, "reader", stream, topic, 3) == (3, 4, 2)
            assert await _get_offset(client, 5, stream, topic, 1) == (1, 2, 1)
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
    env = {**os.environ, "PYTHONPATH": str(SRC)}
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


# -- pure codecs --------------------------------------------------------------------------------


# XXH32 (seed 0) reference values: the xxHash specification's test vectors, and one key whose
# hash was computed with the xxhash package's xxh32 directly.
XXH32_VECTORS = {
    b"": 0x02CC5D05,
    b"a": 0x550D7456,
    b"abc": 0x32D153FF,
    b"Nobody inspects the spammish repetition": 0xE2293B2F,
    b"user-42": 0x61819A7E,
}


@pytest.mark.parametrize(("key", "digest"), sorted(XXH32_VECTORS.items()))
def test_key_partitioning_matches_the_server(key: bytes, digest: int) -> None:
    # the server's rule (apache/iggy, calculate_partition_id_by_messages_key_hash): XXH32 of the
    # key, seed 0, modulo the partition count, partitions numbered from 0
    for count in (1, 2, 3, 4, 7, 1000):
        assert partition_for_key(key, count) == digest % count


def test_batches_verify_stamp_and_slice() -> None:
    raw = encode_batch([b"a", b"bb", b"ccc", b"dddd"], first_id=10)
    checksums = verify_batch(memoryview(raw), 4)
    batch = bytearray(raw)
    stamp_batch(batch, 2, 40, 123, checksums)
    assert struct.unpack_from("<QQQ", batch) == (2, 40, 123)
    assert verify_batch(memoryview(batch), 4) == checksums  # resealed over the new fields
    struct.pack_into("<Q", batch, 8, 41)
    with pytest.raises(BrokerError, match="INVALID_BATCH_CHECKSUM"):
        verify_batch(memoryview(batch), 4)  # the checksum covers the base offset
    struct.pack_into("<Q", batch, 8, 40)

    sliced = slice_batch(batch, 1, 2)
    assert batch_message_count(sliced) == 2
    assert struct.unpack_from("<Q", sliced, 32)[0] == len(sliced)
    assert sliced[:32] == batch[:32]  # same base offset: offsets stay base + delta
    frames = raw[256:]
    first = 48 + 1
    assert sliced[256:] == frames[first:first + 2 * 48 + 5]
    with pytest.raises(BrokerError, match="INVALID_MESSAGES_COUNT"):
        verify_batch(memoryview(raw), 3)


def test_options_and_headers_are_validated() -> None:
    def field(kind: int, value: bytes) -> bytes:
        return bytes([kind]) + struct.pack("<I", len(value)) + value

    assert parse_options(field(2, b"unknown_key") + field(12, bytes(8))) == {
        b"unknown_key": bytes(8)
    }
    for bad in (field(9, b"k") + field(2, b"v"), field(2, b"k"), field(2, b"k")[:-1],
                field(2, b"k") + field(2, b"v") + field(2, b"k") + field(2, b"w")):
        with pytest.raises(BrokerError) as caught:
            parse_options(bad)
        assert caught.value.code == ErrorCode.INVALID_FORMAT

    header = encode_request_header(body_size=3, client=5, operation=2, code=1, session=9)
    decoded = decode_request_header(header)
    assert (decoded.size, decoded.client, decoded.code, decoded.session) == (259, 5, 1, 9)
    for broken in (header[:60] + b"\x07" + header[61:], header[:128] + bytes(16) + header[144:]):
        with pytest.raises(FrameError):
            decode_request_header(broken)


pytestmark = pytest.mark.services


def test_a_deleted_topic_is_gone_with_its_messages_and_stays_gone_after_a_restart(
    tmp_path: Path
) -> None:
    """``delete_topic`` as an operator runs it: the topic, its partitions and messages go, the
    name can be taken again (empty), and the journal replays the deletion."""
    broker = LocalIggy(data_dir=tmp_path, process=True)
    with broker:

        async def main() -> None:
            client = await _topic(broker.address, "s", "t", 2)
            await client.send_messages("s", "t", Partitioning.partition_id(0),
                                       [SendMessage(b"old")])
            await client.delete_topic("s", "t")
            assert await client.get_topic("s", "t") is None
            with pytest.raises(RuntimeError):
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
            client = await _topic(broker.address, "s", "t", 1)
            await client.send_messages("s", "t", Partitioning.partition_id(0),
                                       [SendMessage(b"a"), SendMessage(b"b")])
            await client.poll_messages("s", "t", consumer=Consumer.Single("monitor"),
                                       polling_strategy=PollingStrategy.Offset(1), count=1,
                                       auto_commit=True, partition_id=0)
            assert await stored()
            await client.send_binary_request(wire.DELETE_CONSUMER_OFFSET,
                                             wire.delete_offset_request(*target))
            assert not await stored()
            with pytest.raises(RuntimeError):
                await client.send_binary_request(wire.DELETE_CONSUMER_OFFSET,
                                                 wire.delete_offset_request(*target))

        run(main())
        broker.kill()
        broker.start()
        assert not run(stored())
