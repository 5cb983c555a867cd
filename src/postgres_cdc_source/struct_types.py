"""Postgres column types as Spark types, and column text as typed values (``row_format=struct``).

A column's Spark type comes from the catalog (:func:`table_struct` reads the table's columns
with :data:`~postgres_cdc_source.catalog.CATALOG_QUERY` and :func:`load_types` their
``pg_type`` rows, the base types of domains and the element types of arrays; the rules are
pure, in :func:`column_type`):

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
(:mod:`postgres_cdc_source.values`) read, in the same session settings, so a struct field holds
what the JSON mode's value means: tests parse both and compare them type by type. Most are
converted as they are decoded; decimals, dates and timestamps (not arrays of them) keep their
text in a change's images and Arrow casts them a column at a time when the batch is built
(:func:`image_converter`, :func:`image_array`). A value the Spark type cannot hold fails with
:class:`ValueError` naming it, never a silent null or a rounded number: ``NaN`` in a decimal
column, a date or timestamp that is infinite, BC or after the year 9999, an array of more than
one dimension.

A table's columns change under a query (``schema_evolution``): with ``fail`` a change must have
the columns the query started with (:meth:`StructRows.retyped`), and a restart on the checkpoint
is refused naming the difference (:func:`checkpoint_difference`); with ``add_columns`` changes
are typed by column name and a restart evolves the structs to their union over time
(:meth:`StructRows.evolved`, :func:`widens`), so that every row the query delivered fits the
struct it delivers now.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from typing import Any, NamedTuple

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
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
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connector_common.change_rows import typed_schemas
from postgres_cdc_source import partitions
from postgres_cdc_source.catalog import ColumnInfo, table_info
from postgres_cdc_source.decoding.changes import RowShape
from postgres_cdc_source.errors import ConfigError, SchemaChangedError
from postgres_cdc_source.struct_json import (
    PG_TYPE,
    PG_TYPE_OID,
    field_metadata,
    value_renderer,
)
from postgres_cdc_source.values import builtin_types, converter_for_oid, parse_array

__all__ = [
    "TYPES_QUERY",
    "PgType",
    "StructRows",
    "TableStruct",
    "TypedColumn",
    "UnconvertibleValue",
    "captured_now",
    "checkpoint_difference",
    "column_type",
    "image_array",
    "image_converter",
    "image_json",
    "load_types",
    "spark_typed",
    "struct_rows",
    "struct_schema",
    "table_struct",
    "typed_columns",
    "widens",
]

TYPES_QUERY = """\
SELECT t.oid::int8, t.typname::text, t.typtype::text, t.typbasetype::int8, t.typtypmod,
       CASE WHEN t.typcategory = 'A' THEN t.typelem::int8 ELSE 0 END, t.typdelim::text
