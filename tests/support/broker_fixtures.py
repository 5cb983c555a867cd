"""Helpers for tests that talk to the local broker: through the real SDK, or as raw frames.

The SDK helpers (:func:`poll_all`, :func:`apoll_all`, :func:`connect`) read back what arrived
over TCP exactly as any consumer would (polling with
:mod:`~iggy_spark_testing.readback`, like the demo
and the oracle), so end-to-end tests can assert on partition, offset, id, payload and user
headers without reaching into the broker. :class:`RawClient` is for what the SDK will not send:
garbage, unknown operations, and the Balanced / MessagesKey partitioning kinds it resolves
client-side (with bodies from :mod:`iggy_spark_testing.iggy_frames`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from apache_iggy import IggyClient, ReceiveMessage, UserHeaders

from iggy_local.codes import HEADER_SIZE, Identifier, Operation, ReadCode
from iggy_local.dialects import Dialect, dialect
from iggy_spark.connection import sdk_line
from iggy_spark.sdk import SdkLine
from iggy_spark.sink import topic_request
from iggy_spark.sink.options import TopicDefaults
from iggy_spark_testing import readback
from iggy_spark_testing.iggy_frames import (
    encode_login,
    encode_request_header,
)

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion from a synchronous test (no pytest-asyncio here)."""
    return asyncio.run(coro)


@dataclass(frozen=True)
class Polled:
    """One message as a consumer sees it after polling it back over TCP."""

    partition: int
    offset: int
    id: int
    payload: bytes
    user_headers: UserHeaders
    """Typed ``HeaderKey -> HeaderValue`` as the SDK decodes them; empty when none were sent."""
    timestamp: int
    origin_timestamp: int

    @property
    def headers(self) -> dict[Any, Any]:
        """The same headers as plain Python scalars (``{"k": "v", "n": 5}``)."""
        return self.user_headers.to_scalar_dict()

    @classmethod
    def from_message(cls, message: ReceiveMessage) -> Polled:
        return cls(
            partition=message.partition_id(),
            offset=message.offset(),
            id=message.id(),
            payload=message.payload(),
            user_headers=message.user_headers() or UserHeaders(),
            timestamp=message.timestamp(),
            origin_timestamp=message.origin_timestamp(),
        )


def poll_reply(
    base_offset: int, messages: list[tuple[bytes, bytes]], line: SdkLine | None = None
) -> bytes:
    """A poll reply laid out by hand in ``line``'s layout (default: the installed SDK's): one
    batch from ``base_offset``, appended at 7 µs past the epoch, of ``(payload, user headers
    bytes)`` messages with id 0."""
    line = sdk_line() if line is None else line
    frames = b"".join(struct.pack("<Q16sIIIIQ", 0, bytes(16), i, 0, len(h), len(p), 0) + p + h
                      for i, (p, h) in enumerate(messages))
    header = struct.pack("<QQQQQQI", 0, base_offset, 7, 0, 256 + len(frames), 0, len(messages))
    head = struct.pack("<IQI", 0, 0, len(messages)).ljust(line.poll_reply_header, b"\0")
    return head + header.ljust(256, b"\0") + frames


async def connect(address: str, username: str = "iggy", password: str = "iggy") -> IggyClient:
    """A connected, logged-in SDK client."""
    client = IggyClient(address)
    await client.connect()
    await client.login_user(username, password)
    return client


async def create_topic(client: IggyClient, stream: str, topic: str, partitions: int) -> None:
    """Create a topic the way the sink does (:mod:`iggy_spark.sink.topic_request`), which every
    server accepts; ``client.create_topic`` adds options a 0.9.0-edge server refuses."""
    await topic_request.create_topic(client, stream, topic, TopicDefaults(partitions))


