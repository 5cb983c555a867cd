"""Reading a chunk on an executor: its rows as ``read`` changes, streamed through a
server-side cursor in a ``REPEATABLE READ`` transaction that imports the exported snapshot
while its exporter lives."""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
import pyarrow as pa
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.adapt import AdaptersMap
from psycopg.types.numeric import IntDumper
from psycopg.types.string import StrDumperUnknown, TextLoader
from pyspark.sql.datasource import InputPartition

from connector_common.arrow_values import int64s, repeated
from connector_common.change_rows import (
    ARROW_SCHEMA,
    POSITION_TYPE,
    READ_SEQ,
    no_unchanged,
    position_lsn,
)
from connector_common.lsn import format_lsn
from postgres_cdc_source import connections
from postgres_cdc_source.assembly import image_column
from postgres_cdc_source.decoding import INSERT, Change, RowShape, build_change, compiled
from postgres_cdc_source.decoding.changes import conversion_error
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows import RowFormat
from postgres_cdc_source.rows.json.format import JSON_ROWS
from postgres_cdc_source.rows.json.sql import row_json_sql, text_json_sql
from postgres_cdc_source.rows.json.values import converter_for_oid
from postgres_cdc_source.rows.struct.images import UnconvertibleValue
from postgres_cdc_source.snapshot.copying import copied_columns
from postgres_cdc_source.snapshot.offsets import Creation, Key
from postgres_cdc_source.snapshot.planning import SnapshotTable, key_range
from postgres_cdc_source.sql_names import Name

__all__ = ["READ", "SnapshotPartition", "read_chunk"]

log = logging.getLogger(__name__)

READ = "read"


@dataclass(frozen=True)
class SnapshotPartition(InputPartition):
    """One chunk: rows of ``table`` with ``lo < chunk key <= hi`` (open ends when ``None``)."""

    table: SnapshotTable
    lo: Key | None
    hi: Key | None
    snapshot: str | None  # the exported snapshot to import, while its exporter lives
    consistent_point: int
    where: str | None = None
    """A backfill's condition: trusted SQL, read under :data:`GUARDS`."""
    created: Creation | None = None
    """Only the rows a table's creating transaction wrote before it joined the publications."""


GUARDS = {"statement_timeout": "5min", "lock_timeout": "10s"}
"""Limits of a backfill chunk's read: it runs beside the owner's writes and never waits long
behind their locks (an ``ACCESS EXCLUSIVE`` lock of a migration, say)."""


_TEXT_ONLY = AdaptersMap()
# Every value as the text of its type's output function, exactly what pgoutput sends: psycopg
# falls back to OID 0's loader for every type it has no loader for, and this map has no other.
_TEXT_ONLY.register_loader(0, TextLoader)
_TEXT_ONLY.register_dumper(str, StrDumperUnknown)  # parameters of unknown type, as text
_TEXT_ONLY.register_dumper(int, IntDumper)  # the server-side cursor's FETCH count


