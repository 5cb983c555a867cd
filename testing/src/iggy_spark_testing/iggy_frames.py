"""Client-side Iggy frames for tests and benchmarks that speak the raw TCP protocol.

The broker (:mod:`iggy_local`) only decodes requests and encodes replies; building requests is
what the SDK does in production, and what a test does when it needs a frame the SDK would never
send (a wrong checksum, a declared count that does not match). These builders lay frames out
exactly as the ``apache-iggy`` 0.9 wheel does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import xxhash

from iggy_local.batches import BATCH_FIELDS, batch_message_count, compute_batch_checksum
from iggy_local.codes import (
    BATCH_HEADER_SIZE,
    HEADER_SIZE,
    U32,
    U64,
    Command,
    Identifier,
    encode_name,
)
from iggy_local.dialects import IGGY_0_9, Dialect, version_text
from iggy_local.frames import MASK64, REQUEST_HEADER
from iggy_local.requests import BIND_SECRET_SIZE

__all__ = [
    "encode_batch",
    "encode_identifier",
    "encode_login",
    "encode_request_header",
    "encode_send_messages",
]


def encode_request_header(
    *, body_size: int, client: int, operation: int, code: int = 0, session: int = 0,
    request: int = 0, request_checksum: int = 0,
) -> bytes:
    """Build a request header; the broker never sends one, tests and benchmarks do."""
    return REQUEST_HEADER.pack(
        HEADER_SIZE + body_size, Command.REQUEST, client & MASK64, client >> 64,
        request_checksum & MASK64, request_checksum >> 64, 0, request, operation, session, 0,
        code, 0,
    )


def encode_identifier(value: Identifier) -> bytes:
    if isinstance(value, int):
        return b"\x01\x04" + U32.pack(value)
    raw = value.encode()
    return bytes((2, len(raw))) + raw


def encode_login(
    username: str, password: str, dialect: Dialect = IGGY_0_9, *, protocol: int | None = None
) -> bytes:
    """The login body ``dialect``'s SDK sends, announcing ``protocol`` (default: the one it
    speaks); for tests and benchmarks that speak raw frames."""
    protocol = dialect.protocol if protocol is None else protocol
    return (
        U32.pack(protocol) + encode_name("rust-sdk") + encode_name(version_text(protocol))
        + (bytes(BIND_SECRET_SIZE) if dialect.bind_secret else b"")
        + encode_name(username) + encode_name(password) + U32.pack(0)
    )


def encode_batch(
    payloads: Sequence[bytes], *, first_id: int = 1, origin_timestamp: int = 0
) -> bytes:
    """A batch laid out as the SDK builds it, ids ``first_id, first_id + 1, ...`` and no user
    headers. The broker never builds one; tests and benchmarks that speak raw frames do."""
    frames: list[bytes] = []
    for index, payload in enumerate(payloads):
        covered = (
            (first_id + index).to_bytes(16, "little")
            + struct.pack("<IIIIQ", index, 0, 0, len(payload), 0) + payload
        )
        frames.append(U64.pack(xxhash.xxh3_64_intdigest(covered)) + covered)
    header = bytearray(BATCH_HEADER_SIZE)
    BATCH_FIELDS.pack_into(
        header, 0, 0, 0, 0, origin_timestamp, BATCH_HEADER_SIZE + sum(map(len, frames)), 0,
        len(frames),
    )
    U64.pack_into(header, 40, compute_batch_checksum(header, b"".join(f[:8] for f in frames)))
    return bytes(header) + b"".join(frames)


def encode_send_messages(
    stream: Identifier, topic: Identifier, partitioning: bytes, batch: bytes,
    *, count: int | None = None,
) -> bytes:
    """A send_messages body for raw clients. ``partitioning`` is ``[kind u8][len u8][value]``;
    ``count`` is the declared message count (default: the batch's own)."""
    metadata = encode_identifier(stream) + encode_identifier(topic) + partitioning
    declared = batch_message_count(batch) if count is None else count
    return U32.pack(len(metadata) + 4) + metadata + U32.pack(declared) + batch
