"""The local broker against bad clients: credentials, malformed frames, unknown commands,
corrupt batches, concurrent producers, and the bounds a server needs (the body read before
login, the connections served at once, idle connections)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest
from apache_iggy import (
    IggyClient,
    PollingStrategy,
    SendMessage,
)
from support.broker_fixtures import (
    RawClient,
    apoll_all,
    connect,
    poll_all,
    run,
)
from support.local_broker import (
    poll_partition,
    topic_client,
)

from iggy_local import LocalIggy
from iggy_local.codes import HEADER_SIZE, ErrorCode, Operation, ReadCode
from iggy_local.server import PRE_LOGIN_BODY_LIMIT, BrokerServer
from iggy_local.storage import Store
from iggy_spark_testing.iggy_frames import (
    encode_batch,
    encode_identifier,
    encode_login,
    encode_request_header,
    encode_send_messages,
)

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]


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
            # The 0.10 SDK drops the connection an eviction ended; the 0.9 one keeps it.
            with pytest.raises(RuntimeError, match=r"Unauthenticated|Disconnected"):
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
        client = await topic_client(broker.address, stream, topic, 1)
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
        polled = await poll_partition(client, stream, topic, PollingStrategy.First(), 10)
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
    client = run(topic_client(broker.address, stream, topic, 4))
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
        run(topic_client(broker.address, stream, topic, 2))
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
        await topic_client(broker.address, stream, topic, 4)
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


# -- bounds -------------------------------------------------------------------------------------

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
_PING = encode_request_header(body_size=0, client=1, operation=Operation.NON_REPLICATED,
                              code=ReadCode.PING, request=1)


@contextlib.asynccontextmanager
async def _serving(**bounds: Any) -> AsyncIterator[BrokerServer]:
    """A broker on a free port of this loop, with the given bounds (its fields)."""
    store = Store.open(None)
    server = BrokerServer(store, **bounds)
    await server.start()
    try:
        yield server
    finally:
        await server.close()
        store.close()


async def _pinged(server: BrokerServer) -> Stream:
    """A connection the broker has answered a ping on (so it is being served)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_PING)
    reply = await asyncio.wait_for(reader.readexactly(HEADER_SIZE), 5)
    assert reply[60] == 8 and struct.unpack_from("<I", reply, 216)[0] == 0
    return reader, writer


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the broker closes the connection within 5 s (``TimeoutError`` if not)."""
    with contextlib.suppress(ConnectionResetError):
        return await asyncio.wait_for(reader.read(1), 5) == b""
    return True


def test_a_non_utf8_password_is_refused_and_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="iggy_local")
    secret = b"\xffhunter2x"
    body = encode_login("iggy", "?" * len(secret)).replace(b"?" * len(secret), secret)

    async def main() -> None:
        async with _serving() as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(encode_request_header(body_size=len(body), client=1,
                                               operation=Operation.REGISTER) + body)
            reply = await asyncio.wait_for(reader.readexactly(HEADER_SIZE), 5)
            assert reply[60] == 13  # evicted: a malformed login
            writer.close()

    run(main())
    assert "malformed login: INVALID_FORMAT (4): password is not UTF-8" in caplog.text
    logged = caplog.text + "".join(str(r.exc_info) for r in caplog.records)
    assert "hunter2" not in logged and "xff" not in logged


def test_a_large_body_before_login_closes_the_connection_unread() -> None:
    """A login fits :data:`PRE_LOGIN_BODY_LIMIT`; a client that has not logged in cannot make
    the broker wait for (and buffer) a larger body, while a logged-in one may send it."""
    async def main() -> None:
        async with _serving() as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(encode_request_header(  # the body never follows: it is not waited for
                body_size=PRE_LOGIN_BODY_LIMIT + 1, client=1, operation=Operation.REGISTER))
            assert await _closed(reader)
            writer.close()
            raw = RawClient(f"127.0.0.1:{server.port}")
            try:
                login = await asyncio.to_thread(raw.login, line=server.dialect)
                assert login.status == 0
                reply = await asyncio.to_thread(raw.call, Operation.NON_REPLICATED,
                                                bytes(PRE_LOGIN_BODY_LIMIT + 1),
                                                code=ReadCode.PING)
                assert reply.status == 0
            finally:
                raw.close()

    run(main())


def test_connections_past_the_cap_are_closed_at_once() -> None:
    async def main() -> None:
        async with _serving(max_connections=2) as server:
            served = [await _pinged(server) for _ in range(2)]
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            assert await _closed(reader)
            writer.close()
            served[0][1].close()  # one slot frees once the broker sees it close
            await served[0][1].wait_closed()
            async with asyncio.timeout(5):
                while True:  # refused until the broker has seen the close, then served
                    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                    writer.write(_PING)
                    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionResetError):
                        await reader.readexactly(HEADER_SIZE)
                        break
                    writer.close()
            writer.close()
            served[1][1].close()

    run(main())


def test_a_connection_idle_or_stalled_past_the_timeout_is_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with _serving(idle_timeout=0.5) as server:
            reader, writer = await _pinged(server)  # served, then silent
            assert await _closed(reader)
            writer.close()
            reader, writer = await _pinged(server)
            writer.write(encode_request_header(body_size=100, client=1,
                                               operation=Operation.REGISTER) + b"x")
            assert await _closed(reader)  # a body that stalls part way
            writer.close()

    run(main())
    assert caplog.text.count("no complete request and reply in 0.5 s") == 2
