"""Where a ``row_format=struct`` batch ends when a captured table changed under the query.

The query's structs are fixed when it starts; a change written after a table's columns changed
cannot be typed with them (the decoders give such a table a shape that raises
:class:`~postgres_cdc_source.errors.SchemaChangedError`). So that the changes written before the
DDL are delivered, the driver ends the batch before the first transaction holding such a
change, and fails the query when the next batch would start with it: the slot then rests right
after the last delivered change, and a query restarted on a new checkpoint goes on from there
with the table's new columns.

The WAL is decoded here (on the driver) only when the catalog no longer matches the structs,
from a DDL on until the query stops: one catalog lookup per captured table per planning
otherwise.
"""

from __future__ import annotations

from typing import Any

import psycopg

from postgres_cdc_source.assembly import transactions
from postgres_cdc_source.catalog import table_info
from postgres_cdc_source.connections import connect_with_retry
from postgres_cdc_source.decoding.factory import make_decoder
from postgres_cdc_source.errors import SchemaChangedError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import peeking
from postgres_cdc_source.rows import RowFormat
from postgres_cdc_source.rows.struct.catalog import captured_now

__all__ = ["catalog_changed", "typed_end"]


def catalog_changed(conn: psycopg.Connection[Any], options: CdcOptions,
                    rows: RowFormat) -> bool:
    """Whether a captured table's published columns (names, types) differ from those the
    query's rows were fixed with (:attr:`~postgres_cdc_source.rows.RowFormat.fixed_tables`),
    or the include rules cover other tables now (one created, one dropped)."""
    tables = rows.fixed_tables
    assert tables is not None, "a row format that fixes no tables has nothing to watch"
    if {f"{s}.{t}" for s, t in captured_now(conn, options.keeps)} != set(tables):
        return True
    for name, table in tables.items():
        schema, _, relname = name.partition(".")
        info = table_info(conn, schema, relname, generated=options.delivers_generated)
        if info is None:
            return True
        now = [(c.name, c.type_oid) for c in info.columns if not c.generated]
        if now != [(c.name, c.type_oid) for c in table.columns]:
            return True
    return False


def typed_end(options: CdcOptions, rows: RowFormat, start: int, end: int) -> int:
    """``end``, or the end of the last transaction of ``(start, end]`` before the first one
    holding a change the rows cannot type; raises that change's
    :class:`SchemaChangedError` when it is in the first transaction after ``start``."""
    conn = connect_with_retry(options, autocommit=False)
    try:
        peeked = peeking.peek_range(conn, options, start, end)
        last = start
        try:
            for commit, chunks in transactions(
                    make_decoder(options, conn, None, rows.retyping).events(peeked),
                    options.spill_rows):
                for _ in chunks:
                    pass
                last = commit.end_lsn
        except SchemaChangedError:
            if last == start:
                raise
            return last
        return end
    finally:
        conn.close()
