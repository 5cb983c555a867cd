"""Streams, topics and consumers in the requests this package lays out itself.

An identifier is ``[kind u8][length u8][value]``: kind 1 a numeric id (a u32), kind 2 a name
(its UTF-8 bytes). The SDK's calls take ``str | int`` and read text that parses as a u32
(``"5"``, as ``get_stream("5")`` takes it) as the id, so :func:`identifier` encodes text
the same way, and a request names what the SDK's own calls name. :func:`name_identifier` is
the one the SDK never sends for such text: the name ``"5"``, which the server looks up by name
(:mod:`iggy_spark.names`).
"""

from __future__ import annotations

import re
import struct

__all__ = ["identifier", "name_field", "name_identifier", "reads_as_id"]

_NUMERIC, _NAMED = 1, 2
_DIGITS = re.compile(r"\+?[0-9]+")  # what Rust's u32 parsing, which the SDK uses, accepts


def name_field(text: str, what: str) -> bytes:
    """``[length u8][UTF-8]`` of 1 to 255 bytes; :class:`ValueError` naming ``what``
    otherwise."""
    data = text.encode()
    if not 1 <= len(data) <= 255:
        raise ValueError(f"{what} {text!r} must be 1 to 255 bytes")
    return bytes([len(data)]) + data


def reads_as_id(text: str) -> bool:
    """Whether the SDK's calls read ``text`` as a numeric id rather than a name."""
    return _DIGITS.fullmatch(text) is not None and int(text) < 2**32


def identifier(value: str | int, what: str) -> bytes:
    """``value`` as the SDK sends it: a numeric id for an ``int`` or text that reads as a u32,
    else a name."""
    if isinstance(value, int):
        return struct.pack("<BBI", _NUMERIC, 4, value)
    if reads_as_id(value):
        return struct.pack("<BBI", _NUMERIC, 4, int(value))
    return name_identifier(value, what)


def name_identifier(text: str, what: str) -> bytes:
    """``text`` as a name, whatever it reads as (``"1"`` is the stream named 1, not id 1)."""
    return bytes([_NAMED]) + name_field(text, what)
