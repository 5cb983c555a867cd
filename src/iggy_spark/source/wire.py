"""The requests the source lays out itself in the Iggy binary protocol, and poll replies cut
into Arrow columns, on both server lines (:mod:`iggy_spark.sdk`).

The SDK's ``poll_messages`` turns every message into a Python object that is then asked for
its fields one call at a time; that costs more than the poll itself. The source instead sends
the poll request through the SDK's ``send_binary_request`` (same connection, framing, login
and error mapping) and cuts the reply into Arrow columns with Arrow kernels, so the only
per-message Python work is one walk over the message lengths.

A reply is ``[partition_id u32][current_offset u64][count u32]``, on Iggy 0.10 the partition
context it was served under (three u64, :attr:`~iggy_spark.sdk.SdkLine.poll_reply_header`), and
then batches. The requests are the same on both lines. A batch is a
256-byte header (``base_offset u64`` @8, ``base_timestamp u64`` @16, ``batch_length u64`` @32,
``message_count u32`` @48) and its messages; a message is a 48-byte header (``checksum u64``,
``id u128`` @8, ``offset_delta u32`` @24, ``timestamp_delta u32`` @28, ``user_headers_len
u32`` @32, ``payload_len u32`` @36, reserved u64), its payload, then its user headers. A
message's offset is its batch's ``base_offset`` plus its ``offset_delta``; its timestamp (when
the server appended it) is its batch's ``base_timestamp``: what the SDK reports for both.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterator
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from connector_common.arrow_values import encoded_strings, int32s, int64s, repeated
from iggy_spark.identifiers import identifier
from iggy_spark.sdk import SdkLine
from iggy_spark.source.schema import ARROW_SCHEMA, HEADERS_TYPE

__all__ = [
    "DELETE_CONSUMER_OFFSET", "GET_CONSUMER_OFFSET", "POLL_MESSAGES", "STORE_CONSUMER_OFFSET",
    "MalformedReply", "delete_offset_request", "following", "message_count", "offset_request",
    "poll_request", "record_batch", "store_offset_request", "user_headers",
]

POLL_MESSAGES = 100
"""Command code of poll-messages."""
GET_CONSUMER_OFFSET, STORE_CONSUMER_OFFSET, DELETE_CONSUMER_OFFSET = 120, 121, 122
"""Command codes of get-, store- and delete-consumer-offset (the SDK has none of them)."""

_REPLY = struct.Struct("<IQI")
_BATCH = struct.Struct("<8xQQ8xQ8xI")
_LENGTHS = struct.Struct("<II")
_BATCH_HEADER, _MESSAGE_HEADER = 256, 48
_NO_STARTS = int32s([])
_SIZES_KEPT = 16
"""Poll sizes whose index arrays are kept."""
_HEADER_BYTES = int32s([_MESSAGE_HEADER])[0]
_HIGH_ZEROS, _NO_BYTES = (encoded_strings([b], pa.binary())[0] for b in (bytes(16), b""))
_CONSUMER_KIND = 1
_BY_OFFSET, _QUORUM = 1, 1


class MalformedReply(ValueError):
    """A poll reply whose lengths or counts do not add up."""


def _target(consumer: str, stream: str, topic: str, partition: int) -> bytes:
    """``[consumer kind][consumer][stream][topic][partition flag u8][partition u32]``."""
    return b"".join((bytes([_CONSUMER_KIND]), identifier(consumer, "consumer"),
                     identifier(stream, "stream"), identifier(topic, "topic"),
                     struct.pack("<BI", 1, partition)))


def offset_request(consumer: str, stream: str, topic: str, partition: int) -> bytes:
    """The get-consumer-offset body; the reply is empty when the consumer stored none."""
    return _target(consumer, stream, topic, partition)


def store_offset_request(
    consumer: str, stream: str, topic: str, partition: int, offset: int
) -> bytes:
    """The store-consumer-offset body: ``offset`` is the last message the consumer read."""
    return _target(consumer, stream, topic, partition) + struct.pack("<QB", offset, _QUORUM)


def delete_offset_request(consumer: str, stream: str, topic: str, partition: int) -> bytes:
    """The delete-consumer-offset body, acknowledged once replicated (``ack`` quorum)."""
    return _target(consumer, stream, topic, partition) + bytes([_QUORUM])


def poll_request(
    consumer: str, stream: str, topic: str, partition: int, offset: int, count: int
) -> bytes:
    """The poll-messages body: ``count`` messages of ``partition`` from ``offset``, polled by
    offset and without storing the consumer's offset (``auto_commit`` off)."""
    return _target(consumer, stream, topic, partition) + struct.pack(
        "<BQIB", _BY_OFFSET, offset, count, 0)


def message_count(reply: bytes, line: SdkLine) -> int:
    """How many messages the reply says it holds (0 for one too short to say)."""
    return 0 if len(reply) < line.poll_reply_header else int(_REPLY.unpack_from(reply, 0)[2])


