"""``row_format=json``'s converters: Postgres output text -> JSON-ready Python values.

Both output plugins hand over column values as the text of the type's output function, run in
a session with :data:`~postgres_cdc_source.pg_types.SESSION_SETTINGS`; the converters here
assume them (ISO dates in UTC, shortest-exact floats, hex ``bytea``, UTF-8).

pgoutput names a column's type by OID, test_decoding by the ``format_type`` name (``integer``,
``timestamp with time zone``, ``text[]``). Both lookups read one table, keyed by the names of
:data:`~postgres_cdc_source.pg_types.TYPES`, so a value converts identically whichever plugin
delivered it. Types outside that registry (enums, domains, extension types, arrays of those)
stay strings in both: pgoutput gives only their OID, so anything smarter would make the two
plugins disagree.

A converter is called once per column per change, which makes this module the decoders' hot
path: converters are plain builtins where possible (``int``, ``str``, ``orjson.Fragment``) and
are looked up once per relation, never per value.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson

from postgres_cdc_source.pg_types import TYPES, parse_array

__all__ = [
    "TEXT_FORMS",
    "Converter",
    "converter_for_oid",
    "converter_for_type_name",
]

Converter = Callable[[str], Any]
"""Postgres output text of one non-NULL value -> a value ``orjson`` serializes as intended."""

_FLOAT_WORDS = frozenset({"NaN", "Infinity", "-Infinity"})


def _float(text: str) -> float | str:
    """float4/float8; NaN and infinities stay strings because JSON has no literal for them."""
    return text if text in _FLOAT_WORDS else float(text)


# "t"/"f" is boolout's text; test_decoding prints booleans as true/false instead.
_bool = {"t": True, "f": False, "true": True, "false": False}.__getitem__


def _bytea(text: str) -> str:
    """``\\x0aff`` (hex output) -> base64, the usual JSON carrier for bytes."""
    if not text.startswith("\\x"):
        raise ValueError(f"bytea value {text[:20]!r} is not in hex format (set bytea_output=hex)")
    return base64.b64encode(binascii.a2b_hex(text[2:])).decode("ascii")


def _timestamp(text: str) -> str:
    """``2024-01-02 03:04:05.5`` -> ``2024-01-02T03:04:05.5``; ``infinity`` and BC dates as is.

    Postgres trims trailing zeros of the fraction and omits it when zero; that is kept, since any
    number of fraction digits is valid ISO 8601.
    """
    if text.endswith(" BC"):
        return text
    return text.replace(" ", "T", 1)


def _timestamptz(text: str) -> str:
    """``2024-01-02 03:04:05.5+00`` -> ``2024-01-02T03:04:05.5+00:00``.

    With ``TimeZone=UTC`` the offset is always ``+00``; other offsets are still made ISO-like
    (``+05:30`` kept, ``+05`` -> ``+05:00``) so a session without the setting is not garbled.
    """
    if text.endswith("+00"):
        return text[:-3].replace(" ", "T", 1) + "+00:00"
    if text.endswith(" BC") or " " not in text:  # BC dates, 'infinity', '-infinity'
        return text
    stamp = text.replace(" ", "T", 1)
    sign = max(stamp.rfind("+"), stamp.rfind("-"))
    return stamp + ":00" if len(stamp) - sign == 3 else stamp


# --- the type table -----------------------------------------------------------------------------

# Each built-in type's converter, by its name in the registry; every other one's text is
# already the right JSON string: `str` (the identity on str).
_CONVERTERS: dict[str, Converter] = {
    "boolean": _bool,
    "bytea": _bytea,
    "bigint": int,
    "smallint": int,
    "integer": int,
    "oid": int,
    "json": orjson.Fragment,
    "real": _float,
    "double precision": _float,
    "timestamp without time zone": _timestamp,
    "timestamp with time zone": _timestamptz,
    "jsonb": orjson.Fragment,
}


TEXT_FORMS: dict[Converter, str] = {
    str: "text", int: "integer", _bool: "boolean", _float: "float", orjson.Fragment: "json",
    _bytea: "bytea", _timestamp: "timestamp", _timestamptz: "timestamptz",
}
"""The plain converters by the form of text each takes, for the compiled core
(:mod:`postgres_cdc_source.decoding.compiled`), which writes these forms' JSON itself and hands
every other value to its converter."""


def _tables() -> tuple[dict[int, Converter], dict[str, Converter]]:
    by_oid: dict[int, Converter] = {}
    by_name: dict[str, Converter] = {}
    for builtin in TYPES:
        convert = _CONVERTERS.get(builtin.name, str)
        array = partial(parse_array, element=convert)
        by_oid[builtin.oid] = by_name[builtin.name] = convert
        by_oid[builtin.array_oid] = by_name[builtin.name + "[]"] = array
    return by_oid, by_name


_BY_OID, _BY_NAME = _tables()


def converter_for_oid(type_oid: int) -> Converter:
    """The converter for a column of type ``type_oid`` (``str`` for types not built in)."""
    return _BY_OID.get(type_oid, str)


def converter_for_type_name(name: str) -> Converter:
    """The converter for a ``format_type`` name such as ``integer[]`` (``str`` if not built in).

    Names are matched exactly as ``format_type(oid, NULL)`` prints them: one ``[]`` for arrays of
    any dimension, no type modifiers, user types possibly quoted or schema-qualified.
    """
    return _BY_NAME.get(name, str)
