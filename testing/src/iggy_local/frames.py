"""Frame headers: every request and reply is a 256-byte consensus ("VSR") header followed by a
body. Decoding a request's header, the server's rules for its fields, and the reply and
eviction headers the broker sends back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from .codes import (
    HEADER_SIZE,
    MAX_FRAME_SIZE,
    Command,
    EvictionReason,
    FrameError,
    Operation,
)
from .dialects import Dialect

# size@48, command@60; client@128, request_checksum@144, timestamp@160, request@168,
# operation@176, session@184, user_id@192, non-replicated command code@196; on 0.10
# partition_incarnation@200 (zero on 0.9).
REQUEST_HEADER = struct.Struct("<48xI8xB67xQQQQQQB7xQIIQ48x")
# size@48, command@60; request_checksum@128, context@144, client@160, op@176, commit@184,
# timestamp@192, request@200, operation@208, status@216; on 0.10 the committed-result marker
# @220 and partition_incarnation@224.
_REPLY = struct.Struct("<48xI8xB67xQQ16xQQQQ8xQB7xIB3xQ24x")
COMMITTED_RESULT = 1
"""Reply byte 220 on 0.10: the reply carries a final committed result (op and commit set)."""
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
    partition_incarnation: int

    @property
    def body_size(self) -> int:
        return self.size - HEADER_SIZE


def decode_request_header(raw: bytes) -> RequestHeader:
    """Parse a 256-byte request header; :class:`FrameError` if it cannot start a request."""
    if len(raw) != HEADER_SIZE:
        raise FrameError(f"request header must be {HEADER_SIZE} bytes, got {len(raw)}")
    (size, command, client_lo, client_hi, checksum_lo, checksum_hi, _timestamp, request,
     operation, session, _user_id, code, incarnation) = REQUEST_HEADER.unpack(raw)
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
        partition_incarnation=incarnation,
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
    request: RequestHeader, body_size: int, *, status: int = 0, session: int = 0,
    committed_op: int = 0,
) -> bytes:
    """Build the reply header for ``request``: echoes its operation, request number, stamp and
    (0.10) partition incarnation. ``committed_op``, non-zero, marks the reply as a final
    committed result of that op (0.10; the SDK then checks the echoes): op and commit both
    carry it. Otherwise op carries the session, as on 0.9."""
    return _REPLY.pack(
        HEADER_SIZE + body_size, Command.REPLY,
        request.request_checksum & MASK64, request.request_checksum >> 64,
        request.client & MASK64, request.client >> 64,
        committed_op or session, committed_op, request.request, request.operation, status,
        COMMITTED_RESULT if committed_op else 0, request.partition_incarnation,
    )


def encode_eviction(client: int, reason: EvictionReason, dialect: Dialect) -> bytes:
    """Build a session-terminal eviction frame; the SDK maps ``reason`` to a typed error. An
    incompatible protocol carries the window ``dialect`` accepts."""
    incompatible = reason == EvictionReason.INCOMPATIBLE_PROTOCOL
    return _EVICTION.pack(
        HEADER_SIZE, Command.EVICTION, client & MASK64, client >> 64,
        dialect.protocol if incompatible else 0, dialect.protocol_min if incompatible else 0,
        reason,
    )


def request_checksum_matches(
    header: RequestHeader, body: bytes | memoryview, dialect: Dialect
) -> bool:
    """On 0.9 a non-zero stamp must be the XXH3-64 of the body (zero means unstamped); on 0.10
    the stamp identifies the request and is never checked."""
    stamp = header.request_checksum
    return not dialect.stamped_requests or stamp == 0 or stamp == xxhash.xxh3_64_intdigest(body)
