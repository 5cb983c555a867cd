"""A chunk read through ``COPY`` and the compiled core: the JSON mode's rows without a Python
object per row.

The chunk's ``SELECT`` (its columns, then its chunk key's, in the key range, under the same
snapshot and guards) is sent as ``COPY (...) TO STDOUT``; its text is each value's output text,
what the Python path's converters read from a cursor. The core reads it from libpq
(:mod:`.libpq`) and writes ``key``, ``after`` and ``id`` from it
(:class:`iggy_spark_core.CopyRows`) as the Python path does
(:func:`postgres_cdc_source.snapshot.reading.read_chunk`'s ``_batches``). A value a converter
rejects is handed back, and the Python path raises the error naming its column.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import orjson
import psycopg
import pyarrow as pa
from psycopg import sql

from connector_common.arrow_values import repeated
from connector_common.lsn import format_lsn
from postgres_cdc_source.decoding import INSERT, RowShape, build_change
from postgres_cdc_source.decoding.blocks import strings_of
from postgres_cdc_source.decoding.compiled import core_columns
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.rows.json.values import converter_for_oid
from postgres_cdc_source.snapshot.libpq import copy_out
from postgres_cdc_source.snapshot.planning import SnapshotTable

__all__ = ["copied_columns"]

_READ = "read"


def copied_columns(
    conn: psycopg.Connection[Any], select: sql.Composable, params: list[str], table: SnapshotTable,
    consistent_point: int, router: Router, fetch_rows: int, module: ModuleType,
) -> Iterator[tuple[pa.Array, pa.Array, pa.Array, tuple[pa.Array, pa.Array, pa.Array]]]:
    """``(key, after, id, destinations)`` of the rows of ``select`` (the chunk's columns, then
    its chunk key's), up to ``fetch_rows`` at a time."""
    shape = RowShape(table.schema, table.table, table.columns,
                     [converter_for_oid(oid) for oid in table.type_oids], table.identity, True)
    names, kinds, converters = core_columns(module, shape.names, shape.converters)
    prefix = f"{format_lsn(consistent_point)}:{_READ}:" + orjson.dumps(
        [table.schema, table.table]).decode()[:-1]
    rows = module.CopyRows(orjson.dumps, table.schema, table.table, names, kinds, converters,
                           list(table.identity), len(table.chunk_key), prefix.encode())

    def columns(block: Any, failed: list[str | None] | None
                ) -> tuple[pa.Array, pa.Array, pa.Array, tuple[pa.Array, pa.Array, pa.Array]]:
        if failed is not None:  # the Python path names the column and the value
            build_change(shape, consistent_point, 0, INSERT, None, failed[:len(table.columns)],
                         old_is_full=False, new_has_unchanged=False)
            raise DecodeError(f"pg_cdc snapshot of {table.schema}.{table.table}: a row the "
                              "compiled core could not write", consistent_point)
        count = len(block)
        made = {column: strings_of(count, buffers) for column, buffers in block.buffers()}
        key = made["key"]
        return (key, made["after"], made["id"],
                router.columns_of(count, repeated(table.schema, count),
                                 repeated(table.table, count), key))

    # the parameters merged by psycopg as ``copy()`` merges them, with none too (``select``
    # is written for parameters: its names' ``%`` doubled)
    statement = psycopg.ClientCursor(conn).mogrify(
        sql.SQL("COPY ({}) TO STDOUT").format(select), params)
    blocks = copy_out(conn, statement, fetch_rows, rows)
    while True:
        try:
            block, failed = next(blocks)
        except StopIteration:
            return
        except ValueError as exc:  # a line of another width, text not UTF-8, over 2 GiB
            raise DecodeError(f"pg_cdc snapshot of {table.schema}.{table.table}: {exc}",
                              consistent_point) from exc
        yield columns(block, failed)
