"""The values a :class:`~iggy_spark_testing.workload.Workload` writes, in ``pg_cdc``'s JSON form.

Their expected JSON form is known without asking Postgres: text is hostile (:data:`HOSTILE_TEXT`)
or random, sometimes a few kilobytes that Postgres moves to TOAST storage; ``numeric(14,2)``
is its two-decimals text; ``jsonb`` holds nested objects with hostile keys and no floats.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from iggy_spark_testing.records import Column, Key, Mix, Row, TableSpec

__all__ = ["HOSTILE_TEXT", "as_param", "random_row", "random_value"]

HOSTILE_TEXT: tuple[str, ...] = (
    "",
    " ",
    "'",
    "''",
    '"',
    "\\",
    "\\\\'",
    "a\"; drop table x; --",
    "Robert'); DROP TABLE students;--",
    "$$; SELECT pg_sleep(10); $$",
    "%s %(name)s {} {0}",
    "E'\\x41'",
    '{"a": 1',
    '"}]},{"injected": true}',
    "\\u0000 is not a NUL",
    "line\nbreak\r\nand\ttab",
    "\x01\x02\x1b[31mred\x1b[0m\x7f",
    "\u202eright-to-left override",
    "zero\u200bwidth\ufeffbom",
    "\u2028line separator\u2029",
    "🦀💥👩‍👩‍👧‍👦",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",  # noqa: RUF001 - look-alike letters are the point
    "日本語のテキスト",
    "é (e + combining acute)",
    "NaN",
    "null",
    "-0",
    "999999999999999999999999999999",
    "<script>alert(1)</script>",
    "../../../../etc/passwd",
)
"""Strings that have broken SQL builders, JSON encoders, loggers or terminals somewhere."""

_RANDOM_ALPHABET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    " '\"\\{}[],:;%$\n\t-_/éßøλжπ中文🙂"
)


def random_row(rng: random.Random, mix: Mix, spec: TableSpec, key: Key) -> Row:
    """The row ``key`` of ``spec`` with random values in its other columns."""
    row = spec.key_json(key)
    for column in spec.payload_columns:
        row[column.name] = random_value(rng, mix, column)
    return row

def random_value(rng: random.Random, mix: Mix, column: Column) -> Any:
    """A value in ``pg_cdc``'s JSON form (numerics as text, jsonb as Python objects)."""
    if rng.random() < mix.null:
        return None
    if column.kind == "int":
        return rng.randint(-(2**31), 2**31 - 1)
    if column.kind == "numeric":
        return str(Decimal(rng.randint(-(10**12) + 1, 10**12 - 1)).scaleb(-2))
    if column.kind == "jsonb":
        return _document(rng, mix, 2)
    return _text(rng, mix)

def _text(rng: random.Random, mix: Mix) -> str:
    if rng.random() < mix.toast:
        return "".join(rng.choices(_RANDOM_ALPHABET, k=rng.randint(4000, 9000)))
    if rng.random() < mix.hostile:
        return rng.choice(HOSTILE_TEXT)
    return "".join(rng.choices(_RANDOM_ALPHABET, k=rng.randint(0, 40)))

def _document(rng: random.Random, mix: Mix, depth: int) -> Any:
    roll = rng.random()
    if depth == 0 or roll < 0.4:
        return rng.choice(
            [rng.randint(-(2**53), 2**53), True, False, None, _text(rng, mix)[:200]]
        )
    if roll < 0.6:
        return [_document(rng, mix, depth - 1) for _ in range(rng.randint(0, 3))]
    return {_text(rng, mix)[:30]: _document(rng, mix, depth - 1) for _ in range(rng.randint(0, 4))}

def as_param(column: Column, value: Any) -> Any:
    """``value`` (in ``pg_cdc``'s JSON form) as a parameter psycopg sends as ``column``'s type."""
    if value is None:
        return None
    if column.kind == "numeric":
        return Decimal(value)
    if column.kind == "jsonb":
        return Jsonb(value)
    return value