def following(reply: bytes, line: SdkLine) -> int | None:
    """The offset after the reply's messages as its headers tell it (the first message's
    offset plus the count; a partition's offsets have no holes), without decoding it; ``None``
    for a reply without messages."""
    count = message_count(reply, line)
    first = line.poll_reply_header
    if not count or len(reply) < first + _BATCH_HEADER + _MESSAGE_HEADER:
        return None
    base = _BATCH.unpack_from(reply, first)[0]
    delta = struct.unpack_from("<I", reply, first + _BATCH_HEADER + 24)[0]
    return int(base + delta + count)


def _messages(reply: bytes, line: SdkLine) -> tuple[pa.Array, int, list[tuple[int, int, int]]]:
    """Where each message begins (int32) and the last one ends, and each batch's ``(message
    count, base offset, base timestamp)``."""
    size = len(reply)
    if size < line.poll_reply_header:
        raise MalformedReply(f"a poll reply of {size} bytes has no header")
    count = _REPLY.unpack_from(reply, 0)[2]
    data = pa.py_buffer(reply)
    parts: list[pa.Array] = []
    batches = []
    pos = line.poll_reply_header
    while pos < size:
        if pos + _BATCH_HEADER > size:
            raise MalformedReply(f"the reply ends inside a batch header at byte {pos}")
        base_offset, base_timestamp, length, messages = _BATCH.unpack_from(reply, pos)
        end = pos + length
        if end > size:
            raise MalformedReply(f"a batch of {messages} messages does not fill its "
                                 f"{length} bytes")
        batches.append((messages, base_offset, base_timestamp))
        pos += _BATCH_HEADER
        parts.append(_evenly(data, pos, end, messages) or _walk(reply, pos, end, messages))
        pos = end
    starts = parts[0] if len(parts) == 1 else pa.concat_arrays([_NO_STARTS, *parts])
    if len(starts) != count:
        raise MalformedReply(f"the reply says {count} messages and holds {len(starts)}")
    return starts, pos, batches


def _walk(reply: bytes, pos: int, end: int, messages: int) -> pa.Array:
    """Where each of a batch's messages begins, message by message: the one loop that visits
    every message."""
    first = pos
    starts = array("i")
    add = starts.append
    lengths = _LENGTHS.unpack_from
    for _ in range(messages):
        add(pos)
        headers, payload = lengths(reply, pos + 32)
        pos += _MESSAGE_HEADER + payload + headers
    if pos != end:
        raise MalformedReply(f"a batch of {messages} messages does not fill its "
                             f"{end - first + _BATCH_HEADER} bytes")
    return pa.Array.from_buffers(pa.int32(), messages, [None, pa.py_buffer(starts)])


def _evenly(data: pa.Buffer, pos: int, end: int, messages: int) -> pa.Array | None:
    """Where each of a batch's messages begins if they all have one size (records of a fixed
    layout often do): checked for every message at once with Arrow kernels, so the walk is
    skipped; ``None`` when they do not."""
    if not messages or (end - pos) % messages or (end - pos) // messages < _MESSAGE_HEADER:
        return None
    stride = (end - pos) // messages
    frames = pa.Array.from_buffers(pa.binary(stride), messages,
                                   [None, data.slice(pos, end - pos)])
    lengths = pc.binary_slice(frames, 32, 40)
    words = pa.Array.from_buffers(pa.uint32(), 2 * messages, [None, lengths.buffers()[-1]])
    sizes = pc.add(words.take(_every(0, 2 * messages, 2)), words.take(_every(1, 2 * messages, 2)))
    body = stride - _MESSAGE_HEADER
    if pc.min_max(sizes).as_py() != {"min": body, "max": body}:
        return None
    return pc.add(_every(0, stride * messages, stride), int32s([pos])[0])


