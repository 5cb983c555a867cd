"""The local broker's pure codecs: key partitioning, batches, options and headers."""

from __future__ import annotations

import struct

import pytest

from iggy_local.batches import batch_message_count, slice_batch, stamp_batch, verify_batch
from iggy_local.codes import BrokerError, ErrorCode, FrameError
from iggy_local.frames import decode_request_header
from iggy_local.requests import parse_options
from iggy_spark.sink.partitioning import partition_for_key
from iggy_spark_testing.iggy_frames import (
    encode_batch,
    encode_request_header,
)

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]


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
