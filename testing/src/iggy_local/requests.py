"""Request bodies into values: a cursor over a body's fields, the options block, and one decoder
per request the broker implements. A short or invalid field is a :class:`~.codes.BrokerError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

import xxhash

from .codes import (
    U32,
    U64,
    BrokerError,
    ConsumerKind,
    ErrorCode,
    Identifier,
    PartitioningKind,
    PollingKind,
)
from .dialects import Dialect


class Reader:
    """A cursor over a request body; a short or invalid field is a :class:`BrokerError`."""

    __slots__ = ("_view", "pos")

    def __init__(self, body: bytes | bytearray | memoryview) -> None:
        self._view = memoryview(body)
        self.pos = 0

    def _take(self, size: int, what: str) -> memoryview:
        end = self.pos + size
        if end > len(self._view):
            raise BrokerError(
                ErrorCode.INVALID_COMMAND,
                f"body ends at byte {len(self._view)} inside {what} (needs {end})",
            )
        chunk = self._view[self.pos:end]
        self.pos = end
        return chunk

    def u8(self, what: str) -> int:
        return self._take(1, what)[0]

    def u32(self, what: str) -> int:
        return int(U32.unpack(self._take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(U64.unpack(self._take(8, what))[0])

    def raw(self, size: int, what: str) -> bytes:
        return bytes(self._take(size, what))

    def rest(self) -> memoryview:
        return self._take(len(self._view) - self.pos, "trailing bytes")

    def text(self, size: int, what: str) -> str:
        raw = self.raw(size, what)
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise BrokerError(ErrorCode.INVALID_FORMAT, f"{what} is not UTF-8: {raw!r}") from exc

    def name(self, what: str) -> str:
        """``[len u8][utf8]`` with 1..255 bytes."""
        size = self.u8(what)
        if size == 0:
            raise BrokerError(ErrorCode.INVALID_FORMAT, f"{what} is empty")
        return self.text(size, what)

    def identifier(self, what: str) -> Identifier:
        """``[kind u8: 1 numeric, 2 string][len u8][value]``."""
        kind = self.u8(what)
        size = self.u8(what)
        if kind == 1:
            if size != 4:
                raise BrokerError(
                    ErrorCode.INVALID_IDENTIFIER, f"numeric {what} has length {size}, expected 4"
                )
            return self.u32(what)
        if kind == 2:
            if size == 0:
                raise BrokerError(ErrorCode.INVALID_IDENTIFIER, f"{what} name is empty")
            return self.text(size, what)
        raise BrokerError(ErrorCode.INVALID_IDENTIFIER, f"{what} has unknown kind {kind}")

    def optional_partition(self) -> int | None:
        """``[flag u8][partition u32]``: the partition only counts when the flag is 1."""
        flag = self.u8("partition flag")
        partition = self.u32("partition id")
        return partition if flag == 1 else None


_E = TypeVar("_E", bound=IntEnum)


def _enum(kind: type[_E], value: int, what: str) -> _E:
    try:
        return kind(value)
    except ValueError as exc:
        raise BrokerError(ErrorCode.INVALID_FORMAT, f"unknown {what} {value}") from exc


def parse_options(block: bytes) -> dict[bytes, bytes]:
    """Parse an options block of ``[kind u8][len u32][bytes]`` key/value pairs: key -> value.

    Keys are strings (kind 2) of 1..255 bytes, values 1..255 bytes of any kind, no key twice.
    Which keys a request may carry is its handler's rule (:func:`check_topic_options`).
    """
    fields: list[bytes] = []
    pos = 0
    while pos < len(block):
        kind = block[pos]
        size = int.from_bytes(block[pos + 1:pos + 5], "little")
        field = block[pos + 5:pos + 5 + size]
        is_key = len(fields) % 2 == 0
        if kind == 0 or not 1 <= size <= 255 or len(field) != size or (is_key and kind != 2):
            raise BrokerError(ErrorCode.INVALID_FORMAT, f"bad options field at byte {pos}")
        if is_key and field in fields[0::2]:
            raise BrokerError(ErrorCode.INVALID_FORMAT, f"option {field!r} given twice")
        fields.append(field)
        pos += 5 + size
    if len(fields) % 2:
        raise BrokerError(ErrorCode.INVALID_FORMAT, "options block ends after a key")
    return dict(zip(fields[0::2], fields[1::2], strict=True))


TOPIC_OPTION_KEYS = frozenset({
    b"compression_algorithm", b"message_expiry", b"max_topic_size", b"segment_size",
    b"enforce_fsync", b"messages_required_to_save", b"size_of_messages_required_to_save",
    b"preallocate_segments",
})
"""The server's create-topic option catalog: any other key is refused (UnsupportedOptionKey)."""
WHEEL_TOPIC_OPTION_KEYS = frozenset({b"durability", b"consumer_offset_durability"})
"""Keys the 0.9.0 wheel's ``create_topic`` always adds. The 0.9.0-edge.5 server refuses them;
this broker accepts them so the wheel's own call works (the sink never sends them)."""
DEFAULT_SEGMENT_SIZE = 2**30
"""A topic's segment size when create-topic leaves it out (the server's default)."""


def check_topic_options(options: dict[bytes, bytes]) -> None:
    """Refuse what the server's create-topic admission refuses: a key outside its catalog, and
    a ``max_topic_size`` (u64) below one segment, which the server could never enforce."""
    for key in options:
        if key not in TOPIC_OPTION_KEYS | WHEEL_TOPIC_OPTION_KEYS:
            raise BrokerError(ErrorCode.UNSUPPORTED_OPTION_KEY, f"unsupported option {key!r}")
    size, segment = options.get(b"max_topic_size"), options.get(b"segment_size")
    floor = U64.unpack(segment)[0] if segment is not None and len(segment) == 8 else 0
    floor = floor or DEFAULT_SEGMENT_SIZE
    if size is not None and len(size) == 8 and 0 < U64.unpack(size)[0] < floor:
        raise BrokerError(ErrorCode.INVALID_TOPIC_SIZE, f"max_topic_size below {floor} bytes")




