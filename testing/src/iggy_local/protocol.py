"""Pure codecs for the Iggy TCP protocol spoken by the ``apache-iggy`` 0.9 SDK.

Every request and reply is a 256-byte consensus ("VSR") header followed by a body, little-endian
throughout. This module turns bytes into values and values into bytes and does no I/O, so the
server stays a thin loop around it and every rule here is testable on its own. The layouts follow
``core/binary_protocol`` of apache/iggy; where the wheel disagreed, the wheel won.

Message batches are the hot path: :func:`verify_batch` checks a batch with one
``struct.unpack_from`` and one XXH3 per message and never builds a per-message object, and the
broker stores the batch bytes as received (restamped in place by :func:`stamp_batch`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

import xxhash

HEADER_SIZE = 256
# Large enough for any batch the SDK builds (it caps a send at 1,000,000 messages of modest
# size), small enough that a garbage size field cannot make the broker allocate gigabytes.
MAX_FRAME_SIZE = 256 * 1024 * 1024
# 0.11.0 packed as major << 20 | minor << 10 | patch: what the 0.9 wheel announces at login.
PROTOCOL_VERSION = (0 << 20) | (11 << 10) | 0
SERVER_VERSION = "0.9.0-local"
MAX_PARTITIONS_PER_REQUEST = 1000

BATCH_HEADER_SIZE = 256
MESSAGE_HEADER_SIZE = 48


class Command(IntEnum):
    """Frame kinds (header byte 60) the client boundary uses."""

    REQUEST = 5
    REPLY = 8
    EVICTION = 13


class Operation(IntEnum):
    """Operation byte (header byte 176) of the requests the broker implements."""

    REGISTER = 1
    NON_REPLICATED = 2
    LOGOUT = 3
    CREATE_STREAM = 128
    CREATE_TOPIC = 132
    DELETE_TOPIC = 134
    CREATE_PARTITIONS = 136
    SEND_MESSAGES = 160
    STORE_CONSUMER_OFFSET = 161
    DELETE_CONSUMER_OFFSET = 162


class ReadCode(IntEnum):
    """Command codes carried at header byte 196 by non-replicated requests."""

    PING = 1
    GET_CLUSTER_METADATA = 12
    POLL_MESSAGES = 100
    GET_CONSUMER_OFFSET = 120
    GET_STREAM = 200
    GET_STREAMS = 201
    GET_TOPIC = 300
    GET_TOPICS = 301


class ErrorCode(IntEnum):
    """The subset of ``IggyError`` codes the broker replies with; the SDK maps them back."""

    ERROR = 1
    INVALID_COMMAND = 3
    INVALID_FORMAT = 4
    FEATURE_UNAVAILABLE = 5
    INVALID_IDENTIFIER = 6
    RESOURCE_NOT_FOUND = 20
    UNAUTHENTICATED = 40
    INVALID_CREDENTIALS = 42
    STREAM_ID_NOT_FOUND = 1009
    STREAM_NAME_NOT_FOUND = 1010
    STREAM_NAME_ALREADY_EXISTS = 1012
    TOPIC_ID_NOT_FOUND = 2010
    TOPIC_NAME_NOT_FOUND = 2011
    TOPIC_NAME_ALREADY_EXISTS = 2013
    TOO_MANY_PARTITIONS = 2015
    INVALID_TOPIC_SIZE = 1019
    PARTITION_NOT_FOUND = 3007
    CONSUMER_OFFSET_NOT_FOUND = 3021
    INVALID_MESSAGES_COUNT = 4009
    INVALID_MESSAGE_CHECKSUM = 4027
    INVALID_BATCH_CHECKSUM = 4039
    UNSUPPORTED_OPTION_KEY = 4041


class EvictionReason(IntEnum):
    """Reason byte of a session-terminal eviction frame (header byte 255)."""

    NO_SESSION = 1
    INVALID_CREDENTIALS = 9
    INCOMPATIBLE_PROTOCOL = 14
    MALFORMED_LOGIN = 15


class PartitioningKind(IntEnum):
    """How a send picks its partition (``[kind u8][len u8][value]`` in the request)."""

    BALANCED = 1
    PARTITION_ID = 2
    MESSAGES_KEY = 3


class PollingKind(IntEnum):
    """Where a poll starts reading."""

    OFFSET = 1
    TIMESTAMP = 2
    FIRST = 3
    LAST = 4
    NEXT = 5


class ConsumerKind(IntEnum):
    """Whose offset a poll or offset request reads and writes."""

    CONSUMER = 1
    CONSUMER_GROUP = 2


class BrokerError(Exception):
    """A request the broker refuses; ``code`` travels to the client, ``detail`` to the log."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(f"{code.name} ({int(code)}): {detail}")
        self.code = code
        self.detail = detail

    def __reduce__(self) -> tuple[type[BrokerError], tuple[ErrorCode, str]]:
        return (BrokerError, (self.code, self.detail))


