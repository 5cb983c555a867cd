"""The structs a ``row_format=struct`` query fixed when it started (:class:`StructRows`), and
whether a restart may go on with the structs its checkpoint was written with
(:func:`checkpoint_difference`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
from pyspark.sql.types import DataType, StructField, StructType

from connector_common.change_rows import typed_schemas
from postgres_cdc_source.errors import ConfigError, SchemaChangedError
from postgres_cdc_source.options import ROW_FORMAT_REFUSALS, CdcOptions
from postgres_cdc_source.rows.contract import STAMP, other_format
from postgres_cdc_source.rows.json.values import Converter, converter_for_oid
from postgres_cdc_source.rows.shape import RowShape
from postgres_cdc_source.rows.struct.evolution import (
    NEW_CHECKPOINT,
    column_difference,
    described,
    names_text,
    untypable,
    widens,
)
from postgres_cdc_source.rows.struct.history import keep
from postgres_cdc_source.rows.struct.images import image_converter, image_json
from postgres_cdc_source.rows.struct.json_text import (
    PG_TYPE,
    PG_TYPE_OID,
    field_metadata,
    image_renderer,
)
from postgres_cdc_source.rows.struct.types import TableStruct, _arrow_struct

__all__ = ["StructRows", "checkpoint_difference", "struct_schema"]


def _as_is(image: dict[str, Any]) -> dict[str, Any]:
    return image


def _changed(shape: RowShape, error: SchemaChangedError) -> RowShape:
    return RowShape(shape.schema, shape.table, shape.names, shape.converters, shape.key,
                    shape.keep, _as_is, error)


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

    @property
    def name(self) -> str:
        return "struct"

    @property
    def json_in_sql(self) -> bool:
        return False

    @property
    def encode_image(self) -> Callable[[dict[str, Any]], Any]:
        return _as_is

    @property
    def retyping(self) -> StructRows:
        return self

    @property
    def fixed_tables(self) -> Mapping[str, TableStruct]:
        return self.tables

    @property
    def refused_options(self) -> Mapping[str, str]:
        return ROW_FORMAT_REFUSALS["struct"]

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
            difference = untypable(self.row, table, shape.names, whole, types)
        else:
            difference = column_difference(table, shape.names, whole, types)
        if difference is not None:
            return _changed(shape, SchemaChangedError(name, difference))
        fields = {f.name: f for f in self.row.fields}
        return RowShape(shape.schema, shape.table, shape.names,
                        [image_converter(fields[n].dataType) for n in shape.names], shape.key,
                        shape.keep, _as_is)

    def stamp(self) -> dict[str, Any]:
        """The structs as JSON, for the query's offsets (:func:`checkpoint_difference` reads
        them back when the query restarts) and its ``schema_location``
        (:mod:`.history`), with each table's columns' attnums, so
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
                    f"table {table}, column {field.name!r}: {described(field)} in the "
                    f"earlier structs cannot become {described(new)}: schema_evolution="
                    "add_columns takes only a type that keeps every value and its JSON "
                    "(smallint to integer to bigint, real to double precision, a numeric "
                    "with as many digits before and after the point, varchar to a longer "
                    f"varchar or text); {NEW_CHECKPOINT}")
            fields.append(new)
        fields += [f for f in self.row.fields if f.name not in set(was.names)]
        if was_key.names != self.key.names:
            raise ValueError(
                f"table {table}: the key is {names_text(was_key.names)} in the earlier structs, "
                f"{names_text(self.key.names)} now: schema_evolution=add_columns cannot change a "
                f"key; {NEW_CHECKPOINT}")
        row = StructType(fields)
        return self._made(self.tables, row, StructType([row[n] for n in self.key.names]),
                          self.evolution)

    def stamped(self, offset: dict[str, Any]) -> dict[str, Any]:
        """``offset`` with these structs (:meth:`stamp`)."""
        return {**offset, STAMP: self.stamp()}

    def check_offset(self, offset: Mapping[str, Any], options: CdcOptions) -> None:
        """Refuse to go on from a checkpoint's offset written with other structs, unless
        ``schema_evolution`` takes the difference (:func:`checkpoint_difference`); with
        ``schema_location``, the evolved structs are kept there first, so that a restart's
        ``load()`` gives the fields of the columns dropped or renamed since."""
        written = offset.get(STAMP)
        location = options.schema_location is not None
        problem = checkpoint_difference(written, self, options.schema_evolution, location,
                                        options.row_format)
        if problem is None:
            return
        if location and written is not None:
            try:  # fields of dropped or renamed columns the structs load() gave lack
                evolved = self.evolved(written)
            except ValueError:
                evolved = self  # refused: the problem says why
            if len(evolved.row) > len(self.row):
                keep(options, evolved.stamp())
        raise ConfigError("schema_evolution", f"{options.schema_evolution}: {problem}")

    def value_json(self, column: str) -> Callable[[Any], Any] | None:
        """A struct value of ``column`` -> its JSON mode's value (``None``: the query has no
        such column)."""
        if column not in self.row.names:
            return None
        field = self.row[column]
        return image_json(int(field.metadata[PG_TYPE_OID]), field.dataType)

    def key_text(self) -> Callable[[Any], str | None]:
        render = image_renderer(self.key, image_json)
        return lambda key: render(key, ())

    def reselect_converters(
        self, schema: str, table: str, oids: Mapping[str, int], key: Sequence[str],
    ) -> tuple[dict[str, Converter], dict[str, Callable[[Any], Any]]] | None:
        """Only the query's tables (another's changes fail the batch anyway), with every key
        column in the structs."""
        struct = self.tables.get(f"{schema}.{table}")
        if struct is None:
            return None
        columns = {c.name: c for c in struct.columns}
        if any(k not in columns for k in key):
            return None
        return ({c: image_converter(columns[c].spark) for c in oids if c in columns},
                {k: image_json(columns[k].type_oid, columns[k].spark) for k in key})


