"""Message batches, the hot path: checked as sent, stamped with the server's fields, sliced for
polls.

:func:`verify_batch` checks a batch with one ``struct.unpack_from`` and one XXH3 per message and
never builds a per-message object, and the broker stores the batch bytes as received (restamped
in place by :func:`stamp_batch`).
"""

from __future__ import annotations

import struct

import xxhash

from .codes import BATCH_HEADER_SIZE, MESSAGE_HEADER_SIZE, U32, U64, BrokerError, ErrorCode

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