class FrameError(Exception):
    """The byte stream is not a request frame; the connection cannot be resynchronised."""


def is_result_framed(operation: int) -> bool:
    """Whether replies to ``operation`` lead with the ``[count u32]`` result section.

    Metadata operations (64..149) and the consumer-offset writes are; reads, sends, login and
    logout are not. The SDK strips the section only for these, so getting it wrong makes a
    rejection decode as success or a payload decode as a count.
    """
    return 64 <= operation < 160 or operation in (
        Operation.STORE_CONSUMER_OFFSET,
        Operation.DELETE_CONSUMER_OFFSET,
    )


# ---------------------------------------------------------------------------------------------
# Frame headers
# ---------------------------------------------------------------------------------------------

# size@48, command@60; client@128, request_checksum@144, timestamp@160, request@168,
# operation@176, session@184, user_id@192, non-replicated command code@196.
REQUEST_HEADER = struct.Struct("<48xI8xB67xQQQQQQB7xQII56x")
# size@48, command@60; request_checksum@128, context@144, client@160, op@176, commit@184,
# timestamp@192, request@200, operation@208, status@216.
_REPLY = struct.Struct("<48xI8xB67xQQ16xQQQ8x8xQB7xI36x")
# size@48, command@60; client@128, server protocol@144, min protocol@148, reason@255.
_EVICTION = struct.Struct("<48xI8xB67xQQII103xB")
MASK64 = (1 << 64) - 1

