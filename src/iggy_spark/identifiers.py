"""Streams, topics and consumers in the requests this package lays out itself, encoded as the
SDK encodes the same text, so a request names what the SDK's own calls name.

An identifier is ``[kind u8][length u8][value]``: text that reads as a u32 (``"5"``, as
``get_stream("5")`` takes it) is the numeric id (kind 1, a u32), any other text the name
(kind 2, its UTF-8 bytes).
"""

from __future__ import annotations

import re
import struct

__all__ = ["identifier", "name_field"]

_NUMERIC, _NAMED = 1, 2
_DIGITS = re.compile(r"\+?[0-9]+")  # what Rust's u32 parsing, which the SDK uses, accepts


def name_field(text: str, what: str) -> bytes:
    """``[length u8][UTF-8]`` of 1 to 255 bytes; :class:`ValueError` naming ``what``
    otherwise."""
    data = text.encode()
    if not 1 <= len(data) <= 255:
        raise ValueError(f"{what} {text!r} must be 1 to 255 bytes")
    return bytes([len(data)]) + data


def identifier(text: str, what: str) -> bytes:
    """``text`` as the SDK sends it: a numeric id when it reads as a u32, else a name."""
    if _DIGITS.fullmatch(text) and int(text) < 2**32:
        return struct.pack("<BBI", _NUMERIC, 4, int(text))
    return bytes([_NAMED]) + name_field(text, what)
