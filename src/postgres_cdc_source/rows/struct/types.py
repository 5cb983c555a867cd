"""Postgres column types as Spark types, and column text as typed values (``row_format=struct``).

A column's Spark type comes from the catalog (:mod:`.catalog` reads the table's columns and
their ``pg_type`` rows, the base types of domains and the element types of arrays; the rules
are pure, here, in :func:`column_type`):

================================  =============================================================
Postgres                          Spark
================================  =============================================================
smallint, integer, bigint, oid    short, int, long, long
numeric(p, s)                     decimal(p, s) (a negative scale: decimal(p - s, 0); a scale
                                  above the precision: decimal(s, s)); above 38 digits: string
numeric (unconstrained)           string, the exact text: no precision and scale fit every value
real, double precision            float, double (``NaN``, ``Infinity`` as such)
boolean                           boolean
text, varchar, char(n), name      string
bytea                             binary
date                              date
timestamp                         timestamp_ntz
timestamptz                       timestamp
json, jsonb                       string, Postgres's text of the value
uuid, enums                       string
a domain                          its base type's
an array of the above             array of the element's type
anything else                     string, Postgres's text: composite, range, interval, money,
                                  geometric, network, time, bit strings, xml, ...
================================  =============================================================

Values are converted from the same output text the JSON mode's converters
(:mod:`postgres_cdc_source.rows.json.values`) read, in the same session settings, so a struct
field holds what the JSON mode's value means: tests parse both and compare them type by type.
Most are converted as they are decoded; decimals, dates and timestamps (not arrays of them)
keep their text in a change's images and Arrow casts them a column at a time when the batch is
built (:mod:`.images`). A value the Spark type cannot hold fails with
:class:`ValueError` naming it, never a silent null or a rounded number: ``NaN`` in a decimal
column, a date or timestamp that is infinite, BC or after the year 9999, an array of more than
one dimension.

A table's columns change under a query (``schema_evolution``): with ``fail`` a change must have
the columns the query started with (:meth:`.structs.StructRows.retyped`), and a restart on the
checkpoint is refused naming the difference (:func:`.structs.checkpoint_difference`); with
``add_columns`` changes are typed by column name and a restart evolves the structs to their
union over time (:meth:`.structs.StructRows.evolved`, :func:`.evolution.widens`), so that every
row the query delivered fits the struct it delivers now.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from typing import Any, NamedTuple

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from postgres_cdc_source.catalog import ColumnInfo
from postgres_cdc_source.pg_types import TYPES, parse_array

__all__ = [
    "PgType",
    "TableStruct",
    "TypedColumn",
    "column_type",
    "spark_typed",
    "typed_columns",
]


class PgType(NamedTuple):
    """What :func:`column_type` needs of a ``pg_type`` row."""

    oid: int
    name: str
    kind: str  # typtype: b base, d domain, e enum, c composite, r range, m multirange, p pseudo
    base: int  # a domain's base type, else 0
    base_typmod: int  # a domain's modifier of its base type, else -1
    element: int  # an array's element type, else 0
    delimiter: str  # the element delimiter of this type's arrays


class TypedColumn(NamedTuple):
    """A column's Spark type (which gives its Arrow type and converter, :func:`spark_typed`)
    and its Postgres type as pgoutput (OID) and test_decoding (``format_type`` name) name
    it."""

    name: str
    spark: DataType
    type_oid: int = 0
    type_name: str = ""


class TableStruct(NamedTuple):
    """A table's columns as the decoders deliver them (generated ones are not sent), typed,
    the names of its replica-identity columns (``key``), in column order, and each column's
    ``pg_attribute.attnum`` (``attnums``, aligned with ``columns``; empty when not read), which
    a rename keeps: how a restart tells a renamed column from a dropped one and an added one."""

    columns: tuple[TypedColumn, ...]
    key: tuple[str, ...]
    attnums: tuple[int, ...] = ()


# --- converters: output text -> the value Arrow stores for the Spark type -----------------------

_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _float(text: str) -> float:
    word = _FLOAT_WORDS.get(text)
    return float(text) if word is None else word


_BOOL = {"t": True, "f": False, "true": True, "false": False}


def _bool(text: str) -> bool:
    return _BOOL[text]


def _bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError(f"bytea value {text[:20]!r} is not in hex format (set bytea_output=hex)")
    return bytes.fromhex(text[2:])


def _decimal(precision: int, scale: int, text: str) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise ValueError(f"{text!r} has no decimal({precision},{scale}) value")
    # Postgres prints a numeric in plain digits, with as many places as its column's scale:
    # counting them in the text is enough unless they are near the limits (a third of a
    # typed change's cost was the exact checks below)
    point = text.find(".")
    whole = (len(text) if point < 0 else point) - (text[0] == "-")
    if (len(text) - point - 1 if point >= 0 else 0) <= scale and whole <= precision - scale and (
            "E" not in text):
        return value
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    extra = -exponent - scale  # decimal places beyond the scale: zeros only
    if extra > 0 and any(digits[-extra:]):
        raise ValueError(f"{text!r} has more than {scale} decimal places")
    if value and value.adjusted() >= precision - scale:
        raise ValueError(f"{text!r} has more than {precision - scale} digits before the point")
    if extra > 0:  # without the zeros: Arrow takes no more than 38 digits, even zeros
        return Decimal((sign, digits[:-extra] or (0,), -scale))
    return value


def _out_of_range(spark: str, text: str, exc: ValueError) -> ValueError:
    return ValueError(f"{text!r} has no Spark {spark} value (Spark's range is the years 1 to "
                      f"9999; infinity and BC are outside it): {exc}")


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise _out_of_range("DATE", text, exc) from exc


def _timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise _out_of_range("TIMESTAMP_NTZ", text, exc) from exc
    if value.tzinfo is not None:
        raise ValueError(f"timestamp {text!r} has a time zone")
    return value


def _timestamptz(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise _out_of_range("TIMESTAMP", text, exc) from exc
    if value.tzinfo is None:
        raise ValueError(f"timestamptz {text!r} has no time zone")
    return value


def _array(element: Callable[[str], Any], text: str) -> list[Any]:
    values = parse_array(text, element)
    if any(isinstance(v, list) for v in values):
        raise ValueError(f"array {text[:40]!r} has more than one dimension (a struct field "
                         "holds one)")
    return values


# --- types ----------------------------------------------------------------------------------

_Typed = tuple[DataType, pa.DataType, Callable[[str], Any]]

_STRING: _Typed = (StringType(), pa.string(), str)
_BY_NAME: dict[str, _Typed] = {
    "boolean": (BooleanType(), pa.bool_(), _bool),
    "bytea": (BinaryType(), pa.binary(), _bytea),
    '"char"': _STRING,
    "name": _STRING,
    "bigint": (LongType(), pa.int64(), int),
    "smallint": (ShortType(), pa.int16(), int),
    "integer": (IntegerType(), pa.int32(), int),
    "text": _STRING,
    "oid": (LongType(), pa.int64(), int),  # unsigned 32-bit
    "json": _STRING,  # its text
    "real": (FloatType(), pa.float32(), _float),
    "double precision": (DoubleType(), pa.float64(), _float),
    "character": _STRING,  # character(n)
    "character varying": _STRING,
    "date": (DateType(), pa.date32(), _date),
    "timestamp without time zone": (TimestampNTZType(), pa.timestamp("us"), _timestamp),
    "timestamp with time zone": (TimestampType(), pa.timestamp("us", tz="UTC"), _timestamptz),
    "uuid": _STRING,
    "jsonb": _STRING,  # its text
}
"""The built-in types of a Spark type of their own, by name
(:data:`~postgres_cdc_source.pg_types.TYPES`); every other type is a string."""
_BY_OID: dict[int, _Typed] = {TYPES.oid(name): typed for name, typed in _BY_NAME.items()}
_NUMERIC = TYPES.oid("numeric")
_MAX_PRECISION = 38
_BY_SPARK: dict[DataType, _Typed] = {typed[0]: typed for typed in _BY_OID.values()}


def spark_typed(spark: DataType) -> _Typed:
    """The Arrow type and converter of a struct field of Spark type ``spark``, as
    :func:`column_type` gives them for a column of that Spark type: the converter depends on
    the Spark type alone, so a field a restart keeps for a dropped column (no longer in the
    catalog) types the older changes that still carry it."""
    if isinstance(spark, StringType):
        return _STRING
    if isinstance(spark, DecimalType):
        return (spark, pa.decimal128(spark.precision, spark.scale),
                partial(_decimal, spark.precision, spark.scale))
    if isinstance(spark, ArrayType):
        _, arrow, convert = spark_typed(spark.elementType)
        return (spark, pa.list_(arrow), partial(_array, convert))
    return _BY_SPARK[spark]


def _numeric(typmod: int) -> _Typed:
    """numeric(p, s) as a decimal that holds every value the column can; the rest as text."""
    if typmod < 4:  # unconstrained
        return _STRING
    precision = ((typmod - 4) >> 16) & 0xFFFF
    scale = (typmod - 4) & 0x7FF
    if scale > 0x3FF:  # Postgres 15+: an 11-bit signed scale, -1000 to 1000
        scale -= 0x800
    if scale < 0:  # numeric(3, -2) holds 99900: five digits, no fraction
        precision, scale = precision - scale, 0
    precision = max(precision, scale)  # numeric(2, 5) holds 0.00099
    if precision > _MAX_PRECISION:
        return _STRING
    return (DecimalType(precision, scale), pa.decimal128(precision, scale),
            partial(_decimal, precision, scale))


def column_type(types: Mapping[int, PgType], type_oid: int, typmod: int = -1) -> _Typed:
    """The Spark type, Arrow type and converter of a column of ``type_oid`` (``typmod`` its
    modifier), following domains to their base types and arrays to their elements; ``types``
    holds the ``pg_type`` rows :func:`load_types` read for them."""
    pg = types[type_oid]
    while pg.kind == "d":  # a domain: its base type, with the modifier the domain gave it
        typmod = pg.base_typmod
        pg = types[pg.base]
    if pg.element:
        element = types[pg.element]
        if element.delimiter != ",":  # box[]: elements separated by ';'
            return _STRING
        spark, arrow, convert = column_type(types, element.oid, typmod)
        return (ArrayType(spark), pa.list_(arrow), partial(_array, convert))
    if pg.kind != "b":  # enum, composite, range, multirange: text
        return _STRING
    if pg.oid == _NUMERIC:
        return _numeric(typmod)
    return _BY_OID.get(pg.oid, _STRING)


def typed_columns(types: Mapping[int, PgType], columns: Sequence[ColumnInfo]
                  ) -> tuple[TypedColumn, ...]:
    """Each column with its Spark type (:func:`column_type`)."""
    return tuple(TypedColumn(c.name, column_type(types, c.type_oid, c.typmod)[0], c.type_oid,
                             c.type_name) for c in columns)


def _arrow_struct(struct: StructType) -> pa.StructType:
    return pa.struct([pa.field(f.name, spark_typed(f.dataType)[1]) for f in struct.fields])
