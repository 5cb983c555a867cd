"""Log sequence numbers: Postgres's ``X/Y`` text form, integers, and the stream's offset JSON.

Inside ``pg_cdc`` an LSN is always a plain ``int`` (the 64-bit WAL byte position), because ints
compare and subtract correctly while the text form does not (``'0/A' > '0/10'``). Text appears
only at the edges: SQL parameters, offsets in Spark's checkpoint, and log messages.

The offset JSON must be byte-for-byte canonical: Spark compares serialized offsets to decide
whether a batch is new, so the same position must always serialize to the same string.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["MAX_LSN", "parse_lsn", "format_lsn", "offset_json", "lsn_from_offset"]

MAX_LSN = 0xFFFF_FFFF_FFFF_FFFF
"""The largest LSN Postgres can represent (``FFFFFFFF/FFFFFFFF``)."""

_HEX = frozenset("0123456789abcdefABCDEF")


def _hex_part(part: str) -> bool:
    return 0 < len(part) <= 8 and all(ch in _HEX for ch in part)


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` -> ``0x16_B374D848``; the same forms ``pg_lsn`` accepts on input.

    Each half is 1 to 8 hex digits of either case. Anything else (signs, spaces, ``0x``
    prefixes, which ``int(x, 16)`` would let through) raises :class:`ValueError` naming the value.
    """
    if not isinstance(text, str):
        raise ValueError(f"bad LSN {text!r}: expected a string like '16/B374D848'")
    high, sep, low = text.partition("/")
    if not sep or not _hex_part(high) or not _hex_part(low):
        raise ValueError(f"bad LSN {text!r}: expected two hex numbers like '16/B374D848'")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(value: int) -> str:
    """``0x16_B374D848`` -> ``'16/B374D848'``: upper-case hex, no padding, as Postgres prints."""
    if not 0 <= value <= MAX_LSN:
        raise ValueError(f"bad LSN {value!r}: must be between 0 and {MAX_LSN}")
    return f"{value >> 32:X}/{value & 0xFFFF_FFFF:X}"


def offset_json(lsn: int) -> str:
    """The canonical offset for a stream position: ``{"lsn":"0/16B3748"}`` (no spaces)."""
    return orjson.dumps({"lsn": format_lsn(lsn)}, option=orjson.OPT_SORT_KEYS).decode()


def lsn_from_offset(obj: dict[str, Any] | str) -> int:
    """The LSN in an offset, given as the JSON text or the already-parsed dict."""
    parsed: Any = obj
    if isinstance(obj, str):
        try:
            parsed = orjson.loads(obj)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"bad offset {obj!r}: not JSON ({exc})") from None
    if not isinstance(parsed, dict) or "lsn" not in parsed:
        raise ValueError(f'bad offset {obj!r}: expected an object like {{"lsn":"0/16B3748"}}')
    return parse_lsn(parsed["lsn"])
