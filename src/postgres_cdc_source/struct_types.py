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
what the JSON mode's value means: tests parse both and compare them type by type. A value the
Spark type cannot hold fails with :class:`ValueError` naming it, never a silent null or a
rounded number: ``NaN`` in a decimal column, a date or timestamp that is infinite, BC or after
the year 9999, an array of more than one dimension.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from typing import Any, NamedTuple

import psycopg
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
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connector_common.change_rows import typed_schemas
from postgres_cdc_source.catalog import ColumnInfo, table_info
from postgres_cdc_source.decoding.changes import RowShape
from postgres_cdc_source.errors import ConfigError, SchemaChangedError
from postgres_cdc_source.struct_json import PG_TYPE, field_metadata
from postgres_cdc_source.values import converter_for_oid, parse_array

__all__ = [
    "TYPES_QUERY",
    "PgType",
    "StructRows",
    "TableStruct",
    "TypedColumn",
    "captured_now",
    "checkpoint_difference",
    "column_type",
    "load_types",
    "struct_rows",
    "struct_schema",
    "table_struct",
    "typed_columns",
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
    """A column's Spark and Arrow types, the converter of its output text, and its Postgres
    type as pgoutput (OID) and test_decoding (``format_type`` name) name it."""

    name: str
    spark: DataType
    arrow: pa.DataType
    convert: Callable[[str], Any]
    type_oid: int = 0
    type_name: str = ""


class TableStruct(NamedTuple):
    """A table's columns as the decoders deliver them (generated ones are not sent), typed,
    and the names of its replica-identity columns (``key``), in column order."""

    columns: tuple[TypedColumn, ...]
    key: tuple[str, ...]


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
    _sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    extra = -exponent - scale  # decimal places beyond the scale: zeros only
    if extra > 0 and any(digits[-extra:]):
        raise ValueError(f"{text!r} has more than {scale} decimal places")
    if value and value.adjusted() >= precision - scale:
        raise ValueError(f"{text!r} has more than {precision - scale} digits before the point")
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
    """Each column with its Spark and Arrow types and converter (:func:`column_type`)."""
    return tuple(TypedColumn(c.name, *column_type(types, c.type_oid, c.typmod), c.type_oid,
                             c.type_name) for c in columns)


def table_struct(conn: psycopg.Connection[Any], schema: str, table: str) -> TableStruct | None:
    """The table's :class:`TableStruct` as the catalog describes it now (``None`` if it is
    gone): run in a session with the peek sessions' settings."""
    info = table_info(conn, schema, table)
    if info is None:
        return None
    published = [c for c in info.columns if not c.generated]
    types = load_types(conn, {c.type_oid for c in published})
    return TableStruct(typed_columns(types, published),
                       tuple(c.name for c in published if c.key))


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


# --- the query's structs ----------------------------------------------------------------------

_TABLES = """\
SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence = 'p' AND n.nspname <> 'information_schema'
  AND n.nspname !~ '^pg_'
ORDER BY 1, 2"""


def _as_is(image: dict[str, Any]) -> dict[str, Any]:
    return image


class StructRows(NamedTuple):
    """What a ``row_format=struct`` query fixed when it started: its tables' typed columns
    (``schema.table``), the struct of ``before``/``after`` and of ``key``, as Spark and Arrow
    types. Picklable: the reader takes it to the executors."""

    tables: Mapping[str, TableStruct]
    row: StructType
    key: StructType
    row_arrow: pa.StructType
    key_arrow: pa.StructType

    @classmethod
    def of(cls, tables: Mapping[str, TableStruct]) -> StructRows:
        """The structs of ``tables`` (``schema.table``), which must be of one shape
        (:func:`struct_schema`, whose :class:`ValueError` says how they differ)."""
        row, key = struct_schema(tables)
        arrow = {c.name: c.arrow for c in next(iter(tables.values())).columns}
        return cls(dict(tables), row, key,
                   pa.struct([pa.field(n, arrow[n]) for n in row.names]),
                   pa.struct([pa.field(n, arrow[n]) for n in key.names]))

    def schemas(self) -> tuple[StructType, pa.Schema]:
        """The change rows' Spark and Arrow schemas with these structs."""
        return typed_schemas(self.row, self.key, self.row_arrow, self.key_arrow)

    def retyped(self, shape: RowShape, *, whole: bool = True,
                types: Sequence[int | str] | None = None) -> RowShape:
        """``shape`` (as a decoder or reader built it for the JSON mode) with the converters
        of the columns this query started with, its row images dicts of typed values: the one
        place a change's values become typed.

        ``whole``: ``shape`` has every column of the table (not an old key's columns);
        ``types``: the columns' type OIDs (pgoutput) or names (test_decoding), when known.
        A table that is not the query's, or whose columns differ, gets a shape that raises
        :class:`SchemaChangedError` at its first change, so the changes before it go out.
        """
        name = f"{shape.schema}.{shape.table}"
        table = self.tables.get(name)
        if table is None:
            return _changed(shape, SchemaChangedError(
                name, "the table was not captured when the query started (it is new, or "
                "include_tables/exclude_tables now cover it)"))
        columns = {c.name: c for c in table.columns}
        difference = _column_difference(table, shape.names, whole, types)
        if difference is not None:
            return _changed(shape, SchemaChangedError(name, difference))
        return RowShape(shape.schema, shape.table, shape.names,
                        [columns[n].convert for n in shape.names], shape.key, shape.keep,
                        _as_is)


    def stamp(self) -> dict[str, Any]:
        """The structs as JSON, for the query's offsets: :func:`checkpoint_difference` reads
        them back when the query restarts."""
        return {"row": self.row.jsonValue(), "key": self.key.jsonValue()}


def checkpoint_difference(written: Mapping[str, Any] | None, typed: StructRows | None,
                          evolution: str) -> str | None:
    """Why a query restarted on a checkpoint whose offsets carry ``written``
    (:meth:`StructRows.stamp`; ``None``: a ``row_format=json`` query's) cannot go on with
    ``typed`` under ``schema_evolution=evolution``; ``None`` if it can."""
    if written is None and typed is None:
        return None
    if written is None or typed is None:
        was, now = ("json", "struct") if written is None else ("struct", "json")
        return (f"the checkpoint was written by a row_format={was} query, this one is "
                f"row_format={now}: start it on a new checkpoint")
    row, key = StructType.fromJson(written["row"]), StructType.fromJson(written["key"])
    if row == typed.row and key == typed.key:
        return None
    was_types = {f.name: f.dataType for f in row.fields}
    now_types = {f.name: f.dataType for f in typed.row.fields}
    was_pg = {f.name: f.metadata.get(PG_TYPE) for f in row.fields}
    now_pg = {f.name: f.metadata.get(PG_TYPE) for f in typed.row.fields}
    added = [n for n in now_types if n not in was_types]
    dropped = [n for n in was_types if n not in now_types]
    retyped = [f"{n!r} ({t.simpleString()} in the checkpoint, "
               f"{now_types[n].simpleString()} now)"
               for n, t in was_types.items() if n in now_types and now_types[n] != t] + [
        f"{n!r} ({t} in the checkpoint, {now_pg[n]} now)"
        for n, t in was_pg.items() if n in now_pg and now_pg[n] != t
        and now_types[n] == was_types[n]]
    parts = ([f"columns added: {', '.join(map(repr, added))}"] if added else []) + (
        [f"columns dropped: {', '.join(map(repr, dropped))}"] if dropped else []) + (
        [f"type changed: {', '.join(retyped)}"] if retyped else []) + (
        [f"the key is {key.simpleString()} in the checkpoint, {typed.key.simpleString()} now"]
        if key != typed.key else [])
    difference = "; ".join(parts) or "the columns are in another order"
    if evolution == "add_columns" and row.fields == typed.row.fields[:len(row.fields)] and (
            key == typed.key):
        return None
    fix = ("schema_evolution=add_columns takes columns added at the end only"
           if evolution == "add_columns" else
           "restart with schema_evolution=add_columns if columns were only added")
    return (f"the tables' columns differ from the structs this checkpoint was written with: "
            f"{difference}. {fix}, or on a new checkpoint with the same slot (it goes on from "
            "the last delivered change with the columns as they are now)")


def _changed(shape: RowShape, error: SchemaChangedError) -> RowShape:
    return RowShape(shape.schema, shape.table, shape.names, shape.converters, shape.key,
                    shape.keep, _as_is, error)


def _column_difference(table: TableStruct, names: Sequence[str], whole: bool,
                       types: Sequence[int | str] | None) -> str | None:
    """What differs between the columns a query started with and ``names`` (``types``),
    ``None`` if nothing does."""
    started = {c.name: c for c in table.columns}
    added = [n for n in names if n not in started]
    dropped = [c.name for c in table.columns if c.name not in names] if whole else []
    changed = []
    for i, n in enumerate(names):
        column = started.get(n)
        if column is None or types is None:
            continue
        now = types[i]
        was = column.type_oid if isinstance(now, int) else column.type_name
        if was and now != was:
            changed.append(f"{n!r} ({was} when the query started, {now} now)")
    parts = []
    if added:
        parts.append(f"column{'s' if len(added) > 1 else ''} added: "
                     f"{', '.join(map(repr, added))}")
    if dropped:
        parts.append(f"column{'s' if len(dropped) > 1 else ''} dropped: "
                     f"{', '.join(map(repr, dropped))}")
    if changed:
        parts.append(f"type changed: {', '.join(changed)}")
    return "; ".join(parts) or None


def captured_now(conn: psycopg.Connection[Any], keeps: Callable[[str, str], bool]
                 ) -> list[tuple[str, str]]:
    """The tables ``keeps`` (the include/exclude rules) covers now, in name order."""
    return [(str(schema), str(table)) for schema, table in conn.execute(_TABLES).fetchall()
            if keeps(str(schema), str(table))]


def struct_rows(conn: psycopg.Connection[Any], keeps: Callable[[str, str], bool]
                ) -> StructRows:
    """The :class:`StructRows` of the tables ``keeps`` (the include/exclude rules) covers, as
    the catalog describes them now; :class:`ConfigError` (option ``row_format``) when there
    are none or they differ (:func:`struct_schema`)."""
    tables: dict[str, TableStruct] = {}
    for schema, table in captured_now(conn, keeps):
        typed = table_struct(conn, schema, table)
        if typed is not None:
            tables[f"{schema}.{table}"] = typed
    try:
        return StructRows.of(tables)
    except ValueError as exc:
        raise ConfigError("row_format", f"struct: {exc} (include_tables picks the tables)"
                          ) from None