def read_chunk(
    options: CdcOptions, part: SnapshotPartition, rows: RowFormat = JSON_ROWS
) -> Generator[pa.RecordBatch, None, None]:
    """The chunk's rows as Arrow batches of ``batch_rows``, streamed through a server-side
    cursor (``fetch_rows`` per round trip), so memory does not grow with the table; ``key``
    and ``after`` of the row format ``rows`` (JSON text, structs or variants).

    The transaction imports the exported snapshot when there is one. Once it is gone (its
    exporter, the driver, died), the chunk is read at the current state instead: that state
    already holds some changes made after the consistent point, which the stream then
    delivers again after the snapshot, so each key still ends in its latest state (and a
    replayed chunk carries the same ids).
    """
    conn = connections.connect(options, autocommit=False, context=_TEXT_ONLY)
    try:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        if part.snapshot is not None:
            try:
                conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(
                    sql.Literal(part.snapshot)))
            except (pgerrors.InvalidParameterValue, pgerrors.ObjectNotInPrerequisiteState) as exc:
                conn.rollback()
                log.warning("pg_cdc snapshot: exported snapshot %s is gone (%s); reading %s.%s "
                            "at the current state", part.snapshot, exc.diag.message_primary,
                            part.table.schema, part.table.table)
        table = part.table
        router = Router(options, rows)
        where, params = key_range(table, part.lo, part.hi)
        params_in_range = bool(params)
        conditions: list[sql.Composable] = []
        if part.where is not None:
            for setting, value in GUARDS.items():
                conn.execute("SELECT pg_catalog.set_config(%s, %s, true)", (setting, value))
            conditions.append(sql.SQL("({})").format(sql.SQL(part.where.replace("%", "%%"))))
        if part.created is not None:  # cmin has no integer cast of its own: through its text
            conditions.append(sql.SQL("xmin = %s::xid AND cmin::text::int8 < %s"))
            params = [*params, str(part.created.xmin), str(part.created.cid)]
        if conditions:
            where = (sql.SQL("{} AND {}") if params_in_range else sql.SQL("{} WHERE {}")
                     ).format(where, sql.SQL(" AND ").join(conditions))
        name = table.relation()  # ONLY, but a partitioned table whole
        select = sql.SQL("SELECT {}, {} FROM {}{}").format(
            sql.SQL(", ").join(map(Name, table.columns)),
            sql.SQL(", ").join(map(Name, table.chunk_key)), name, where)
        core = (compiled.core() if rows.retyping is None and not router.by_column else None)
        if core is not None:  # COPY's text, the rows written by the compiled core
            point = part.consistent_point
            for key, after, ids, places in copied_columns(
                    conn, select, params, table, point, router, options.fetch_rows, core):
                for start in range(0, len(ids), options.batch_rows):
                    yield _batch(table, point, key.slice(start, options.batch_rows),
                                 after.slice(start, options.batch_rows),
                                 ids.slice(start, options.batch_rows),
                                 tuple(c.slice(start, options.batch_rows) for c in places))
            conn.rollback()
            return
        in_sql = (_json_columns(table, part.consistent_point)
                  if rows.json_in_sql and not router.by_column else None)
        with conn.cursor(name="pg_cdc_snapshot") as cur:
            if in_sql is not None:  # the JSON built by Postgres, the worker only moves it
                cur.execute(sql.SQL("SELECT {} FROM {}{}").format(in_sql, name, where),
                            params)
                yield from _ready_batches(cur, part, router, options.fetch_rows,
                                          options.batch_rows)
            else:
                cur.itersize = options.fetch_rows
                cur.execute(select, params)
                yield from _batches(cur, part, router, options.batch_rows, rows)
        conn.rollback()
    finally:
        conn.close()


def _json_columns(table: SnapshotTable, consistent_point: int) -> sql.Composable | None:
    """``key``, ``after`` and ``id`` of a row as SQL (:mod:`postgres_cdc_source.rows.json.sql`);
    ``None`` when a column's type needs converting in Python."""
    after = row_json_sql(table.columns, table.type_oids)
    key = row_json_sql([table.columns[i] for i in table.identity],
                       [table.type_oids[i] for i in table.identity])
    if after is None or key is None:
        return None
    # id: <point>:read:["schema","table",<chunk key values as JSON strings of their text>]
    prefix = f"{format_lsn(consistent_point)}:{READ}:" + orjson.dumps(
        [table.schema, table.table]).decode()[:-1]
    id_parts: list[sql.Composable] = [sql.Literal(prefix.replace("%", "%%"))]
    for column in table.chunk_key:  # as the JSON string of its text, whatever its type
        oid = table.type_oids[table.columns.index(column)] if column in table.columns else 0
        id_parts += [sql.SQL("','"), text_json_sql(oid, Name(column))]
    id_sql = sql.SQL("({} || ']')").format(sql.SQL(" || ").join(id_parts))
    return sql.SQL("{}, {}, {}").format(
        key if table.identity else sql.SQL("NULL::text"), after, id_sql)