FROM pg_catalog.pg_type AS t
WHERE t.oid = ANY (%s)"""
"""``pg_type`` rows of the OIDs given (an ``int8[]`` parameter), for :class:`PgType`."""


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
_BY_OID: dict[int, _Typed] = {
    16: (BooleanType(), pa.bool_(), _bool),
    17: (BinaryType(), pa.binary(), _bytea),
    18: _STRING,  # "char"
    19: _STRING,  # name
    20: (LongType(), pa.int64(), int),
    21: (ShortType(), pa.int16(), int),
    23: (IntegerType(), pa.int32(), int),
    25: _STRING,  # text
    26: (LongType(), pa.int64(), int),  # oid: unsigned 32-bit
    114: _STRING,  # json: its text
    700: (FloatType(), pa.float32(), _float),
    701: (DoubleType(), pa.float64(), _float),
    1042: _STRING,  # character(n)
    1043: _STRING,  # character varying
    1082: (DateType(), pa.date32(), _date),
    1114: (TimestampNTZType(), pa.timestamp("us"), _timestamp),
    1184: (TimestampType(), pa.timestamp("us", tz="UTC"), _timestamptz),
    2950: _STRING,  # uuid
    3802: _STRING,  # jsonb: its text
}
_NUMERIC = 1700
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


def load_types(conn: psycopg.Connection[Any], oids: Iterable[int]) -> dict[int, PgType]:
    """The ``pg_type`` rows of ``oids`` and of every type they lead to (domains' base types,
    arrays' elements), read with :data:`TYPES_QUERY`."""
    types: dict[int, PgType] = {}
    wanted = set(oids)
    while wanted:
        rows = conn.execute(TYPES_QUERY, (sorted(wanted),)).fetchall()
        found = [PgType(int(oid), str(name), str(kind), int(base), int(base_typmod),
                        int(element), str(delimiter))
                 for oid, name, kind, base, base_typmod, element, delimiter in rows]
        missing = wanted - {t.oid for t in found}
        if missing:
            raise ValueError(f"type OIDs {sorted(missing)} are not in pg_type")
        types.update((t.oid, t) for t in found)
        wanted = {o for t in found for o in (t.base, t.element) if o and o not in types}
    return types


def typed_columns(types: Mapping[int, PgType], columns: Sequence[ColumnInfo]
                  ) -> tuple[TypedColumn, ...]:
    """Each column with its Spark type (:func:`column_type`)."""
    return tuple(TypedColumn(c.name, column_type(types, c.type_oid, c.typmod)[0], c.type_oid,
                             c.type_name) for c in columns)


def table_struct(conn: psycopg.Connection[Any], schema: str, table: str, *,
                 generated: bool = False) -> TableStruct | None:
    """The table's :class:`TableStruct` as the catalog describes it now (``None`` if it is
    gone; ``generated``: its stored generated columns too): run in a session with the peek
    sessions' settings."""
    info = table_info(conn, schema, table, generated=generated)
    if info is None:
        return None
    published = [c for c in info.columns if not c.generated]
    types = load_types(conn, {c.type_oid for c in published})
    attnums = dict(conn.execute(_ATTNUMS, (schema, table)).fetchall())
    return TableStruct(typed_columns(types, published),
                       tuple(c.name for c in published if c.key),
                       tuple(int(attnums[c.name]) for c in published))


_ATTNUMS = """\
SELECT a.attname::text, a.attnum::int FROM pg_catalog.pg_attribute AS a
JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped"""


def struct_schema(tables: Mapping[str, TableStruct]) -> tuple[StructType, StructType]:
    """The structs of ``before``/``after`` and of ``key`` for the tables named
    (``schema.table``): their columns, which must be the same names with the same Spark types
    in the same order, of Postgres types the JSON mode writes alike, and the same key columns.
    Each field's metadata names its column's Postgres type
    (:func:`~postgres_cdc_source.struct_json.field_metadata`), from which
    :mod:`~postgres_cdc_source.struct_json` renders the JSON mode's text again.

    Raises :class:`ValueError` naming two tables and their first difference otherwise.
    """
    if not tables:
        raise ValueError("no table is captured: row_format=struct needs one (include_tables)")
    (first, ours), *others = tables.items()
    shape = [(c.name, c.spark) for c in ours.columns]
    for name, other in others:
        theirs = [(c.name, c.spark) for c in other.columns]
        if theirs != shape:
            raise ValueError(f"row_format=struct needs tables of one shape, but {first} and "
                             f"{name} differ: {_difference(shape, theirs)}")
        for a, b in zip(ours.columns, other.columns, strict=True):
            if converter_for_oid(a.type_oid) is not converter_for_oid(b.type_oid):
                raise ValueError(
                    f"row_format=struct needs tables of one shape, but {first} and {name} "
                    f"differ: column {a.name!r} is {a.type_name} in the first, {b.type_name} "
                    "in the second (one Spark type, but not the same JSON)")
        if other.key != ours.key:
            raise ValueError(f"row_format=struct needs tables of one shape, but {first} and "
                             f"{name} differ: the key is {_names(ours.key)} in the first, "
                             f"{_names(other.key)} in the second")
    row = StructType([StructField(c.name, c.spark, metadata=field_metadata(c.type_oid,
                                                                           c.type_name))
                      for c in ours.columns])
    return row, StructType([row[n] for n in ours.key])


def _names(names: Sequence[str]) -> str:
    return f"({', '.join(map(repr, names))})" if names else "none"


def _difference(ours: list[tuple[str, DataType]], theirs: list[tuple[str, DataType]]) -> str:
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a[0] != b[0]:
            return f"column {i + 1} is {a[0]!r} in the first, {b[0]!r} in the second"
        if a[1] != b[1]:
            return (f"column {a[0]!r} is {a[1].simpleString()} in the first, "
                    f"{b[1].simpleString()} in the second")
    longer, extra = (ours, "first") if len(ours) > len(theirs) else (theirs, "second")
    return (f"the {extra} has more columns: "
            f"{', '.join(repr(n) for n, _ in longer[min(len(ours), len(theirs)):])}")


# --- a change's images: most values typed as decoded, the rest cast by Arrow per batch ----------

_CAST: dict[pa.DataType, Callable[[str], Any]] = {
    pa.date32(): _date,
    pa.timestamp("us"): _timestamp,
    pa.timestamp("us", tz="UTC"): _timestamptz,
}


def _cast_converter(arrow: pa.DataType) -> Callable[[str], Any] | None:
    """The converter of a field of ``arrow`` whose values a change's image keeps as their
    Postgres text, for Arrow to cast when the batch is built (``None``: typed as decoded)."""
    if pa.types.is_decimal(arrow):
        return partial(_decimal, arrow.precision, arrow.scale)
    return _CAST.get(arrow)


def image_converter(spark: DataType) -> Callable[[str], Any]:
    """The converter the decoders apply to the output text of a field of ``spark``: its typed
    value, or for a decimal, date or timestamp the text itself, which :func:`image_array`
    casts when the batch is built. Arrow casts a column of them four to five times faster than
    ``Decimal`` and ``datetime`` convert them one by one, which was most of what typed rows
    cost over JSON text; a property test pins that its casts give the converters' values for
    every text Postgres prints in the peek sessions' settings and refuse what they refuse."""
    return str if _kept_as_text(spark) else spark_typed(spark)[2]


def _kept_as_text(spark: DataType) -> bool:
    """Whether a change's image keeps a value of ``spark`` as its Postgres text."""
    return _cast_converter(spark_typed(spark)[1]) is not None


class UnconvertibleValue(ValueError):
    """A value of a row image that its field's type cannot hold (:func:`image_array`): the
    row's index in the batch, the field and the Postgres text; the converter's
    :class:`ValueError` is the cause."""

    def __init__(self, row: int, column: str, text: str) -> None:
        super().__init__(f"row {row}, column {column!r}: cannot convert {text[:80]!r}")
        self.row = row
        self.column = column
        self.text = text


def image_array(images: Sequence[Mapping[str, Any] | None], arrow: pa.StructType) -> pa.Array:
    """A ``key``/``before``/``after`` column of ``arrow`` from the changes' images, dicts of
    :func:`image_converter`'s values (a field a dict lacks is null): the fields whose values
    are still text are built as text and cast. A column Arrow refuses is converted one value
    at a time, so a value its type cannot hold fails as in the decoders: an
    :class:`UnconvertibleValue` from the converter's :class:`ValueError`."""
    casts = {i: _cast_converter(f.type) for i, f in enumerate(arrow)}
    if not any(casts.values()):
        return pa.array(images, arrow)
    texts = pa.array(images, pa.struct([f.with_type(pa.string()) if casts[i] else f
                                        for i, f in enumerate(arrow)]))
    children = []
    for i, (field, child) in enumerate(zip(arrow, texts.flatten(), strict=True)):
        convert = casts[i]
        children.append(child if convert is None else _cast(child, field, convert))
    return pa.StructArray.from_arrays(children, fields=list(arrow), mask=texts.is_null())


def _cast(texts: pa.Array, field: pa.Field, convert: Callable[[str], Any]) -> pa.Array:
    """``texts`` cast to ``field``'s type; one by one where Arrow refuses one, or where a
    decimal may need more than the 38 digits a decimal holds (:func:`_decimal_digits`): Arrow
    reads and rescales them in 128 bits without checking (``1.`` and 40 zeros became 0, and so
    did a 13-digit integer cast to ``decimal(28, 28)``), so the converter checks them."""
    if pa.types.is_decimal(field.type) and _decimal_digits(texts, field.type.scale) > (
            _MAX_PRECISION):
        return _one_by_one(texts, field, convert)
    try:
        return texts.cast(field.type)
    except pa.ArrowInvalid:
        return _one_by_one(texts, field, convert)


def _decimal_digits(texts: pa.Array, scale: int) -> int:
    """The most digits Arrow works with to cast one of ``texts`` (plain decimal text) to a
    decimal of ``scale``: those before the point, and the text's places or ``scale``,
    whichever is more (it rescales the one to the other)."""
    length = pc.utf8_length(texts)
    point = pc.find_substring(texts, ".")
    places = pc.if_else(pc.less(point, 0), 0, pc.subtract(pc.subtract(length, point), 1))
    whole = pc.subtract(pc.if_else(pc.less(point, 0), length, point),
                        pc.starts_with(texts, "-").cast(pa.int32()))
    most = pc.max(pc.add(whole, pc.max_element_wise(places, scale))).as_py()
    return int(most or 0)


def _one_by_one(texts: pa.Array, field: pa.Field, convert: Callable[[str], Any]) -> pa.Array:
    values = texts.to_pylist()
    for row, text in enumerate(values):
        if text is not None:
            try:
                values[row] = convert(text)
            except (ValueError, ArithmeticError) as exc:  # decimal's errors are arithmetic
                raise UnconvertibleValue(row, field.name, text) from exc
    return pa.array(values, field.type)


def image_json(type_oid: int, spark: DataType) -> Callable[[Any], Any]:
    """A value of a column of ``type_oid`` typed as ``spark``, as a change's image holds it
    (:func:`image_converter`) -> the JSON mode's value of the same column: for routing, and
    for matching keys, before the batch is built."""
    if _kept_as_text(spark):
        return converter_for_oid(type_oid)  # still the Postgres text the JSON mode converts
    return value_renderer(type_oid, spark)


# --- the query's structs ----------------------------------------------------------------------

def _as_is(image: dict[str, Any]) -> dict[str, Any]:
    return image


class StructRows(NamedTuple):
    """What a ``row_format=struct`` query fixed when it started: its tables' typed columns
    (``schema.table``, as the catalog described them then), the struct of ``before``/``after``
    and of ``key``, as Spark and Arrow types, and ``schema_evolution`` (``evolution``), which
    decides how a change is typed (:meth:`retyped`). With ``add_columns`` the row struct may
    have more fields than the tables have columns: those a restart kept for columns dropped or
    renamed since an earlier run (:meth:`evolved`). Picklable: the reader takes it to the
    executors."""

    tables: Mapping[str, TableStruct]
    row: StructType
    key: StructType
    row_arrow: pa.StructType
    key_arrow: pa.StructType
    evolution: str = "fail"

    @classmethod
    def of(cls, tables: Mapping[str, TableStruct], evolution: str = "fail") -> StructRows:
        """The structs of ``tables`` (``schema.table``), which must be of one shape
        (:func:`struct_schema`, whose :class:`ValueError` says how they differ)."""
        row, key = struct_schema(tables)
        return cls._made(tables, row, key, evolution)

    @classmethod
    def _made(cls, tables: Mapping[str, TableStruct], row: StructType, key: StructType,
              evolution: str) -> StructRows:
        return cls(dict(tables), row, key, _arrow_struct(row), _arrow_struct(key), evolution)

    def schemas(self) -> tuple[StructType, pa.Schema]:
        """The change rows' Spark and Arrow schemas with these structs."""
        return typed_schemas(self.row, self.key, self.row_arrow, self.key_arrow)

    def retyped(self, shape: RowShape, *, whole: bool = True,
                types: Sequence[int | str] | None = None) -> RowShape:
        """``shape`` (as a decoder or reader built it for the JSON mode) with the converters
        of the row struct's fields (:func:`image_converter`), its row images dicts of their
        values: with :func:`image_array`, which casts the decimals, dates and timestamps when
        the batch is built, the one place a change's values become typed.

        ``whole``: ``shape`` has every column of the table (not an old key's columns);
        ``types``: the columns' type OIDs (pgoutput) or names (test_decoding), when known.
        With ``schema_evolution=fail`` a change must have the columns (names and types) its
        table had when the query started. With ``add_columns`` it is typed by column name:
        its columns must be fields of the struct, each of the field's type or of one the
        field's type widens (:func:`widens`: the changes written before a column was
        widened), and the fields it lacks are null (the changes written before a column was
        added, or after one was dropped or renamed). A table that is not the query's, or a
        change that cannot be typed so, gets a shape that raises :class:`SchemaChangedError`
        at its first change, so the changes before it go out.
        """
        name = f"{shape.schema}.{shape.table}"
        table = self.tables.get(name)
        if table is None:
            return _changed(shape, SchemaChangedError(
                name, "the table was not captured when the query started (it is new, or "
                "include_tables/exclude_tables now cover it)"))
        if self.evolution == "add_columns":
            difference = _untypable(self.row, table, shape.names, whole, types)
        else:
            difference = _column_difference(table, shape.names, whole, types)
        if difference is not None:
            return _changed(shape, SchemaChangedError(name, difference))
        fields = {f.name: f for f in self.row.fields}
        return RowShape(shape.schema, shape.table, shape.names,
                        [image_converter(fields[n].dataType) for n in shape.names], shape.key,
                        shape.keep, _as_is)

    def stamp(self) -> dict[str, Any]:
        """The structs as JSON, for the query's offsets (:func:`checkpoint_difference` reads
        them back when the query restarts) and its ``schema_location``
        (:mod:`postgres_cdc_source.struct_history`), with each table's columns' attnums, so
        that a restart tells a rename from a drop and an add."""
        return {"row": self.row.jsonValue(), "key": self.key.jsonValue(),
                "attnums": {name: dict(zip([c.name for c in table.columns], table.attnums,
                                           strict=True))
                            for name, table in self.tables.items() if table.attnums}}

    def evolved(self, written: Mapping[str, Any]) -> StructRows:
        """These structs (the tables' columns now) as ``schema_evolution=add_columns`` makes
        them from those an earlier run ``written`` (:meth:`stamp`): the union over time, so
        that every row the query ever delivered fits the struct it delivers now. The earlier
        fields keep their place: a column still there takes its type now, which must widen
        the earlier one (:func:`widens`); a column dropped or renamed keeps its field, null
        from then on. The columns the earlier struct lacks (added, or a rename's new name)
        follow, in table order. The key must be the same columns.

        Raises :class:`ValueError` naming the table, the column and both types, or both keys,
        and the way out, otherwise.
        """
        was = StructType.fromJson(written["row"])
        was_key = StructType.fromJson(written["key"])
        table = next(iter(self.tables))  # tables of one shape: the first stands for all
        now = {f.name: f for f in self.row.fields}
        fields = []
        for field in was.fields:
            new = now.get(field.name)
            if new is None:  # dropped or renamed: kept, null from now on
                fields.append(field)
                continue
            if not widens(field, new):
                raise ValueError(
                    f"table {table}, column {field.name!r}: {_described(field)} in the "
                    f"earlier structs cannot become {_described(new)}: schema_evolution="
                    "add_columns takes only a type that keeps every value and its JSON "
                    "(smallint to integer to bigint, real to double precision, a numeric "
                    "with as many digits before and after the point, varchar to a longer "
                    f"varchar or text); {_NEW_CHECKPOINT}")
            fields.append(new)
        fields += [f for f in self.row.fields if f.name not in set(was.names)]
        if was_key.names != self.key.names:
            raise ValueError(
                f"table {table}: the key is {_names(was_key.names)} in the earlier structs, "
                f"{_names(self.key.names)} now: schema_evolution=add_columns cannot change a "
                f"key; {_NEW_CHECKPOINT}")
        row = StructType(fields)
        return self._made(self.tables, row, StructType([row[n] for n in self.key.names]),
                          self.evolution)


_NEW_CHECKPOINT = ("start the query on a new checkpoint with the same slot (it goes on from "
                   "the last delivered change with the columns as they are now)")

_INTEGERS: tuple[DataType, ...] = (ShortType(), IntegerType(), LongType())


def widens(was: StructField, now: StructField) -> bool:
    """Whether a struct field ``was`` may become ``now`` (their Postgres types in their
    metadata, :func:`~postgres_cdc_source.struct_json.field_metadata`) with every value kept
    and written as the same JSON: the JSON mode converts both types alike (the JSON that
    ``struct_json`` renders follows the field's type, the wider one for older changes too),
    and the Spark type is the same (``varchar`` to ``text``) or wider: ``smallint`` to
    ``integer`` to ``bigint``, ``real`` to ``double precision``, a decimal with at least as
    many digits before and after the point."""
    if converter_for_oid(was.metadata.get(PG_TYPE_OID, 0)) is not converter_for_oid(
            now.metadata.get(PG_TYPE_OID, 0)):
        return False
    a, b = was.dataType, now.dataType
    if a == b:
        return True
    if a in _INTEGERS and b in _INTEGERS:
        return _INTEGERS.index(a) <= _INTEGERS.index(b)
    if isinstance(a, FloatType) and isinstance(b, DoubleType):
        return True
    if isinstance(a, DecimalType) and isinstance(b, DecimalType):
        return b.scale >= a.scale and b.precision - b.scale >= a.precision - a.scale
    return False


def _described(field: StructField) -> str:
    return f"{field.metadata.get(PG_TYPE, '?')} ({field.dataType.simpleString()})"


def _arrow_struct(struct: StructType) -> pa.StructType:
    return pa.struct([pa.field(f.name, spark_typed(f.dataType)[1]) for f in struct.fields])


_OID_BY_NAME = {name: oid for oid, _, name in builtin_types()}
_NAME_BY_OID = {oid: name for oid, _, name in builtin_types()}


def _type_text(pg: int | str) -> str:
    if isinstance(pg, str):
        return pg
    return _NAME_BY_OID.get(pg, f"type OID {pg}")


def _takes(field: StructField, pg: int | str) -> bool:
    """Whether ``field`` types a column of the Postgres type ``pg`` (an OID, or a
    ``format_type`` name): its own, or a built-in type it widens (an older change's)."""
    oid = pg if isinstance(pg, int) else _OID_BY_NAME.get(pg)
    if oid == field.metadata.get(PG_TYPE_OID) or pg == field.metadata.get(PG_TYPE):
        return True
    typed = None if oid is None else _BY_OID.get(oid)  # built in: no catalog at hand here
    return typed is not None and widens(
        StructField(field.name, typed[0], metadata=field_metadata(oid or 0, _type_text(pg))),
        field)


def checkpoint_difference(written: Mapping[str, Any] | None, typed: StructRows | None,
                          evolution: str, location: bool = False, row_format: str = "json"
                          ) -> str | None:
    """Why a query restarted on a checkpoint whose offsets carry ``written``
    (:meth:`StructRows.stamp`; ``None``: a ``row_format=json`` or ``variant`` query's, whose
    offsets carry no structs) cannot go on with ``typed`` under ``schema_evolution=evolution``;
    ``None`` if it can: the same structs, or with ``add_columns`` structs ``written`` evolves
    to (:meth:`StructRows.evolved`). ``location``: ``schema_location`` is set (the reader then
    keeps the checkpoint's structs there, so that the next ``load()`` gives their fields);
    ``row_format``: the restarted query's, named when ``typed`` is ``None`` (not ``struct``)."""
    if written is None and typed is None:
        return None
    if written is None or typed is None:
        was, now = ("json or variant", "struct") if written is None else ("struct", row_format)
        return (f"the checkpoint was written by a row_format={was} query, this one is "
                f"row_format={now}: start it on a new checkpoint")
    row, key = StructType.fromJson(written["row"]), StructType.fromJson(written["key"])
    if row == typed.row and key == typed.key:
        return None
    difference = _checkpoint_kinds(written, typed)
    if evolution != "add_columns":
        return (f"the tables' columns differ from the structs this checkpoint was written "
                f"with: {difference}. Restart with schema_evolution=add_columns to evolve the "
                "structs (columns added are appended, types widened; columns dropped or "
                "renamed stay as null fields with schema_location), or on a new checkpoint "
                "with the same slot (it goes on from the last delivered change with the "
                "columns as they are now)")
    try:
        evolved = typed.evolved(written)
    except ValueError as exc:
        return str(exc)
    if _shape(evolved.row) == _shape(typed.row):
        return None
    kept = [n for n in evolved.row.names if n not in typed.row.names]
    if kept:
        return (f"the tables' columns differ from the structs this checkpoint was written "
                f"with: {difference}. schema_evolution=add_columns keeps "
                f"{', '.join(map(repr, kept))} as null fields only if load() gives them, "
                "which it reads from schema_location (Spark fixes a source's schema at load(), "
                "before the query reads its checkpoint): "
                + ("this checkpoint's structs are written there now, restart the query on it"
                   if location else "set it and restart twice (the first restart writes this "
                   "checkpoint's structs there, the next takes them)")
                + f"; or {_NEW_CHECKPOINT}")
    return (f"the struct fields are in another order than in the checkpoint's structs "
            f"({', '.join(map(repr, evolved.row.names))}, "
            f"{', '.join(map(repr, typed.row.names))} now: schema_location holds another "
            f"query's structs?); {_NEW_CHECKPOINT}")


def _shape(struct: StructType) -> list[tuple[str, DataType]]:
    return [(f.name, f.dataType) for f in struct.fields]


def _renamed_since(written: Mapping[str, Any], typed: StructRows) -> dict[str, str]:
    """The columns renamed since ``written`` (old name -> new), told by their attnums; none
    when ``written`` has no attnums (then a rename looks like a drop and an add)."""
    attnums: Mapping[str, Mapping[str, int]] = written.get("attnums") or {}
    for name, table in typed.tables.items():
        was = attnums.get(name)
        if not was or not table.attnums:
            continue
        now = dict(zip(table.attnums, (c.name for c in table.columns), strict=True))
        return {old: now[a] for old, a in was.items()
                if a in now and now[a] != old and old not in now.values()}
    return {}


def _checkpoint_kinds(written: Mapping[str, Any], typed: StructRows) -> str:
    """How the structs ``written`` differ from ``typed``, by kind of change."""
    row, key = StructType.fromJson(written["row"]), StructType.fromJson(written["key"])
    was = {f.name: f for f in row.fields}
    now = {f.name: f for f in typed.row.fields}
    renamed = _renamed_since(written, typed)
    added = [n for n in now if n not in was and n not in renamed.values()]
    dropped = [n for n in was if n not in now and n not in renamed]
    retyped = [f"{n!r} ({_described(f)} in the checkpoint, {_described(now[n])} now)"
               for n, f in was.items()
               if n in now and (f.dataType, f.metadata.get(PG_TYPE)) != (
                   now[n].dataType, now[n].metadata.get(PG_TYPE))]
    parts = ([f"columns added: {', '.join(map(repr, added))}"] if added else []) + (
        [f"columns dropped: {', '.join(map(repr, dropped))}"] if dropped else []) + [
        f"column renamed: {a!r} to {b!r}" for a, b in renamed.items()] + (
        [f"type changed: {', '.join(retyped)}"] if retyped else []) + (
        [f"the key is {key.simpleString()} in the checkpoint, {typed.key.simpleString()} now"]
        if key.names != typed.key.names else [])
    return "; ".join(parts) or "the columns are in another order"


def _changed(shape: RowShape, error: SchemaChangedError) -> RowShape:
    return RowShape(shape.schema, shape.table, shape.names, shape.converters, shape.key,
                    shape.keep, _as_is, error)


def _not_in_struct(unknown: Sequence[str], names: Sequence[str], known: Collection[str]
                   ) -> list[str]:
    """The kinds of the columns ``unknown`` of a change (``names``) the struct lacks: added
    (at the end, where ``ALTER TABLE ... ADD COLUMN`` puts a column), or before a column the
    struct has, so written before a drop or rename the query had not read up to when it
    started (its structs, read from the catalog then, lack the column)."""
    last_known = max((i for i, n in enumerate(names) if n in known), default=-1)
    older = [n for n in unknown if names.index(n) < last_known]
    added = [n for n in unknown if n not in older]
    parts = []
    if added:
        parts.append(f"column{'s' if len(added) > 1 else ''} added: "
                     f"{', '.join(map(repr, added))}")
    if older:
        parts.append(
            f"column{'s' if len(older) > 1 else ''} {', '.join(map(repr, older))} not in the "
            "struct, before columns that are: this change was written before an ALTER TABLE "
            "dropped or renamed it, which the query had not read up to when it started (it "
            "read the table's columns from the catalog then); a query on a new checkpoint "
            "cannot type the changes written before a drop it has not read: read them on "
            "the checkpoint that has read up to them, or with row_format=json")
    return parts


def _renamed_in(table: TableStruct, names: Sequence[str], whole: bool, known: Collection[str]
             ) -> dict[str, str]:
    """The columns a change (``names``) has under another name than ``table`` had when the
    query started (that name -> the change's), by place: as many columns, and at the place of
    one the change lacks, one ``known`` lacks (a change carries no attnums)."""
    if not whole or len(names) != len(table.columns):
        return {}
    return {c.name: n for c, n in zip(table.columns, names, strict=True)
            if c.name != n and n not in known and c.name not in names}


def _untypable(row: StructType, table: TableStruct, names: Sequence[str], whole: bool,
               types: Sequence[int | str] | None) -> str | None:
    """Why a change of the columns ``names`` (``types``) cannot be typed by name with the
    fields of ``row`` (``schema_evolution=add_columns``), ``None`` if it can."""
    fields = {f.name: f for f in row.fields}
    renamed = _renamed_in(table, names, whole, fields)
    parts = _not_in_struct([n for n in names if n not in fields and n not in renamed.values()],
                           names, fields)
    parts += [f"column renamed: {a!r} to {b!r}" for a, b in renamed.items()]
    if types is not None:
        parts += [f"column {n!r} type changed from {fields[n].metadata.get(PG_TYPE)} to "
                  f"{_type_text(t)}" for n, t in zip(names, types, strict=True)
                  if n in fields and not _takes(fields[n], t)]
    return "; ".join(parts) or None


def _column_difference(table: TableStruct, names: Sequence[str], whole: bool,
                       types: Sequence[int | str] | None) -> str | None:
    """What differs between the columns a query started with and ``names`` (``types``),
    ``None`` if nothing does."""
    started = {c.name: c for c in table.columns}
    renamed = _renamed_in(table, names, whole, started)
    parts = _not_in_struct([n for n in names if n not in started
                            and n not in renamed.values()], names, started)
    dropped = [c.name for c in table.columns
               if c.name not in names and c.name not in renamed] if whole else []
    if dropped:
        parts.append(f"column{'s' if len(dropped) > 1 else ''} dropped: "
                     f"{', '.join(map(repr, dropped))}")
    parts += [f"column renamed: {a!r} to {b!r}" for a, b in renamed.items()]
    for i, n in enumerate(names):
        column = started.get(n)
        if column is None or types is None:
            continue
        now = types[i]
        was = column.type_oid if isinstance(now, int) else column.type_name
        if was and now != was:
            parts.append(f"column {n!r} type changed from {_type_text(was)} to "
                         f"{_type_text(now)}")
    return "; ".join(parts) or None


def captured_now(conn: psycopg.Connection[Any], keeps: Callable[[str, str], bool]
                 ) -> list[tuple[str, str]]:
    """The tables ``keeps`` (the include/exclude rules) covers now, in name order: a
    partitioned table whole, its partitions not on their own (their changes name it)."""
    return [t.named for t in partitions.captured(partitions.relations(conn), keeps)]


def struct_rows(conn: psycopg.Connection[Any], keeps: Callable[[str, str], bool],
                evolution: str = "fail", *, generated: bool = False) -> StructRows:
    """The :class:`StructRows` of the tables ``keeps`` (the include/exclude rules) covers, as
    the catalog describes them now, typing changes as ``schema_evolution=evolution`` does;
    :class:`ConfigError` (option ``row_format``) when there are none or they differ
    (:func:`struct_schema`)."""
    tables: dict[str, TableStruct] = {}
    for schema, table in captured_now(conn, keeps):
        typed = table_struct(conn, schema, table, generated=generated)
        if typed is not None:
            tables[f"{schema}.{table}"] = typed
    try:
        return StructRows.of(tables, evolution)
    except ValueError as exc:
        raise ConfigError("row_format", f"struct: {exc} (include_tables picks the tables)"
                          ) from None