async def apoll_partition(
    client: IggyClient, stream: Identifier, topic: Identifier, partition: int,
) -> list[Polled]:
    """Every message of one partition, polled by offset from 0 until a poll comes back empty."""
    messages = await readback.apoll_partition(client, stream, topic, partition)
    return [Polled.from_message(message) for message in messages]


async def apoll_all(
    client: IggyClient, stream: Identifier, topic: Identifier, partition: int | None = None,
) -> list[Polled]:
    """Every message of a topic (or of one ``partition``), partition by partition."""
    if partition is not None:
        return await apoll_partition(client, stream, topic, partition)
    details = await client.get_topic(stream, topic)
    if details is None:
        raise LookupError(f"topic {topic!r} not found in stream {stream!r}")
    polled: list[Polled] = []
    for found in details.partitions:
        polled.extend(await apoll_partition(client, stream, topic, found.id))
    return polled


def poll_all(
    address: str, stream: Identifier, topic: Identifier, partition: int | None = None,
    *, username: str = "iggy", password: str = "iggy",
) -> list[Polled]:
    """Synchronous :func:`apoll_all` on a fresh connection to ``address``."""

    async def main() -> list[Polled]:
        client = await connect(address, username, password)
        return await apoll_all(client, stream, topic, partition)

    return run(main())


# -- raw frames ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class RawReply:
    command: int
    operation: int
    status: int
    body: bytes
    header: bytes


class RawClient:
    """A blocking socket speaking request frames by hand, one request at a time."""

    def __init__(self, address: str, *, timeout: float = 5.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        # Random and non-zero, as the SDK's: a real server keeps a session table by client id.
        self.client_id = int.from_bytes(os.urandom(16), "little") | 1
        self.session = 0
        self.request = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, operation: int, body: bytes = b"", *, code: int = 0) -> RawReply:
        """Send a request numbered as the SDK numbers it and read its reply."""
        self._send(operation, body, code=code, request=None)
        return self.read_reply()

    def call_unanswered(self, operation: int, body: bytes = b"", *,
                        request: int | None = None) -> None:
        """Send a request a server must drop without a reply (``request``: force its number),
        then check that the next reply on the connection answers a ping sent after it."""
        self._send(operation, body, code=0, request=request)
        self._send(Operation.NON_REPLICATED, b"", code=ReadCode.PING, request=None)
        reply = self.read_reply()
        assert (reply.command, reply.operation, reply.status) == (8, Operation.NON_REPLICATED, 0)

    def _send(self, operation: int, body: bytes, *, code: int, request: int | None) -> None:
        if request is None:
            # Register is request 0, as the SDK sends it; everything else counts up from 1.
            request = 0 if operation == Operation.REGISTER else self.request + 1
        self.request = max(self.request, request)
        header = encode_request_header(
            body_size=len(body), client=self.client_id, operation=operation, code=code,
            session=self.session, request=request,
        )
        self.sock.sendall(header + body)

    def login(
        self, username: str = "iggy", password: str = "iggy", line: Dialect | None = None, *,
        protocol: int | None = None,
    ) -> RawReply:
        """Log in with the login layout of ``line`` (default: the line a broker started without
        one speaks), announcing ``protocol`` (default: the line's own)."""
        line = dialect() if line is None else line
        reply = self.call(Operation.REGISTER,
                          encode_login(username, password, line, protocol=protocol))
        if reply.command == 8 and reply.status == 0:
            self.session = struct.unpack_from("<Q", reply.body, 8)[0]
        return reply

    def read_reply(self) -> RawReply:
        header = self._read_exactly(HEADER_SIZE)
        size = struct.unpack_from("<I", header, 48)[0]
        body = self._read_exactly(size - HEADER_SIZE)
        return RawReply(
            command=header[60], operation=header[208],
            status=struct.unpack_from("<I", header, 216)[0], body=body, header=header,
        )

    def at_eof(self) -> bool:
        """Whether the broker closed the connection (waits up to the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _read_exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {size} bytes")
            data += chunk
        return data
