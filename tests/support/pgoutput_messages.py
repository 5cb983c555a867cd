"""pgoutput protocol messages built by hand, and peek rows of them: what the decoder tests
feed the pgoutput decoders (the Python one and the compiled core's)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from postgres_cdc_source.decoding import UNCHANGED, PeekRow, RawValue

__all__ = ["cstr", "m_begin", "m_commit", "m_delete", "m_insert", "m_message", "m_relation",
           "m_truncate", "m_update", "tup", "txn"]


def cstr(text: str) -> bytes:
    return text.encode() + b"\0"


def m_begin(xid: int, micros: int = 0) -> bytes:
    return b"B" + struct.pack(">QqI", 0x1000, micros, xid)


def m_commit(end_lsn: int, micros: int = 0) -> bytes:
    return b"C" + struct.pack(">BQQq", 0, end_lsn - 8, end_lsn, micros)


def m_relation(relid: int, schema: str, table: str, replident: bytes,
               columns: Sequence[tuple[int, str, int]]) -> bytes:
    """``columns``: (flags, name, type OID)."""
    body = b"".join(bytes([f]) + cstr(n) + struct.pack(">Ii", oid, -1) for f, n, oid in columns)
    return (b"R" + struct.pack(">I", relid) + cstr(schema) + cstr(table) + replident
            + struct.pack(">H", len(columns)) + body)


def tup(values: Sequence[RawValue]) -> bytes:
    out = [struct.pack(">H", len(values))]
    for v in values:
        if v is None:
            out.append(b"n")
        elif v is UNCHANGED:
            out.append(b"u")
        else:
            data = str(v).encode()
            out.append(b"t" + struct.pack(">I", len(data)) + data)
    return b"".join(out)


def m_insert(relid: int, new: Sequence[RawValue]) -> bytes:
    return b"I" + struct.pack(">I", relid) + b"N" + tup(new)


def m_update(relid: int, new: Sequence[RawValue], old: Sequence[RawValue] | None = None,
             kind: bytes = b"K") -> bytes:
    old_part = b"" if old is None else kind + tup(old)
    return b"U" + struct.pack(">I", relid) + old_part + b"N" + tup(new)


def m_delete(relid: int, old: Sequence[RawValue], kind: bytes = b"K") -> bytes:
    return b"D" + struct.pack(">I", relid) + kind + tup(old)


def m_truncate(relids: Sequence[int], flags: int) -> bytes:
    return b"T" + struct.pack(">IB", len(relids), flags) + b"".join(struct.pack(">I", r)
                                                                     for r in relids)


def m_message(prefix: str, content: bytes, *, transactional: bool = True) -> bytes:
    return (b"M" + struct.pack(">BQ", int(transactional), 0) + cstr(prefix)
            + struct.pack(">I", len(content)) + content)


def txn(*messages: bytes, xid: int = 700, start: int = 0x100) -> list[PeekRow]:
    """Rows of one transaction: B, the messages, C, at consecutive LSNs."""
    body = [m_begin(xid), *messages, m_commit(start + 8 * (len(messages) + 1))]
    return [(start + 8 * i, xid, data) for i, data in enumerate(body)]
