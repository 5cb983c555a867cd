"""What the catalog says about a table: its live columns, their types and its replica identity.

The text-format decoder needs it to read test_decoding's lines the way pgoutput describes them
(which columns form the key, which are generated); the snapshot and polling readers need it to
know which columns to select and which make the ``key`` JSON. One query serves all three.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import orjson
import psycopg

__all__ = [
    "CATALOG_QUERY",
    "CatalogLookup",
    "ColumnInfo",
    "TableInfo",
    "column_lists",
    "table_info",
    "table_info_from_rows",
]

CATALOG_QUERY = """\
SELECT a.attname, quote_ident(a.attname), format_type(a.atttypid, NULL), a.atttypid::int8,
       c.relreplident = 'f' OR coalesce(a.attnum = ANY (i.indkey), false),
       coalesce(a.attgenerated <> '', false),
       c.relreplident::text, a.atttypmod, coalesce(a.attgenerated = 's', false)
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute AS a
       ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_catalog.pg_index AS i
       ON i.indrelid = c.oid
      AND CASE c.relreplident WHEN 'd' THEN i.indisprimary
                              WHEN 'i' THEN i.indisreplident
                              ELSE false END
WHERE n.nspname = %s AND c.relname = %s
ORDER BY a.attnum"""
"""Catalog query: parameters ``(schema, table)``, rows for :func:`table_info_from_rows`.

Run it in the peeking session (or one with the same ``search_path``): ``format_type`` qualifies
type names that are not visible, exactly like test_decoding's ``format_type_be`` does there. A
column is part of the key as pgoutput flags it: every column under REPLICA IDENTITY FULL, the
primary key's under DEFAULT, the chosen index's under USING INDEX, none under NOTHING.
"""


class ColumnInfo(NamedTuple):
    """One live column as the catalog describes it."""

    name: str
    quoted_name: str  # quote_ident(name): how test_decoding prints it
    type_name: str  # format_type(atttypid, NULL): how test_decoding prints the type
    type_oid: int
    key: bool  # part of the replica identity
    generated: bool
    """A GENERATED ALWAYS column the rows leave out: printed by test_decoding, omitted by
    pgoutput (sent by Postgres 18's, and left out again by its decoder); a stored one is kept
    with ``generated_columns=include`` (:func:`table_info`)."""
    typmod: int = -1  # the type's modifier: numeric(p, s)'s precision and scale, -1 for none


class TableInfo(NamedTuple):
    """A table's columns (attnum order, dropped ones excluded) and replica identity."""

    schema: str
    table: str
    replica_identity: str  # pg_class.relreplident: 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[ColumnInfo, ...]


CatalogLookup = Callable[[str, str], "TableInfo | None"]
"""``(schema, table) -> TableInfo``, or ``None`` if the table no longer exists."""


def table_info_from_rows(
    schema: str, table: str, rows: Sequence[Sequence[Any]], *, generated: bool = False
) -> TableInfo | None:
    """Build :class:`TableInfo` from :data:`CATALOG_QUERY`'s rows; ``None`` when there are none.
    ``generated``: the rows keep stored generated columns (``generated_columns=include``)."""
    if not rows:
        return None
    columns = tuple(
        ColumnInfo(str(name), str(quoted), str(type_name), int(oid), bool(key),
                   bool(is_generated) and not (generated and stored), int(typmod))
        for name, quoted, type_name, oid, key, is_generated, _, typmod, stored in rows
        if name is not None  # a table without columns still yields one row, for relreplident
    )
    return TableInfo(schema, table, str(rows[0][6]), columns)


def table_info(
    conn: psycopg.Connection[Any], schema: str, table: str, *, generated: bool = False
) -> TableInfo | None:
    """Run :data:`CATALOG_QUERY` for ``schema.table`` on ``conn``; ``None`` if it is gone.
    ``generated``: the rows keep stored generated columns (``generated_columns=include``)."""
    rows = conn.execute(CATALOG_QUERY, (schema, table)).fetchall()
    return table_info_from_rows(schema, table, rows, generated=generated)


def column_lists(conn: psycopg.Connection[Any], old: Sequence[Sequence[Any]],
                 new: Sequence[Sequence[Any]], keys: frozenset[str]) -> tuple[str, str]:
    """The JSON lists of a ``ddl`` change's ``before`` and ``after``: per column ``name``,
    ``type`` (``format_type``'s text), ``type_oid`` and ``key``, from columns as pgoutput
    reports them (``(name, type OID, modifier, key)``: the type's text looked up) or as
    test_decoding prints them (``(name, type name)``: the OID looked up, ``null`` for a type
    gone since; ``key`` from ``keys``, the catalog's)."""
    both = [*old, *new]
    if all(len(c) == 4 for c in both):
        types = conn.execute(
            "SELECT format_type(o, m) FROM unnest(%s::oid[], %s::int4[]) WITH ORDINALITY"
            " AS u(o, m, i) ORDER BY i", ([c[1] for c in both], [c[2] for c in both])).fetchall()
        items = [{"name": c[0], "type": t, "type_oid": c[1], "key": c[3]}
                 for c, (t,) in zip(both, types, strict=True)]
    else:
        oids = conn.execute(
            "SELECT to_regtype(t)::oid::int8 FROM unnest(%s::text[]) WITH ORDINALITY"
            " AS u(t, i) ORDER BY i", ([c[1] for c in both],)).fetchall()
        items = [{"name": c[0], "type": c[1], "type_oid": o, "key": c[0] in keys}
                 for c, (o,) in zip(both, oids, strict=True)]
    return (orjson.dumps(items[:len(old)]).decode(), orjson.dumps(items[len(old):]).decode())