def struct_schema(tables: Mapping[str, TableStruct]) -> tuple[StructType, StructType]:
    """The structs of ``before``/``after`` and of ``key`` for the tables named
    (``schema.table``): their columns, which must be the same names with the same Spark types
    in the same order, of Postgres types the JSON mode writes alike, and the same key columns.
    Each field's metadata names its column's Postgres type
    (:func:`.json_text.field_metadata`), from which
    :mod:`.json_text` renders the JSON mode's text again.

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
                             f"{name} differ: the key is {names_text(ours.key)} in the first, "
                             f"{names_text(other.key)} in the second")
    row = StructType([StructField(c.name, c.spark, metadata=field_metadata(c.type_oid,
                                                                           c.type_name))
                      for c in ours.columns])
    return row, StructType([row[n] for n in ours.key])


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
        return other_format(was, now)
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
                + f"; or {NEW_CHECKPOINT}")
    return (f"{_tables_named(typed)}: the struct fields are in another order than in the "
            f"checkpoint's structs ({', '.join(map(repr, evolved.row.names))}, "
            f"{', '.join(map(repr, typed.row.names))} now: schema_location holds another "
            f"query's structs?); {NEW_CHECKPOINT}")


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
    retyped = [f"{n!r} ({described(f)} in the checkpoint, {described(now[n])} now)"
               for n, f in was.items()
               if n in now and (f.dataType, f.metadata.get(PG_TYPE)) != (
                   now[n].dataType, now[n].metadata.get(PG_TYPE))]
    parts = ([f"columns added: {', '.join(map(repr, added))}"] if added else []) + (
        [f"columns dropped: {', '.join(map(repr, dropped))}"] if dropped else []) + [
        f"column renamed: {a!r} to {b!r}" for a, b in renamed.items()] + (
        [f"type changed: {', '.join(retyped)}"] if retyped else []) + (
        [f"the key is {key.simpleString()} in the checkpoint, {typed.key.simpleString()} now"]
        if key.names != typed.key.names else [])
    return f"{_tables_named(typed)}: " + ("; ".join(parts) or "the columns are in another order")


def _tables_named(typed: StructRows) -> str:
    """The query's tables (``schema.table``), all of one shape, so each has the difference."""
    names = sorted(typed.tables)
    return f"table{'s' if len(names) > 1 else ''} {', '.join(names)}"
