"""``row_format=struct``'s row images back to the JSON mode's text, byte for byte.

The inverse of :mod:`.types`' values: a typed value is printed as the
Postgres output text it was typed from (in the peek sessions' settings,
:data:`~postgres_cdc_source.pg_types.SESSION_SETTINGS`), and that text goes through the JSON
mode's converter of the column's type
(:func:`~postgres_cdc_source.rows.json.values.converter_for_oid`),
so a rendered image is ``orjson.dumps`` of what the JSON mode converted:
``2024-01-02T03:04:05.5+00:00`` for a timestamptz, base64 for bytea, numeric as a string of
its digits, json/jsonb embedded, a domain's or an enum array's Postgres text as a string.

The JSON converter depends on the column's Postgres type, which the Spark type does not tell
(a string field may be text, jsonb or an interval; an int field an integer or a domain), so
:func:`.structs.struct_schema` puts it in each struct field's
metadata (:data:`PG_TYPE_OID`, :data:`PG_TYPE`). Spark keeps that metadata from the source's
schema into the DataFrame's, so the renderers are built from a DataFrame's schema alone
(:func:`json_rows` on the driver, for ``pg-to-iggy``; public as
``postgres_cdc_source.json_rows``).

What the structs do not keep cannot come back: an array's lower bound other than 1
(``[0:1]={7,8}``) is lost in a struct, so an array of a type that is not built in (the JSON
mode's text, not a list) renders without it.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson
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

from connector_common.change_rows import SPARK_SCHEMA
from postgres_cdc_source.rows.json.values import converter_for_oid

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "PG_TYPE",
    "PG_TYPE_OID",
    "Render",
    "field_metadata",
    "image_renderer",
    "json_batches",
    "json_rows",
    "pg_text",
    "value_renderer",
]

PG_TYPE_OID = "pg_type_oid"
"""A struct field's metadata key: the column's Postgres type OID (a domain's own, not its
base type's), which picks the JSON mode's converter."""
PG_TYPE = "pg_type"
"""A struct field's metadata key: the column's type as ``format_type`` names it (for people)."""

Render = Callable[[Any], Any]
"""A typed value (not ``None``) -> the JSON mode's value, which ``orjson`` serializes."""


def field_metadata(type_oid: int, type_name: str) -> dict[str, Any]:
    """The metadata of a struct field of a column of type ``type_oid`` (``type_name``)."""
    return {PG_TYPE_OID: type_oid, PG_TYPE: type_name}


# --- typed value -> Postgres output text ----------------------------------------------------

_FLOAT_WORDS = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _float_text(digits: str, fixed_below: int) -> str:
    """Shortest round-trip ``digits`` (any notation) as float4out/float8out print them with
    ``extra_float_digits`` above 0: fixed point for exponents from -4 to below
    ``fixed_below``, else ``1.5e+20``, ``1e-05``."""
    value = Decimal(digits)
    if not value:
        return "-0" if value.is_signed() else "0"
    sign, numerals, _ = value.normalize().as_tuple()
    exponent = value.adjusted()
    if -4 <= exponent < fixed_below:
        return format(value.normalize(), "f")
    mantissa = "".join(map(str, numerals))
    mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def _special(value: float) -> str | None:
    return "NaN" if math.isnan(value) else _FLOAT_WORDS.get(value)


def _float8(value: float) -> str:
    return _special(value) or _float_text(repr(value), 15)


def _as_float4(value: float) -> float:
    narrowed: float = struct.unpack("f", struct.pack("f", value))[0]
    return narrowed


def _float4(value: float) -> str:
    special = _special(value)
    if special is not None:
        return special
    value = _as_float4(value)  # as Arrow stores it (a decoder's value, for routing, is wider)
    for places in range(9):  # the shortest digits that read back to the same float4
        digits = f"{value:.{places}e}"
        if _as_float4(float(digits)) == value:
            return _float_text(digits, 6)
    raise ValueError(f"{value!r} is not a float4 value")


def _stamp(value: datetime) -> str:
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
    return text + f".{value.microsecond:06d}".rstrip("0") if value.microsecond else text


def _stamptz(value: datetime) -> str:
    return _stamp((value.astimezone(UTC) if value.tzinfo else value).replace(tzinfo=None)) + "+00"


def _numeric(value: Decimal) -> str:
    """numeric(p, s)'s text: the digits with the scale's places, never an exponent."""
    return format(value, "f")


def _date(value: date) -> str:
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


_QUOTED = frozenset('{},"\\ \t\n\r\v\f')


def _element(text: str | None) -> str:
    """One element as array_out prints it: NULL bare, quoted when it must be."""
    if text is None:
        return "NULL"
    if text == "" or text.upper() == "NULL" or not _QUOTED.isdisjoint(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def pg_text(spark: DataType) -> Callable[[Any], str]:
    """The Postgres output text of a non-null value of ``spark`` as :mod:`.types` typed it:
    the inverse of its converters."""
    if isinstance(spark, (ShortType, IntegerType, LongType)):
        return str
    if isinstance(spark, DecimalType):
        return _numeric
    if isinstance(spark, DoubleType):
        return _float8
    if isinstance(spark, FloatType):
        return _float4
    if isinstance(spark, BooleanType):
        return {True: "t", False: "f"}.__getitem__
    if isinstance(spark, StringType):
        return str
    if isinstance(spark, BinaryType):
        return lambda value: "\\x" + bytes(value).hex()
    if isinstance(spark, DateType):
        return _date
    if isinstance(spark, TimestampNTZType):
        return _stamp
    if isinstance(spark, TimestampType):
        return _stamptz
    if isinstance(spark, ArrayType):
        element = pg_text(spark.elementType)
        return lambda items: "{" + ",".join(
            _element(None if v is None else element(v)) for v in items) + "}"
    raise ValueError(f"row_format=struct has no {spark.simpleString()} field")


# --- typed value -> the JSON mode's value -----------------------------------------------------

def value_renderer(type_oid: int, spark: DataType) -> Render:
    """A value of a column of ``type_oid`` typed as ``spark`` -> the JSON mode's value of the
    same column: its converter of the value's Postgres text."""
    convert = converter_for_oid(type_oid)
    if isinstance(spark, StringType) and convert in (str, orjson.Fragment):
        return convert  # the text itself, or embedded as JSON (json, jsonb)
    if isinstance(spark, (ShortType, IntegerType, LongType)) and convert is int:
        return convert
    text = pg_text(spark)
    return lambda value: convert(text(value))


def image_renderer(row: StructType, renderer: Callable[[int, DataType], Render] = value_renderer
                   ) -> Callable[[Mapping[str, Any] | None, Sequence[str]], str | None]:
    """A row image of ``row`` (a struct of ``pg_cdc``'s, its fields' metadata naming their
    Postgres types) and the names of its unchanged TOAST columns -> the JSON mode's text of
    it (``None`` for ``None``); unchanged columns are left out, as the JSON mode does.
    ``renderer`` makes a field's value the JSON mode's: of a typed value by default; a change's
    images before their batch is built hold some values as text
    (:func:`.images.image_json`).

    Raises :class:`ValueError` naming a field without its Postgres type.
    """
    fields = []
    for f in row.fields:
        if PG_TYPE_OID not in f.metadata:
            raise ValueError(f"field {f.name!r} does not name its Postgres type (metadata "
                             f"{PG_TYPE_OID!r}): only pg_cdc's structs render as its JSON")
        fields.append((f.name, renderer(int(f.metadata[PG_TYPE_OID]), f.dataType)))
    dumps = orjson.dumps

    def render(image: Mapping[str, Any] | None, unchanged: Sequence[str]) -> str | None:
        if image is None:
            return None
        out = {}
        for name, value in fields:
            if name in unchanged:
                continue
            typed = image[name]
            out[name] = None if typed is None else value(typed)
        return dumps(out).decode()

    return render


# --- a pg_cdc stream's rows -> the JSON mode's rows ----------------------------------------------

_IMAGES = ("key", "before", "after")


def json_batches(schema: StructType) -> Callable[[Iterator[pa.RecordBatch]],
                                                 Iterator[pa.RecordBatch]]:
    """``mapInArrow``'s function turning batches of rows of ``schema`` (``pg_cdc``'s with
    ``row_format=struct``) into the JSON mode's: ``key``/``before``/``after`` as its text."""

    def to_json(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        renders = {name: image_renderer(_struct(schema, name)) for name in _IMAGES}
        for batch in batches:
            unchanged = [u or () for u in batch.column("unchanged").to_pylist()]
            columns = list(batch.columns)
            text = batch.schema.field("op").type  # string or large_string, as Spark sends it
            for name in _IMAGES:
                i = batch.schema.get_field_index(name)
                render = renders[name]
                images = batch.column(i).to_pylist()
                rendered = ([render(v, u) for v, u in zip(images, unchanged, strict=True)]
                            if name == "after" else [render(v, ()) for v in images])
                columns[i] = pa.array(rendered, text)
            yield pa.RecordBatch.from_arrays(
                columns, schema=pa.schema([f.with_type(text) if f.name in _IMAGES else f
                                           for f in batch.schema]))

    return to_json


def _struct(schema: StructType, name: str) -> StructType:
    struct = schema[name].dataType
    if not isinstance(struct, StructType):
        raise ValueError(f"column {name!r} is {struct.simpleString()}, not a struct: "
                         "the rows are not row_format=struct's")
    return struct


def json_rows(changes: DataFrame) -> DataFrame:
    """``changes`` (a ``pg_cdc`` stream with ``row_format=struct``) with ``key``, ``before``
    and ``after`` as the JSON mode's text, byte for byte: the JSON mode's rows."""
    schema = changes.schema
    return changes.mapInArrow(json_batches(schema), SPARK_SCHEMA)