BIND_SECRET_SIZE = 32
"""Bytes of the session bind secret a 0.10 login carries after the client's version."""


@dataclass(frozen=True, slots=True)
class ClientVersion:
    """The prefix of every login: which protocol and SDK the client speaks."""

    protocol_version: int
    sdk_name: str
    sdk_version: str


def decode_client_version(reader: Reader) -> ClientVersion:
    """``[protocol u32][sdk name][sdk version]``: the same on every protocol line, so the server
    reads it, and checks the protocol, before the rest of a login whose layout it may not know.
    """
    return ClientVersion(
        reader.u32("protocol version"), reader.name("sdk name"), reader.name("sdk version"))


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: str


def decode_credentials(reader: Reader, dialect: Dialect) -> Credentials:
    """The rest of a login after its :class:`ClientVersion`: ``[bind secret: 32 bytes, 0.10
    only][user][len u8][password][ctx_len u32][ctx]``."""
    if dialect.bind_secret:
        reader.raw(BIND_SECRET_SIZE, "bind secret")
    username = reader.name("username")
    raw = reader.raw(reader.u8("password"), "password")
    try:
        password = raw.decode()
    except UnicodeDecodeError:
        # Not Reader.text: its error shows the bytes, and the log must never hold a password in
        # any form; ``from None`` drops the UnicodeDecodeError, whose ``object`` holds them too.
        raise BrokerError(ErrorCode.INVALID_FORMAT, "password is not UTF-8") from None
    reader.raw(reader.u32("client context length"), "client context")
    return Credentials(username, password)


@dataclass(frozen=True, slots=True)
class SendMessages:
    """A decoded send request; ``batch`` views the request body without copying it."""

    stream: Identifier
    topic: Identifier
    partitioning: PartitioningKind
    partitioning_value: bytes
    messages_count: int
    batch: memoryview


def decode_send_messages(body: bytes) -> SendMessages:
    """``[metadata_len u32][stream][topic][partitioning][count u32][batch]``."""
    reader = Reader(body)
    metadata_end = reader.u32("metadata length") + 4
    stream = reader.identifier("stream id")
    topic = reader.identifier("topic id")
    partitioning = _enum(PartitioningKind, reader.u8("partitioning kind"), "partitioning kind")
    value = reader.raw(reader.u8("partitioning length"), "partitioning value")
    valid_length = {
        PartitioningKind.BALANCED: len(value) == 0,
        PartitioningKind.PARTITION_ID: len(value) == 4,
        PartitioningKind.MESSAGES_KEY: len(value) > 0,
    }
    if not valid_length[partitioning]:
        raise BrokerError(
            ErrorCode.INVALID_FORMAT, f"{partitioning.name} partitioning with {len(value)} bytes"
        )
    count = reader.u32("messages count")
    if reader.pos != metadata_end:
        raise BrokerError(
            ErrorCode.INVALID_FORMAT, f"metadata length says {metadata_end}, fields end at "
            f"{reader.pos}",
        )
    return SendMessages(stream, topic, partitioning, value, count, reader.rest())


@dataclass(frozen=True, slots=True)
class PartitionTarget:
    """The ``[consumer][stream][topic][partition]`` prefix shared by poll and offset requests."""

    consumer_kind: ConsumerKind
    consumer: Identifier
    stream: Identifier
    topic: Identifier
    partition: int | None


def _decode_target(reader: Reader) -> PartitionTarget:
    kind = _enum(ConsumerKind, reader.u8("consumer kind"), "consumer kind")
    consumer = reader.identifier("consumer id")
    stream = reader.identifier("stream id")
    topic = reader.identifier("topic id")
    return PartitionTarget(kind, consumer, stream, topic, reader.optional_partition())


@dataclass(frozen=True, slots=True)
class PollMessages:
    target: PartitionTarget
    strategy: PollingKind
    value: int
    count: int
    auto_commit: bool


def decode_poll_messages(body: bytes) -> PollMessages:
    """``[target][strategy u8][value u64][count u32][auto_commit u8]``."""
    reader = Reader(body)
    target = _decode_target(reader)
    strategy = _enum(PollingKind, reader.u8("polling strategy"), "polling strategy")
    value = reader.u64("polling value")
    count = reader.u32("count")
    auto_commit = reader.u8("auto commit") != 0
    return PollMessages(target, strategy, value, count, auto_commit)


@dataclass(frozen=True, slots=True)
class StoreOffset:
    target: PartitionTarget
    offset: int


def decode_store_offset(body: bytes) -> StoreOffset:
    """``[target][offset u64][ack u8]``; the ack level does not matter to a single node."""
    reader = Reader(body)
    target = _decode_target(reader)
    offset = reader.u64("offset")
    reader.u8("ack level")
    return StoreOffset(target, offset)


def decode_delete_offset(body: bytes) -> PartitionTarget:
    """``[target][ack u8]``."""
    reader = Reader(body)
    target = _decode_target(reader)
    reader.u8("ack level")
    return target


def decode_get_offset(body: bytes) -> PartitionTarget:
    return _decode_target(Reader(body))


def consumer_key(kind: ConsumerKind, consumer: Identifier) -> tuple[int, int]:
    """Offset-table key: named consumers hash to XXH32 like the server, so names and ids meet."""
    if isinstance(consumer, str):
        return (int(kind), xxhash.xxh32_intdigest(consumer.encode()))
    return (int(kind), consumer)
