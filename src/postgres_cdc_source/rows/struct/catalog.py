"""The query's structs from the catalog (``row_format=struct``): each captured table's columns
and ``pg_type`` rows read once, typed by :mod:`.types`, and made :class:`.structs.StructRows`
(which checks that the tables are of one shape); with ``schema_location`` evolved from the
structs kept there (:mod:`.history`). Runs on the driver, at ``load()`` and when the reader is
made, in a session with the peek sessions' settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from postgres_cdc_source import partitions
from postgres_cdc_source.catalog import table_info
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows.struct.history import keep, read_kept
from postgres_cdc_source.rows.struct.structs import StructRows
from postgres_cdc_source.rows.struct.types import PgType, TableStruct, typed_columns

__all__ = [
    "TYPES_QUERY",
    "captured_now",
    "evolve_kept",
    "load_types",
    "struct_rows",
    "table_struct",
]

TYPES_QUERY = """\
SELECT t.oid::int8, t.typname::text, t.typtype::text, t.typbasetype::int8, t.typtypmod,
       CASE WHEN t.typcategory = 'A' THEN t.typelem::int8 ELSE 0 END, t.typdelim::text
FROM pg_catalog.pg_type AS t
WHERE t.oid = ANY (%s)"""
"""``pg_type`` rows of the OIDs given (an ``int8[]`` parameter), for :class:`PgType`."""


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


def evolve_kept(options: CdcOptions, typed: StructRows) -> StructRows:
    """``typed`` (the tables' columns now) evolved from the structs kept in
    ``schema_location`` (as they are when none are), kept there for the next run;
    :class:`ConfigError` (option ``schema_evolution``) naming what add_columns refuses."""
    written = read_kept(options)
    try:
        evolved = typed if written is None else typed.evolved(written)
    except ValueError as exc:
        raise ConfigError("schema_evolution", f"add_columns: {exc}") from exc
    keep(options, evolved.stamp())
    return evolved
