"""Log sequence numbers: Postgres's ``X/Y`` text form and integers.

Shared by ``pg_cdc`` and by the ``iggy`` source, which rebuilds a change's ``position`` from
its ``commit_lsn`` text (:mod:`connector_common.change_rows`). Inside ``pg_cdc`` an LSN is
always a plain ``int`` (the 64-bit WAL byte position), because ints
compare and subtract correctly while the text form does not (``'0/A' > '0/10'``). Text appears
only at the edges: SQL parameters, offsets in Spark's checkpoint
(:class:`~postgres_cdc_source.stream.offset.StreamOffset`), and log messages.
"""

from __future__ import annotations

__all__ = ["MAX_LSN", "format_lsn", "parse_lsn"]

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

