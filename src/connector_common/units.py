"""Scalar grammars shared by the sink's options and its ``iggy://`` URL query parameters.

One spelling per kind of value, so ``30s`` or ``8MB`` means the same thing wherever a user
types it. Every parser raises a plain :class:`ValueError` describing the expected form; the
caller knows which option (or URL parameter) it was parsing and wraps that into a
the connector's ``ConfigError`` naming it.

Sizes use binary multiples (``1MB`` = ``1MiB`` = 1,048,576 bytes), as Spark's own size options
and the ``pg_cdc`` source do.

Digits, spaces and unit letters are ASCII only: Python's ``int``, ``Decimal`` and ``re`` read
fullwidth or Arabic-Indic digits (U+FF11, U+0663), an ideographic space (U+3000) or the Kelvin
sign (U+212A, as ``k``) as digits, spaces and letters, so a value that looks wrong (or
invisible) in a log would otherwise configure the query.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

from connector_common.errors import show

__all__ = [
    "MAX_LONG",
    "MAX_U32",
    "parse_bool",
    "parse_byte_size",
    "parse_duration",
    "parse_int",
    "parse_positive_duration",
    "parse_positive_size",
]

MAX_LONG = 2**63 - 1
"""What a Spark long (and a JVM-side counter) holds: the bound of a count nothing else bounds."""
MAX_U32 = 2**32 - 1
"""What an unsigned 32-bit wire field (a poll request's count, say) holds."""

_SPACE = " \t\n\r\f\v"
"""What a value may be padded with: ASCII white space (``str.strip()`` also drops U+3000...)."""
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?", re.IGNORECASE | re.ASCII)
_MICROS_PER_UNIT = {
    "ms": 1_000,
    "s": 1_000_000,
    None: 1_000_000,
    "m": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
}
_SIZE = re.compile(r"([0-9]+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?",
                   re.IGNORECASE | re.ASCII)
_BYTES_PER_UNIT = {None: 1, "b": 1} | {
    spelling: 1 << (10 * power)
    for power, letter in enumerate("kmgt", start=1)
    for spelling in (letter, f"{letter}b", f"{letter}ib")
}
_INT = re.compile(r"[0-9]+")
_BOOLS = {"true": True, "false": False}


def parse_bool(text: str) -> bool:
    """``true`` or ``false`` in any case: what Spark writes for ``.option(key, True)``."""
    try:
        return _BOOLS[text.strip(_SPACE).lower()]
    except KeyError:
        raise ValueError(f"expected true or false, got {show(text)}") from None


def parse_int(text: str, *, minimum: int, maximum: int = MAX_LONG) -> int:
    """A decimal integer of ASCII digits within ``[minimum, maximum]``; no signs, spaces inside
    or underscores. ``maximum`` is what the value's consumer holds (a wire field's width; a
    Spark long by default): checked here, when the options are read on the driver, rather than
    found as a ``struct.error`` in a task."""
    stripped = text.strip(_SPACE)
    if not _INT.fullmatch(stripped):
        raise ValueError(f"expected a whole number, got {show(text)}")
    value = int(stripped)
    if not minimum <= value <= maximum:
        # a Spark long is named only to a value beyond it: below the minimum it is noise
        bound = (f"at least {minimum}" if value < minimum and maximum == MAX_LONG
                 else f"between {minimum} and {maximum}")
        raise ValueError(f"must be {bound}, got {value}")
    return value


def parse_duration(text: str) -> timedelta:
    """``500ms``, ``30s``, ``2m``, ``1h``, ``7d`` or plain (possibly fractional) seconds.

    Decimal arithmetic keeps ``0.1s`` exactly 100 ms; the result is at microsecond resolution.
    """
    match = _DURATION.fullmatch(text.strip(_SPACE))
    if not match:
        raise ValueError(
            f"expected a duration such as 500ms, 30s, 2m, 1h, 7d or plain seconds, "
            f"got {show(text)}"
        )
    number, unit = match.groups()
    micros = Decimal(number) * _MICROS_PER_UNIT[unit.lower() if unit else None]
    try:
        return timedelta(microseconds=int(micros))
    except OverflowError:
        raise ValueError(f"duration {show(text)} is too large") from None


def parse_positive_duration(text: str) -> timedelta:
    """:func:`parse_duration`, refusing zero (and anything below a microsecond)."""
    value = parse_duration(text)
    if not value:
        raise ValueError("must be greater than zero")
    return value


def parse_byte_size(text: str) -> int:
    """``8MB``, ``512KiB``, ``1g`` or a plain number of bytes (binary multiples)."""
    match = _SIZE.fullmatch(text.strip(_SPACE))
    if not match:
        raise ValueError(
            f"expected a size such as 1048576, 512KB, 8MB or 1GB, got {show(text)}"
        )
    number, unit = match.groups()
    return int(number) * _BYTES_PER_UNIT[unit.lower() if unit else None]


def parse_positive_size(text: str, *, maximum: int = MAX_LONG) -> int:
    """:func:`parse_byte_size`, at least one byte and at most ``maximum`` (a Spark long by
    default: a size no JVM-side counter can hold is a typo)."""
    value = parse_byte_size(text)
    if not 0 < value <= maximum:
        raise ValueError(f"must be between 1 byte and {maximum} bytes, got {value}")
    return value