@lru_cache(maxsize=_SIZES_KEPT)
def _interleaved(count: int) -> pa.Array:
    """Indices taking ``a[0], b[0], a[1], b[1], ..., end`` from ``a + b + [end]``."""
    return int32s([*(k // 2 + (k % 2) * count for k in range(2 * count)), 2 * count])


def _spans(data: pa.Buffer, starts: pa.Array, stops: pa.Array, end: int) -> pa.Array:
    """Bytes ``[starts[i], stops[i])`` of ``data`` for each message, without copying them: the
    even elements of one binary array whose odd elements are the bytes in between."""
    cuts = pa.concat_arrays([starts, stops, int32s([end])]).take(
        _interleaved(len(starts)))
    return pa.Array.from_buffers(pa.binary(), 2 * len(starts), [None, cuts.buffers()[1], data])


@lru_cache(maxsize=4 * _SIZES_KEPT)
def _every(start: int, stop: int, step: int) -> pa.Array:
    """Indices ``start, start + step, ... < stop``; polls mostly come in a few sizes, so the
    indices of the latest ones are kept (bounded: a long query sees many sizes)."""
    return int32s(range(start, stop, step))


def _field(heads: pa.Array, start: int, width: int, kind: pa.DataType) -> pa.Array:
    """One fixed-width field of every 48-byte message header, as ``kind``."""
    values = pa.Array.from_buffers(kind, _MESSAGE_HEADER // width * len(heads),
                                   [None, heads.buffers()[2]])
    return values.take(_every(start // width, len(values), _MESSAGE_HEADER // width))


def _per_message(values: list[tuple[int, int]]) -> pa.Array:
    """Each batch's value (int64) repeated for its messages: ``values`` holds ``(count,
    value)``."""
    parts = [pa.repeat(int64s([value])[0], count) for count, value in values]
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def _ids(heads: pa.Array) -> pa.Array:
    """The u128 ids as decimal text: each widened to a 256-bit decimal and formatted by Arrow."""
    wide = pc.binary_join_element_wise(pc.binary_slice(heads, 8, 24), _HIGH_ZEROS, _NO_BYTES)
    decimals = pa.Array.from_buffers(pa.decimal256(76, 0), len(heads),
                                     [None, wide.buffers()[2]])
    return decimals.cast(pa.string())


def record_batch(
    reply: bytes, stream: str, topic: str, partition: int, line: SdkLine
) -> pa.RecordBatch:
    """The message columns (:data:`~iggy_spark.source.schema.ARROW_SCHEMA`) of one poll reply
    in ``line``'s layout.

    Raises :class:`MalformedReply` for a reply whose layout does not add up.
    """
    starts, end, batches = _messages(reply, line)
    count = len(starts)
    if not count:
        return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in ARROW_SCHEMA],
                                          schema=ARROW_SCHEMA)
    data = pa.py_buffer(reply)
    every_other = _every(0, 2 * count, 2)
    heads = _spans(data, starts, pc.add(starts, _HEADER_BYTES), end).take(every_other)
    bodies = pc.add(starts, _HEADER_BYTES)
    payload_lengths = _field(heads, 36, 4, pa.int32())
    header_lengths = _field(heads, 32, 4, pa.int32())
    if pc.max(header_lengths).as_py():
        headers = pa.array([
            user_headers(reply[at:at + size]) if size else None
            for at, size in zip(pc.add(bodies, payload_lengths).to_pylist(),
                                header_lengths.to_pylist(), strict=True)
        ], HEADERS_TYPE)
    else:
        headers = pa.nulls(count, HEADERS_TYPE)
    offsets = pc.add(_field(heads, 24, 4, pa.uint32()).cast(pa.int64()),
                     _per_message([(n, base) for n, base, _ in batches]))
    timestamps = _per_message([(n, ts) for n, _, ts in batches])
    return pa.RecordBatch.from_arrays([
        repeated(stream, count),
        repeated(topic, count),
        pa.repeat(int32s([partition])[0], count),
        offsets,
        _ids(heads),
        timestamps.cast(pa.timestamp("us", tz="UTC")),
        headers,
        _spans(data, bodies, pc.add(bodies, payload_lengths), end).take(every_other),
    ], schema=ARROW_SCHEMA)


def _signed(raw: bytes) -> bytes:
    return str(int.from_bytes(raw, "little", signed=True)).encode()


def _unsigned(raw: bytes) -> bytes:
    return str(int.from_bytes(raw, "little")).encode()


def _float(raw: bytes) -> bytes:
    return str(struct.unpack("<f" if len(raw) == 4 else "<d", raw)[0]).encode()


_TEXT: dict[int, Callable[[bytes], bytes]] = {
    1: bytes,  # raw
    2: bytes,  # string: its UTF-8 bytes
    3: lambda raw: b"false" if raw == b"\x00" else b"true",
    **dict.fromkeys(range(4, 9), _signed),  # int8 .. int128
    **dict.fromkeys(range(9, 14), _unsigned),  # uint8 .. uint128
    14: _float,
    15: _float,
}
"""Header kind code to the value's bytes in the ``headers`` column."""


def _entries(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """``(kind, value)`` of each key and value in turn: ``[kind u8][len u32][value]``."""
    pos = 0
    while pos < len(raw):
        if pos + 5 > len(raw):
            raise MalformedReply("user headers end inside an entry")
        kind, size = struct.unpack_from("<BI", raw, pos)
        if kind not in _TEXT or pos + 5 + size > len(raw):
            raise MalformedReply(f"a user header of kind {kind} and {size} bytes does not fit")
        yield kind, raw[pos + 5:pos + 5 + size]
        pos += 5 + size


def user_headers(raw: bytes) -> list[tuple[str, bytes]]:
    """A message's user headers as ``(key, value)`` text and bytes, in the order sent: string
    keys as themselves, other keys as their text (raw keys decoded as UTF-8, bad bytes
    replaced); values as :data:`_TEXT` says. Keys of different kinds that read the same are all
    kept."""
    entries = list(_entries(raw))
    if len(entries) % 2:
        raise MalformedReply("user headers hold a key without a value")
    pairs = zip(entries[::2], entries[1::2], strict=True)
    return [(_TEXT[kind](key).decode(errors="replace"), _TEXT[value_kind](value))
            for (kind, key), (value_kind, value) in pairs]