assert REQUEST_HEADER.size == _REPLY.size == _EVICTION.size == HEADER_SIZE


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The request-header fields the broker reads."""

    size: int
    client: int
    request_checksum: int
    request: int
    operation: int
    session: int
    code: int

    @property
    def body_size(self) -> int:
        return self.size - HEADER_SIZE


def decode_request_header(raw: bytes) -> RequestHeader:
    """Parse a 256-byte request header; :class:`FrameError` if it cannot start a request."""
    if len(raw) != HEADER_SIZE:
        raise FrameError(f"request header must be {HEADER_SIZE} bytes, got {len(raw)}")
    (size, command, client_lo, client_hi, checksum_lo, checksum_hi, _timestamp, request,
     operation, session, _user_id, code) = REQUEST_HEADER.unpack(raw)
    if command != Command.REQUEST:
        raise FrameError(f"header command byte is {command}, expected {int(Command.REQUEST)}")
    if not HEADER_SIZE <= size <= MAX_FRAME_SIZE:
        raise FrameError(f"frame size {size} outside {HEADER_SIZE}..{MAX_FRAME_SIZE}")
    client = client_lo | client_hi << 64
    if client == 0:
        raise FrameError("request header has client id 0")
    return RequestHeader(
        size=size,
        client=client,
        request_checksum=checksum_lo | checksum_hi << 64,
        request=request,
        operation=operation,
        session=session,
        code=code if operation == Operation.NON_REPLICATED else 0,
    )


CLIENT_OPERATIONS = frozenset(
    {Operation.REGISTER, Operation.NON_REPLICATED, Operation.LOGOUT, *range(128, 150),
     *range(160, 163)}
)
"""Operation bytes a client may send (the server's ``Operation`` enum less its internal ops)."""


def header_problem(header: RequestHeader) -> str | None:
    """Why the real server would drop this request without a reply, or ``None``.

    The server's field rules: a client operation byte; a login (Register) with session and
    request number 0; any other replicated request with both non-zero. Reads
    (NonReplicated) carry no session rule: ping works before login.
    """
    if header.operation not in CLIENT_OPERATIONS:
        return f"operation {header.operation} is not a client operation"
    if header.operation == Operation.REGISTER:
        if header.session or header.request:
            return "a login must have session 0 and request number 0"
    elif header.operation != Operation.NON_REPLICATED and not (header.session and header.request):
        return f"operation {header.operation} needs a session and a request number above 0"
    return None


def encode_reply_header(
    request: RequestHeader, body_size: int, *, status: int = 0, session: int = 0
) -> bytes:
    """Build the reply header for ``request``: echoes its operation, request number and stamp."""
    return _REPLY.pack(
        HEADER_SIZE + body_size, Command.REPLY,
        request.request_checksum & MASK64, request.request_checksum >> 64,
        request.client & MASK64, request.client >> 64,
        session, request.request, request.operation, status,
    )


def encode_eviction(client: int, reason: EvictionReason) -> bytes:
    """Build a session-terminal eviction frame; the SDK maps ``reason`` to a typed error."""
    window = PROTOCOL_VERSION if reason == EvictionReason.INCOMPATIBLE_PROTOCOL else 0
    return _EVICTION.pack(
        HEADER_SIZE, Command.EVICTION, client & MASK64, client >> 64, window, window, reason
    )


def request_checksum_matches(header: RequestHeader, body: bytes | memoryview) -> bool:
    """A zero stamp means unstamped; otherwise it must be the XXH3-64 of the body."""
    stamp = header.request_checksum
    return stamp == 0 or stamp == xxhash.xxh3_64_intdigest(body)


# ---------------------------------------------------------------------------------------------
# Body primitives
# ---------------------------------------------------------------------------------------------

Identifier = int | str
"""A stream, topic or consumer identifier: numeric id or name."""

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")


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


def encode_name(name: str) -> bytes:
    raw = name.encode()
    return bytes((len(raw),)) + raw


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


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Login:
    protocol_version: int
    sdk_name: str
    sdk_version: str
    username: str
    password: str


def decode_login(body: bytes) -> Login:
    """``[protocol u32][sdk name][sdk version][user][len u8][password][ctx_len u32][ctx]``."""
    reader = Reader(body)
    protocol_version = reader.u32("protocol version")
    sdk_name = reader.name("sdk name")
    sdk_version = reader.name("sdk version")
    username = reader.name("username")
    password = reader.text(reader.u8("password"), "password")
    reader.raw(reader.u32("client context length"), "client context")
    return Login(protocol_version, sdk_name, sdk_version, username, password)


def is_protocol_compatible(version: int) -> bool:
    """Same rule as the server: not below our minimum, major.minor not above ours."""
    return version >= PROTOCOL_VERSION and version >> 10 <= PROTOCOL_VERSION >> 10


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


# ---------------------------------------------------------------------------------------------
# Replies
# ---------------------------------------------------------------------------------------------

RESULT_OK = U32.pack(0)


def result_rejection(code: ErrorCode) -> bytes:
    """A committed rejection in a result-framed reply: one ``{index 0, code}`` entry."""
    return struct.pack("<III", 1, 0, code)


def encode_login_reply(user_id: int, session: int) -> bytes:
    return (
        RESULT_OK + struct.pack("<IQI", user_id, session, PROTOCOL_VERSION)
        + encode_name(SERVER_VERSION)
    )


def encode_cluster_metadata(ip: str, tcp_port: int) -> bytes:
    """A one-node roster: the node is the healthy leader, so the SDK never redirects."""

    def text(value: str) -> bytes:
        raw = value.encode()
        return U32.pack(len(raw)) + raw

    return (
        text("iggy-spark-local") + U32.pack(1) + text("local-0") + text(ip)
        + struct.pack("<HHHHBB", tcp_port, 0, 0, 0, 0, 0)
    )


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    id: int
    created_at: int
    current_offset: int
    size_bytes: int
    messages_count: int


@dataclass(frozen=True, slots=True)
class TopicSummary:
    id: int
    name: str
    created_at: int
    message_expiry: int
    compression: int
    max_topic_size: int
    options: bytes
    partitions: tuple[PartitionSummary, ...]


@dataclass(frozen=True, slots=True)
class StreamSummary:
    id: int
    name: str
    created_at: int
    options: bytes
    topics: tuple[TopicSummary, ...]


def _prefixed(block: bytes) -> bytes:
    return U32.pack(len(block)) + block


def encode_topic_header(topic: TopicSummary) -> bytes:
    """TopicHeader: fixed fields, name, options, derived options (none)."""
    size = sum(p.size_bytes for p in topic.partitions)
    messages = sum(p.messages_count for p in topic.partitions)
    return (
        struct.pack(
            "<IQIQBQQQ", topic.id, topic.created_at, len(topic.partitions),
            topic.message_expiry, topic.compression, topic.max_topic_size, size, messages,
        )
        + encode_name(topic.name) + _prefixed(topic.options) + _prefixed(b"")
    )


def encode_topic(topic: TopicSummary) -> bytes:
    """TopicHeader followed by one record per partition (get_topic, create_topic)."""
    return encode_topic_header(topic) + b"".join(
        struct.pack(
            "<IQIQQQ", p.id, p.created_at, 1, p.current_offset, p.size_bytes, p.messages_count
        )
        for p in topic.partitions
    )


def encode_stream(stream: StreamSummary, *, with_topics: bool) -> bytes:
    """StreamResponse, optionally followed by its topic headers (get_stream)."""
    partitions = [p for topic in stream.topics for p in topic.partitions]
    head = struct.pack(
        "<IQIQQ", stream.id, stream.created_at, len(stream.topics),
        sum(p.size_bytes for p in partitions), sum(p.messages_count for p in partitions),
    ) + encode_name(stream.name) + _prefixed(stream.options)
    if not with_topics:
        return head
    return head + b"".join(encode_topic_header(topic) for topic in stream.topics)


def encode_send_reply(stream_id: int, topic_id: int, partition_id: int, base_offset: int) -> bytes:
    return struct.pack("<IIIIQ", 1, stream_id, topic_id, partition_id, base_offset)


def encode_poll_header(partition_id: int, current_offset: int, messages_count: int) -> bytes:
    return struct.pack("<IQI", partition_id, current_offset, messages_count)


def encode_consumer_offset(partition_id: int, current_offset: int, stored_offset: int) -> bytes:
    return struct.pack("<IQQ", partition_id, current_offset, stored_offset)


# ---------------------------------------------------------------------------------------------
# Message batches
# ---------------------------------------------------------------------------------------------
#
# Batch header (256 bytes): partition_id u64 @0, base_offset u64 @8, base_timestamp u64 @16,
# origin_timestamp u64 @24, batch_length u64 @32, batch_checksum u64 @40, message_count u32 @48,
# zero to 256. Message: checksum u64 @0 (XXH3-64 of the message after these 8 bytes), id u128
# @8, offset_delta u32 @24, timestamp_delta u32 @28, user_headers_len u32 @32, payload_len u32
# @36, reserved u64 @40, then payload, then user headers. The batch checksum is one XXH3-64 over
# the six header fields (checksum excluded) followed by every message checksum in order.

_MESSAGE = struct.Struct("<Q16xIIIIQ")
BATCH_FIELDS = struct.Struct("<QQQQQQI")
_STAMP = struct.Struct("<QQQ")
_BATCH_SIZE_FIELDS = struct.Struct("<Q8xI")


def compute_batch_checksum(batch: bytes | bytearray | memoryview, message_checksums: bytes) -> int:
    digest = xxhash.xxh3_64(batch[0:40])
    digest.update(batch[48:52])
    digest.update(message_checksums)
    return digest.intdigest()


def verify_batch(batch: memoryview, declared_count: int) -> bytes:
    """Check a batch exactly as sent and return its message checksums, concatenated.

    Rejects a batch whose frames do not tile ``message_count`` (which must equal the request's
    count), a message whose XXH3 does not match, offset deltas other than 0, 1, 2, ... (polls
    derive offsets from them and they are inside the checksum, so they cannot be rewritten) and
    a batch checksum that does not match. The returned bytes let :func:`stamp_batch` recompute
    the batch checksum without walking the messages again.
    """
    size = len(batch)
    if size < BATCH_HEADER_SIZE:
        raise BrokerError(ErrorCode.INVALID_MESSAGES_COUNT, f"batch of {size} bytes has no header")
    (_, _, _, _, batch_length, batch_checksum, count) = BATCH_FIELDS.unpack_from(batch, 0)
    if batch_length != size:
        raise BrokerError(
            ErrorCode.INVALID_FORMAT, f"batch_length {batch_length} but {size} bytes follow"
        )
    if count != declared_count or count == 0:
        raise BrokerError(
            ErrorCode.INVALID_MESSAGES_COUNT,
            f"batch holds {count} messages, request declares {declared_count}",
        )
    if any(batch[52:BATCH_HEADER_SIZE]):
        raise BrokerError(ErrorCode.INVALID_FORMAT, "batch header reserved bytes are not zero")
    unpack = _MESSAGE.unpack_from
    digest = xxhash.xxh3_64_intdigest
    checksums = []
    pos = BATCH_HEADER_SIZE
    for index in range(count):
        if pos + MESSAGE_HEADER_SIZE > size:
            raise BrokerError(
                ErrorCode.INVALID_MESSAGES_COUNT, f"batch ends inside message {index} header"
            )
        checksum, delta, _, headers_len, payload_len, reserved = unpack(batch, pos)
        end = pos + MESSAGE_HEADER_SIZE + payload_len + headers_len
        if end > size:
            raise BrokerError(ErrorCode.INVALID_MESSAGES_COUNT, f"message {index} overruns batch")
        if delta != index or reserved:
            raise BrokerError(
                ErrorCode.INVALID_FORMAT,
                f"message {index} has offset_delta {delta} / reserved {reserved}",
            )
        if digest(batch[pos + 8:end]) != checksum:
            raise BrokerError(
                ErrorCode.INVALID_MESSAGE_CHECKSUM, f"message {index} checksum does not match"
            )
        checksums.append(batch[pos:pos + 8])
        pos = end
    if pos != size:
        raise BrokerError(
            ErrorCode.INVALID_MESSAGES_COUNT, f"{size - pos} bytes follow the last message"
        )
    joined = b"".join(checksums)
    if compute_batch_checksum(batch, joined) != batch_checksum:
        raise BrokerError(ErrorCode.INVALID_BATCH_CHECKSUM, "batch checksum does not match")
    return joined


def stamp_batch(
    batch: bytearray, partition_id: int, base_offset: int, base_timestamp: int,
    message_checksums: bytes,
) -> None:
    """Fill in the fields the server owns and reseal the batch checksum over them."""
    _STAMP.pack_into(batch, 0, partition_id, base_offset, base_timestamp)
    U64.pack_into(batch, 40, compute_batch_checksum(batch, message_checksums))


def batch_message_count(batch: bytes | bytearray) -> int:
    return int(U32.unpack_from(batch, 48)[0])


def batch_location(batch: bytes | bytearray) -> tuple[int, int, int]:
    """``(partition_id, base_offset, base_timestamp)`` of a stamped batch."""
    partition_id, base_offset, base_timestamp = _STAMP.unpack_from(batch, 0)
    return partition_id, base_offset, base_timestamp


def slice_batch(batch: bytes | bytearray, skip: int, take: int) -> bytes:
    """A batch holding messages ``skip .. skip + take`` of ``batch``, byte for byte.

    The base offset and every message frame are kept, so the SDK's ``base_offset +
    offset_delta`` and the message checksums stay right; length, count and the batch checksum
    are recomputed.
    """
    unpack = _MESSAGE.unpack_from
    pos = BATCH_HEADER_SIZE
    start = end = pos
    checksums = []
    for index in range(skip + take):
        _, _, _, headers_len, payload_len, _ = unpack(batch, pos)
        if index == skip:
            start = pos
        if index >= skip:
            checksums.append(batch[pos:pos + 8])
        pos += MESSAGE_HEADER_SIZE + payload_len + headers_len
        end = pos
    sliced = bytearray(batch[:BATCH_HEADER_SIZE])
    sliced += batch[start:end]
    _BATCH_SIZE_FIELDS.pack_into(sliced, 32, len(sliced), take)
    U64.pack_into(sliced, 40, compute_batch_checksum(sliced, b"".join(checksums)))
    return bytes(sliced)