def _ready_batches(
    cur: psycopg.Cursor[Any], part: SnapshotPartition, router: Router, fetch_rows: int,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    """Rows of ``(key, after, id)`` JSON text, ``fetch_rows`` per round trip -> Arrow batches
    of ``batch_rows``: per row, Python only routes (when routing is on)."""
    table = part.table
    route = router.route if router.active else None
    while fetched := cur.fetchmany(fetch_rows):
        for start in range(0, len(fetched), batch_rows):
            rows = fetched[start:start + batch_rows]
            keys, afters, ids = (list(c) for c in zip(*rows, strict=True))
            places = [route(Change(part.consistent_point, 0, table.schema, table.table, READ, k,
                                   None, a, ())) for k, a in zip(keys, afters, strict=True)
                      ] if route is not None else []
            yield _listed(table, part.consistent_point, keys, afters, ids, places)


def _batches(
    rows: Iterator[tuple[Any, ...]], part: SnapshotPartition, router: Router, batch_rows: int,
    rows_format: RowFormat = JSON_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Rows -> Arrow batches. Each row is converted and serialized as pgoutput's decoder does an
    insert (same converters, same ``orjson`` objects in column order, or the same typed dicts
    of the row format's shape), inlined here because it is the snapshot's hot path; a value a
    converter rejects is reported by :func:`build_change`, which names the column."""
    table = part.table
    shape = RowShape(table.schema, table.table, table.columns,
                     [converter_for_oid(oid) for oid in table.type_oids], table.identity, True)
    shape = rows_format.retyped(shape, types=list(table.type_oids))
    if shape.changed is not None:
        raise shape.changed
    schema = rows_format.schemas()[1]
    names, converters, identity, encode = shape.names, shape.converters, shape.key, shape.encode
    key_names = shape.key_names
    width = len(names)
    prefix = f"{format_lsn(part.consistent_point)}:{READ}:"
    route = router.route if router.active else None
    dumps = orjson.dumps
    keys: list[Any] = []
    afters: list[Any] = []
    ids: list[str] = []
    places: list[tuple[str | None, str | None, str | None]] = []
    for row in rows:
        texts = row[:width]
        try:
            values = [None if v is None else c(v) for c, v in zip(converters, texts, strict=True)]
        except (ValueError, KeyError, TypeError):
            build_change(shape, part.consistent_point, 0, INSERT, None, texts,
                         old_is_full=False, new_has_unchanged=False)  # raises, naming the column
            raise
        after = encode(dict(zip(names, values, strict=True)))
        key = (encode(dict(zip(key_names, [values[i] for i in identity], strict=True)))
               if identity else None)
        keys.append(key)
        afters.append(after)
        ids.append(prefix + dumps([table.schema, table.table, *row[width:]]).decode())
        if route is not None:
            row_values = dict(zip(names, values, strict=True))  # for routes by a column
            places.append(route(Change(part.consistent_point, 0, table.schema, table.table, READ,
                                       key, None, after, (), row_values)))
        if len(ids) >= batch_rows:
            yield _listed(table, part.consistent_point, keys, afters, ids, places, schema)
            keys, afters, ids, places = [], [], [], []
    if ids:
        yield _listed(table, part.consistent_point, keys, afters, ids, places, schema)


def _listed(
    table: SnapshotTable, consistent_point: int, keys: list[Any], afters: list[Any],
    ids: list[str], places: list[tuple[str | None, str | None, str | None]],
    schema: pa.Schema = ARROW_SCHEMA,
) -> pa.RecordBatch:
    """:func:`_batch` of rows given as lists of their images, ids and routes."""
    string = pa.string()
    if places:
        stream, topic, partition_key = (pa.array(c, string) for c in zip(*places, strict=True))
    else:
        stream = topic = partition_key = pa.nulls(len(ids), string)
    try:
        key_column = image_column(keys, schema.field("key").type)
        after_column = image_column(afters, schema.field("after").type)
    except UnconvertibleValue as exc:
        raise conversion_error(consistent_point, f"{table.schema}.{table.table}", exc.column,
                               exc.text, exc.__cause__ or exc) from exc
    return _batch(table, consistent_point, key_column, after_column, pa.array(ids, string),
                  (stream, topic, partition_key), schema)


def _batch(
    table: SnapshotTable, consistent_point: int, key_column: pa.Array, after_column: pa.Array,
    ids: pa.Array, places: tuple[pa.Array, ...], schema: pa.Schema = ARROW_SCHEMA,
) -> pa.RecordBatch:
    """The batch of a chunk's rows: their ``key``, ``after``, ``id`` and destination columns
    (``stream``, ``topic``, ``partition_key``), the rest the chunk's own."""
    n = len(ids)
    point = format_lsn(consistent_point)
    stream, topic, partition_key = places

    def repeat(value: str) -> pa.Array:
        return repeated(value, n)

    return pa.RecordBatch.from_arrays(
        [
            repeat(point),
            repeat(point),
            pa.nulls(n, pa.int64()),
            pa.nulls(n, ARROW_SCHEMA.field("commit_ts").type),
            pa.nulls(n, pa.int32()),
            repeat(table.schema),
            repeat(table.table),
            repeat(READ),
            key_column,
            pa.nulls(n, schema.field("before").type),
            after_column,
            no_unchanged(n),
            ids,
            stream,
            topic,
            partition_key,
            # a snapshot or backfill row comes after the changes of the commit it was read at
            pa.repeat(pa.StructArray.from_arrays(
                [int64s([position_lsn(consistent_point)]), int64s([READ_SEQ])],
                fields=list(POSITION_TYPE))[0], n),
        ],
        schema=schema,
    )
