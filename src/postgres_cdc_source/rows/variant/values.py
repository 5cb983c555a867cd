"""Postgres column text as VARIANT values (``row_format=variant``).

``key``, ``before`` and ``after`` become Spark VARIANT values: objects of the columns (an
unchanged TOAST value left out, as in the JSON mode), whatever the table, so one query reads
tables of any shape and a column change needs no restart. Each value is the JSON mode's value
(:mod:`postgres_cdc_source.rows.json.values`, from the same output text) with its type kept exact:

================================  =============================================================
Postgres                          variant value
================================  =============================================================
smallint, integer, bigint, oid    int16, int32, int64, int64
numeric                           decimal4/8/16 of the text's digits and scale (``120.50`` has
                                  scale 2); above 38 digits, and ``NaN``, ``Infinity``: string,
                                  the text
real, double precision            float, double; ``NaN``, ``Infinity``, ``-Infinity``: string
boolean                           boolean
bytea                             binary (``to_json`` writes it as the JSON mode's base64)
date                              date; ``infinity``, BC and after 9999: string, the text
timestamp                         timestamp_ntz; ``infinity``, BC and after 9999: string, the
                                  JSON mode's (``2024-01-02T03:04:05``)
timestamptz                       timestamp (an instant); outside years 1-9999: string, the
                                  JSON mode's
json, jsonb                       the JSON as variant objects, arrays, strings, booleans and
                                  nulls; numbers as above (integers, decimals of their digits,
                                  a string beyond 38 digits); a duplicate key of ``json``: the
                                  last; text a variant cannot hold (a lone surrogate escape):
                                  string, the text; nested deeper than 256 objects and arrays:
                                  a ``DecodeError`` naming the change's LSN and the column
an array of the above             array (lower bounds dropped, as in the JSON mode)
anything else                     string, the JSON mode's: text, varchar, uuid, enums,
                                  domains, intervals, money, ...
================================  =============================================================

Converters turn a value's output text straight into its encoded bytes
(:mod:`.encoding`), once per column per change; only JSON objects wait for
the row's key dictionary, which :func:`.encoding.variant_array` builds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, localcontext
from functools import partial
from itertools import accumulate
from struct import Struct
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    LongType,
    TimestampNTZType,
    TimestampType,
    VariantVal,
)

from postgres_cdc_source.pg_types import TYPES, parse_array
from postgres_cdc_source.rows.json.values import converter_for_oid, converter_for_type_name
from postgres_cdc_source.rows.struct.json_text import pg_text
from postgres_cdc_source.rows.variant import encoding as variant

__all__ = ["MAX_JSON_DEPTH", "converter_for", "json_value"]

Converter = Callable[[str], Any]

_FLOAT_WORDS = frozenset({"NaN", "Infinity", "-Infinity"})
_DIGITS = 38  # the widest exact number of a variant, decimal16


def _int2(text: str) -> bytes:
    return variant.int16(int(text))


def _int4(text: str) -> bytes:
    return variant.int32(int(text))


def _int8(text: str) -> bytes:
    return variant.int64(int(text))


def _numeric(text: str) -> bytes:
    head, _, tail = text.partition(".")
    if len(head) + len(tail) <= _DIGITS + 2:  # a sign, and 38 digits with a leading zero
        try:
            encoded = variant.decimal(int(head + tail), len(tail))
        except ValueError:  # NaN, Infinity
            encoded = None
        if encoded is not None:
            return encoded
    return variant.string(text)


def _float8(text: str) -> bytes:
    return variant.string(text) if text in _FLOAT_WORDS else variant.double(float(text))


_F32 = Struct("<f")
_U32 = Struct("<I")


def _float4(text: str) -> bytes:
    """The float4 the text names. Parsing goes through a double, then rounds it to 4 bytes:
    exact unless the double landed on the midpoint of two floats, where the text decides."""
    if text in _FLOAT_WORDS:
        return variant.string(text)
    x = float(text)
    (y,) = _F32.unpack(_F32.pack(x))
    if y != x and not math.isinf(y):
        (bits,) = _U32.unpack(_F32.pack(y))
        (z,) = _F32.unpack(_U32.pack(bits + 1 if abs(x) > abs(y) else bits - 1))
        if (y + z) / 2 == x:  # a tie the text may not be at
            exact, mid = Decimal(text), Decimal(x)
            y = z if (exact > mid) == (z > y) and exact != mid else y
    return variant.float32(y)


_BOOL = {"t": variant.TRUE, "f": variant.FALSE, "true": variant.TRUE, "false": variant.FALSE}


def _bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError(f"bytea value {text[:20]!r} is not in hex format (set bytea_output=hex)")
    return variant.binary(bytes.fromhex(text[2:]))


_EPOCH_DAYS = date(1970, 1, 1).toordinal()
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _date(text: str) -> bytes:
    try:
        return variant.date_days(date.fromisoformat(text).toordinal() - _EPOCH_DAYS)
    except ValueError:  # infinity, BC, after 9999
        return variant.string(text)


def _stamps(epoch: datetime, encode: Callable[[int], bytes], json_text: Converter
            ) -> Converter:
    """The converter of timestamps counted from ``epoch`` (naive or UTC) and encoded by
    ``encode``; a text Python cannot read is the JSON mode's (``json_text``) string."""
    def convert(text: str) -> bytes:
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError:  # infinity, BC, after 9999
            return variant.string(json_text(text))
        return encode((stamp - epoch) // _MICRO)

    return convert


_timestamp = _stamps(_EPOCH, variant.timestamp_ntz,
                    converter_for_type_name("timestamp without time zone"))
_timestamptz = _stamps(_EPOCH_UTC, variant.timestamp,
                      converter_for_type_name("timestamp with time zone"))


def _json_number(text: str) -> bytes:
    """A JSON number, exactly: a decimal of its digits (an integer beyond int64 too), else
    beyond 38 digits its text."""
    sign, digits, exponent = Decimal(text).as_tuple()
    assert isinstance(exponent, int)  # JSON has no NaN
    if len(digits) + max(exponent, 0) <= _DIGITS and exponent >= -_DIGITS:
        unscaled = int("".join(map(str, digits)))
        encoded = variant.decimal(-unscaled if sign else unscaled, -exponent)
        if encoded is not None:
            return encoded
    return variant.string(text)


def _json_int(text: str) -> bytes:
    return variant.integer(int(text)) if len(text) <= 39 else _json_number(text)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
MAX_JSON_DEPTH = 256
"""The deepest json/jsonb value (objects and arrays within each other) a variant is made of.

Parsing and encoding recurse: about two Python frames a level, under a recursion limit of
1,000 frames shared with whatever called the reader, so a deeper value would end the task with
a ``RecursionError`` naming nothing. Refused instead, as a value its type cannot hold."""
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _json_depth_fits(text: str) -> bool:
    """Whether ``text`` (JSON) nests at most :data:`MAX_JSON_DEPTH` deep, found without
    recursion: a text with no more brackets than that cannot nest deeper (the usual case: two
    counts), else its brackets outside strings are counted."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return True
    brackets = _BRACKET.findall(_JSON_STRING.sub("", text))
    depth = max(accumulate(1 if b in "[{" else -1 for b in brackets), default=0)
    return depth <= MAX_JSON_DEPTH


def _json(text: str) -> Any:
    """json/jsonb text as an encoded value, or objects and arrays holding encoded numbers."""
    if not _json_depth_fits(text):
        raise ValueError(f"json nested deeper than {MAX_JSON_DEPTH} objects and arrays, the "
                         "most a variant is made of here")
    value = json.loads(text, parse_float=_json_number, parse_int=_json_int)
    if _SURROGATE_ESCAPE.search(text) is not None:  # a pair reads as one character, one alone
        try:                                           # is no UTF-8
            variant.encode(value)
        except UnicodeEncodeError:
            return variant.string(text)
    kind = type(value)
    if kind is dict or kind is list:
        return value
    return variant.plain(value)


def _array(element: Converter, text: str) -> Any:
    items = parse_array(text, element)
    if _has_object(items):
        return items
    return variant.plain(items)


def _has_object(items: list[Any]) -> bool:
    return any(type(v) is dict or (type(v) is list and _has_object(v)) for v in items)


_BY_NAME: dict[str, Converter] = {
    "boolean": _BOOL.__getitem__,
    "bytea": _bytea,
    "bigint": _int8,
    "smallint": _int2,
    "integer": _int4,
    "oid": _int8,  # unsigned 32-bit
    "json": _json,
    "real": _float4,
    "double precision": _float8,
    "date": _date,
    "timestamp without time zone": _timestamp,
    "timestamp with time zone": _timestamptz,
    "numeric": _numeric,
    "jsonb": _json,
}


def _tables() -> tuple[dict[int, Converter], dict[str, Converter]]:
    """Every built-in type's converter and its array's, by OID and by ``format_type`` name:
    the registry's types (:data:`~postgres_cdc_source.pg_types.TYPES`), whose other types are
    strings."""
    by_oid: dict[int, Converter] = {}
    by_name: dict[str, Converter] = {}
    for builtin in TYPES:
        convert = _BY_NAME.get(builtin.name, variant.string)
        by_oid[builtin.oid] = by_name[builtin.name] = convert
        by_oid[builtin.array_oid] = by_name[builtin.name + "[]"] = partial(_array, convert)
    return by_oid, by_name


_CONVERT_OID, _CONVERT_NAME = _tables()


def converter_for(type_: int | str) -> Converter:
    """The converter of a column of type ``type_``: its OID (pgoutput, the catalog) or its
    ``format_type`` name (test_decoding); a type not built in is a string, as in the JSON
    mode."""
    if isinstance(type_, int):
        return _CONVERT_OID.get(type_, variant.string)
    return _CONVERT_NAME.get(type_, variant.string)


_SPARK_TEXT: dict[type, DataType] = {  # a decoded scalar -> the Spark type printing its text
    bool: BooleanType(), int: LongType(), Decimal: DecimalType(), date: DateType(),
    bytes: BinaryType()}


_JSON_OIDS = frozenset(map(TYPES.oid, ("json", "jsonb")))
_TIMESTAMPS: dict[int, DataType] = {TYPES.oid("timestamp without time zone"): TimestampNTZType(),
                                    TYPES.oid("timestamp with time zone"): TimestampType()}


def json_value(type_oid: int) -> Callable[[bytes], Any] | None:
    """A value of a column of ``type_oid`` as its converter encoded it (in a change's image) ->
    the JSON mode's value of the column, for matching a row's key (TOAST values read back,
    :mod:`postgres_cdc_source.stream.reselect`): decoded by pyspark's own decoder, printed as
    the Postgres text it came from and converted as the JSON mode converts that text; a
    string (the JSON mode's value already, or text a variant type could not hold) as it is.
    ``None`` for json and jsonb, whose objects are encoded with their row."""
    if type_oid in _JSON_OIDS:
        return None
    convert = converter_for_oid(type_oid)
    timestamp = _TIMESTAMPS.get(type_oid)

    def json_value(encoded: bytes) -> Any:
        with localcontext(prec=_DIGITS):  # pyspark computes a decimal in the current context
            value = VariantVal(encoded, variant.NO_KEYS).toPython()
        if value is None or isinstance(value, str):
            return value
        spark = timestamp if isinstance(value, datetime) else _SPARK_TEXT[type(value)]
        assert spark is not None, f"a timestamp from a column of type OID {type_oid}"
        return convert(pg_text(spark)(value))

    return json_value
