"""How a table's columns may change under a ``row_format=struct`` query (``schema_evolution``).

Pure rules on struct fields and column lists: which type a field may widen to (:func:`widens`),
and what differs between the columns a query started with and those of a change
(:func:`column_difference` with ``fail``, :func:`untypable` with ``add_columns``), by kind:
columns added, dropped, renamed or of another type. :class:`.structs.StructRows` applies them
to each table a decoder meets and to the structs a restart evolves.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pyspark.sql.types import (
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StructField,
    StructType,
)

from postgres_cdc_source.pg_types import TYPES
from postgres_cdc_source.rows.json.values import converter_for_oid
from postgres_cdc_source.rows.struct.json_text import PG_TYPE, PG_TYPE_OID, field_metadata
from postgres_cdc_source.rows.struct.types import _BY_OID, TableStruct

__all__ = ["NEW_CHECKPOINT", "column_difference", "described", "names_text", "type_text",
           "untypable", "widens"]

NEW_CHECKPOINT = ("start the query on a new checkpoint with the same slot (it goes on from "
                  "the last delivered change with the columns as they are now)")
"""The way out of every restart add_columns refuses."""

_INTEGERS: tuple[DataType, ...] = (ShortType(), IntegerType(), LongType())


def widens(was: StructField, now: StructField) -> bool:
    """Whether a struct field ``was`` may become ``now`` (their Postgres types in their
    metadata, :func:`.json_text.field_metadata`) with every value kept
    and written as the same JSON: the JSON mode converts both types alike (the JSON that
    ``json_text`` renders follows the field's type, the wider one for older changes too),
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


def described(field: StructField) -> str:
    return f"{field.metadata.get(PG_TYPE, '?')} ({field.dataType.simpleString()})"


def names_text(names: Sequence[str]) -> str:
    return f"({', '.join(map(repr, names))})" if names else "none"


def type_text(pg: int | str) -> str:
    if isinstance(pg, str):
        return pg
    builtin = TYPES.get(pg)
    return f"type OID {pg}" if builtin is None else builtin.name


def _takes(field: StructField, pg: int | str) -> bool:
    """Whether ``field`` types a column of the Postgres type ``pg`` (an OID, or a
    ``format_type`` name): its own, or a built-in type it widens (an older change's)."""
    builtin = TYPES.get(pg)
    oid = pg if isinstance(pg, int) else None if builtin is None else builtin.oid
    if oid == field.metadata.get(PG_TYPE_OID) or pg == field.metadata.get(PG_TYPE):
        return True
    typed = None if oid is None else _BY_OID.get(oid)  # built in: no catalog at hand here
    return typed is not None and widens(
        StructField(field.name, typed[0], metadata=field_metadata(oid or 0, type_text(pg))),
        field)


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


def untypable(row: StructType, table: TableStruct, names: Sequence[str], whole: bool,
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
                  f"{type_text(t)}" for n, t in zip(names, types, strict=True)
                  if n in fields and not _takes(fields[n], t)]
    return "; ".join(parts) or None


def column_difference(table: TableStruct, names: Sequence[str], whole: bool,
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
            parts.append(f"column {n!r} type changed from {type_text(was)} to "
                         f"{type_text(now)}")
    return "; ".join(parts) or None
