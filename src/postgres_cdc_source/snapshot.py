"""``snapshot=initial``: the captured tables' rows, read in parallel chunks before the stream.

Where a snapshot stands is part of the offset, so Spark's checkpoint records which rows were
delivered. While a snapshot runs, an offset is::

    {"lsn": "0/1505AE0", "snapshot": {"after": ["41"], "chunks": 7, "table": ["public", "t"]}}

``lsn`` is the slot's consistent point, where the stream starts once the snapshot is done (the
slot stays there until then). ``snapshot`` is the :class:`Position` reached: every captured
table sorting before ``table``, and the rows of ``table`` whose chunk key is at most ``after``,
are delivered (``after`` null: all of ``table``; ``table`` null: nothing yet); ``chunks``
counts the chunks delivered, for progress. The offset of a finished snapshot is
``{"lsn": ..., "reselect_until": "pending"}``: the stream's first planning replaces ``pending``
with an LSN (the snapshot was not exact: :mod:`postgres_cdc_source.reselect`) or drops it.

The end offset of a snapshot batch also pins the chunks it was planned with, in order::

    "planned": [["public", "t", null, ["41"]], ["public", "t", ["41"], ["82"]], ...]

so a batch replayed after a restart gives every row to the Spark partition that had it the
first time (bounds found again after rows were deleted or inserted would split differently).
That lets the sink's effectively-once delivery, which reads back what each task landed, skip
exactly what landed (see :mod:`iggy_spark.delivery`: a chunk read again without the exported
snapshot holds other rows, so the sink skips by message id).

A chunk is a range ``(lo, hi]`` of a table's primary key (of ``ctid`` for a table without one),
read by one Spark partition in a ``REPEATABLE READ`` transaction that imports the snapshot the
slot exported, so every chunk sees the tables exactly as of the consistent point. Bounds only
partition the key space, so they may be computed at any moment: the driver finds them with
index-ordered ``OFFSET`` probes at planning time, and a replayed batch may split its range
differently and still read the same rows.

When the exported snapshot is gone (the driver that held its connection died), chunks are read
at the state current when their transaction starts: see :func:`read_chunk` and the README for
why the consumer's final state per key is still right.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Generator, Iterator, Sequence
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

from postgres_cdc_source import slot
from postgres_cdc_source.decoding import INSERT, Change, RowShape, build_change
from postgres_cdc_source.decoding.test_decoding import CATALOG_QUERY, table_info_from_rows
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.lsn import format_lsn
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.schema import ARROW_SCHEMA
from postgres_cdc_source.sql_json import row_json_sql, text_json_sql
from postgres_cdc_source.sql_names import Name
from postgres_cdc_source.values import converter_for_oid

__all__ = [
    "READ", "Position", "Chunk", "SnapshotTable", "SnapshotPartition", "in_progress",
    "start_offset", "position_of", "offset_of", "offset_key", "captured_tables", "describe",
    "RESELECT_UNTIL", "PENDING", "PLANNED",
    "plan", "planned_chunks", "read_chunk",
]

log = logging.getLogger(__name__)

READ = "read"
Conn = psycopg.Connection[Any]
Key = tuple[str, ...]
"""A chunk bound: the chunk key's values as their output text (``ctid`` as ``(block,0)``)."""

_CTID = "ctid"
_BLOCK = re.compile(r"\((\d+),0\)")


@dataclass(frozen=True)
class Position:
    """How far a snapshot got; see the module docstring."""

    table: tuple[str, str] | None
    after: Key | None
    chunks: int

    def as_json(self) -> dict[str, Any]:
        return {
            "after": list(self.after) if self.after is not None else None,
            "chunks": self.chunks,
            "table": list(self.table) if self.table is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        table, after = data.get("table"), data.get("after")
        return cls(
            (str(table[0]), str(table[1])) if table else None,
            tuple(str(v) for v in after) if after is not None else None,
            int(data.get("chunks", 0)),
        )

    def describe(self) -> str:
        if self.table is None:
            return "not started"
        where = ".".join(self.table)
        return f"{self.chunks} chunks, {where} done" if self.after is None else (
            f"{self.chunks} chunks, {where} up to key {list(self.after)}"
        )


def in_progress(offset: dict[str, Any]) -> bool:
    """Whether ``offset`` is one of a snapshot still running."""
    return "snapshot" in offset


def start_offset(consistent_point: int) -> dict[str, Any]:
    return offset_of(consistent_point, Position(None, None, 0))


RESELECT_UNTIL = "reselect_until"
PENDING = "pending"
PLANNED = "planned"


def offset_of(
    consistent_point: int, position: Position | None, chunks: Sequence[Chunk] = ()
) -> dict[str, Any]:
    """The offset at ``position``, reached by reading ``chunks``. ``None``: the snapshot is
    finished, and whether the stream must complete unchanged values
    (:mod:`postgres_cdc_source.reselect`) is decided when the next batch is planned, once every
    chunk has been read."""
    offset: dict[str, Any] = {"lsn": format_lsn(consistent_point)}
    if position is not None:
        offset["snapshot"] = position.as_json()
    else:
        offset[RESELECT_UNTIL] = PENDING
    if chunks:
        offset[PLANNED] = [[c.table.schema, c.table.table, _json_key(c.lo), _json_key(c.hi)]
                           for c in chunks]
    return offset


def _json_key(key: Key | None) -> list[str] | None:
    return None if key is None else list(key)


def _key(value: Any) -> Key | None:
    return None if value is None else tuple(str(v) for v in value)


def planned_chunks(conn: Conn, end: dict[str, Any]) -> list[Chunk] | None:
    """The chunks the batch ending at ``end`` was planned with, in their order (chunks of a
    table dropped since are left out: nothing of it can be read). ``None``: ``end`` does not
    say (written before offsets pinned their chunks); plan the range again."""
    planned = end.get(PLANNED)
    if planned is None:
        return None
    tables: dict[tuple[str, str], SnapshotTable | None] = {}
    chunks = []
    for schema, name, lo, hi in planned:
        key = (str(schema), str(name))
        if key not in tables:
            tables[key] = describe(conn, *key)
        table = tables[key]
        if table is not None:
            chunks.append(Chunk(table, _key(lo), _key(hi)))
    return chunks


def position_of(offset: dict[str, Any]) -> Position | None:
    return Position.from_json(offset["snapshot"]) if in_progress(offset) else None


def offset_key(offset: dict[str, Any]) -> str:
    """Canonical JSON of an offset, as Spark compares them."""
    return orjson.dumps(offset, option=orjson.OPT_SORT_KEYS).decode()


@dataclass(frozen=True)
class SnapshotTable:
    """What a chunk reader needs to know of its table, looked up on the driver."""

    schema: str
    table: str
    columns: tuple[str, ...]  # published columns (generated ones excluded, as pgoutput does)
    type_oids: tuple[int, ...]
    identity: tuple[int, ...]  # indexes into columns of the replica identity (the `key` JSON)
    chunk_key: tuple[str, ...]  # primary key columns, or ("ctid",)
    rows_per_block: float  # for ctid chunks: the table's average, from its statistics


@dataclass(frozen=True)
class SnapshotPartition(InputPartition):
    """One chunk: rows of ``table`` with ``lo < chunk key <= hi`` (open ends when ``None``)."""

    table: SnapshotTable
    lo: Key | None
    hi: Key | None
    snapshot: str | None  # the exported snapshot to import, while its exporter lives
    consistent_point: int


# -- planning (driver) -----------------------------------------------------------------------

_TABLES_PGOUTPUT = """\
SELECT n.nspname, c.relname FROM pg_catalog.pg_publication_tables AS p
JOIN pg_catalog.pg_namespace AS n ON n.nspname = p.schemaname
JOIN pg_catalog.pg_class AS c ON c.relnamespace = n.oid AND c.relname = p.tablename
WHERE p.pubname = %s AND c.relkind = 'r'"""
_TABLES_ALL = """\
SELECT n.nspname, c.relname FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_toast'"""
_PRIMARY_KEY = """\
SELECT a.attname FROM pg_catalog.pg_index AS i
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = %s::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)"""
_STATS = """\
SELECT c.reltuples::float8, c.relpages::int8,
       pg_catalog.pg_relation_size(c.oid) / current_setting('block_size')::int8
FROM pg_catalog.pg_class AS c WHERE c.oid = %s::regclass"""


def captured_tables(conn: Conn, options: CdcOptions) -> list[tuple[str, str]]:
    """The tables a snapshot reads, sorted: regular, logged tables the slot's changes can come
    from (the publication's, for pgoutput), filtered by include/exclude_tables."""
    if options.plugin == "pgoutput":
        rows = conn.execute(_TABLES_PGOUTPUT, (options.publication,)).fetchall()
    else:
        rows = conn.execute(_TABLES_ALL).fetchall()
    return sorted((str(s), str(t)) for s, t in rows if options.keeps(str(s), str(t)))


def describe(conn: Conn, schema: str, table: str) -> SnapshotTable | None:
    """The table's published columns, identity and chunk key; ``None`` if it is gone."""
    rows = conn.execute(CATALOG_QUERY, (schema, table)).fetchall()
    info = table_info_from_rows(schema, table, rows)
    if info is None:
        return None
    published = [c for c in info.columns if not c.generated]
    regclass = sql.Identifier(schema, table).as_string(conn)
    key = tuple(str(r[0]) for r in conn.execute(_PRIMARY_KEY, (regclass,)).fetchall())
    per_block = 0.0
    if not key:
        stats = conn.execute(_STATS, (regclass,)).fetchone()
        assert stats is not None
        tuples, pages, _ = stats
        per_block = float(tuples) / int(pages) if int(pages) > 0 and float(tuples) > 0 else 0.0
    return SnapshotTable(
        schema, table, tuple(c.name for c in published), tuple(c.type_oid for c in published),
        tuple(i for i, c in enumerate(published) if c.key), key or (_CTID,), per_block,
    )


def _row(values: Sequence[Any]) -> sql.Composable:
    return sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(values)))


def _key_columns(table: SnapshotTable) -> sql.Composable:
    return sql.SQL("({})").format(sql.SQL(", ").join(map(Name, table.chunk_key)))


def _range(
    table: SnapshotTable, lo: Key | None, hi: Key | None
) -> tuple[sql.Composable, list[str]]:
    """``WHERE`` clause and parameters of ``lo < chunk key <= hi``. Bounds travel as text
    parameters of unknown type, which Postgres reads with the key columns' input functions."""
    columns = _key_columns(table)
    parts: list[sql.Composable] = []
    params: list[str] = []
    if lo is not None:
        parts.append(sql.SQL("{} > {}").format(columns, _row(lo)))
        params.extend(lo)
    if hi is not None:
        parts.append(sql.SQL("{} <= {}").format(columns, _row(hi)))
        params.extend(hi)
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(parts) if parts else sql.SQL("")
    return where, params


def _next_bound(
    conn: Conn, table: SnapshotTable, lo: Key | None, limit: Key | None, rows: int
) -> Key | None:
    """The upper bound of the chunk of about ``rows`` rows after ``lo``; ``None`` when the rest
    of the table (up to ``limit``) fits in it."""
    if table.chunk_key == (_CTID,):
        start = _block(lo) if lo else 0
        regclass = sql.Identifier(table.schema, table.table).as_string(conn)
        stats = conn.execute(_STATS, (regclass,)).fetchone()
        assert stats is not None
        per_block = table.rows_per_block or 100.0  # never analyzed: a guess, only sizes chunks
        end = start + max(1, int(rows / per_block))
        if end >= int(stats[2]) or (limit is not None and end >= _block(limit)):
            return None
        return (f"({end},0)",)
    where, params = _range(table, lo, limit)
    columns = sql.SQL(", ").join(
        sql.SQL("{}::text").format(Name(c)) for c in table.chunk_key
    )
    query = sql.SQL("SELECT {} FROM ONLY {}{} ORDER BY {} OFFSET %s LIMIT 1").format(
        columns, Name(table.schema, table.table), where,
        sql.SQL(", ").join(map(Name, table.chunk_key)))
    row = conn.execute(query, [*params, rows - 1]).fetchone()
    if row is None:
        return None
    bound = tuple(str(v) for v in row)
    return None if bound == limit else bound


def _block(bound: Key) -> int:
    """The page number of a ``ctid`` bound ``(block,0)``."""
    match = _BLOCK.fullmatch(bound[0])
    if match is None:
        raise ValueError(f"bad ctid bound {bound!r} in a snapshot offset")
    return int(match.group(1))


@dataclass(frozen=True)
class Chunk:
    """A planned chunk; :class:`SnapshotPartition` adds what reading it needs."""

    table: SnapshotTable
    lo: Key | None
    hi: Key | None


def plan(
    conn: Conn, options: CdcOptions, start: Position, end: Position | None, *, bounded: bool
) -> tuple[list[Chunk], Position | None]:
    """The chunks after ``start``: up to ``end`` (``None``: to the end of the snapshot), and with
    ``bounded`` no more than about ``snapshot_max_rows_per_trigger`` rows. Returns them with the
    position after the last (``None``: the snapshot is finished)."""
    chunk_rows = options.snapshot_chunk_rows
    full = options.snapshot_max_rows_per_trigger
    chunks: list[Chunk] = []
    count = start.chunks
    for name in captured_tables(conn, options):
        if start.table is not None and (
            name < start.table or (name == start.table and start.after is None)
        ):
            continue  # delivered before
        if end is not None and (end.table is None or name > end.table):
            break
        limit = end.after if end is not None and name == end.table else None
        table = describe(conn, *name)
        if table is None:
            continue  # dropped since it was listed
        lo = start.after if name == start.table else None
        while True:
            hi = _next_bound(conn, table, lo, limit, chunk_rows)
            chunks.append(Chunk(table, lo, hi if hi is not None else limit))
            count += 1
            if hi is None:
                break
            lo = hi
            if bounded and len(chunks) * chunk_rows >= full:
                return chunks, Position(name, lo, count)
        if end is not None and name == end.table:
            return chunks, end
        if bounded and len(chunks) * chunk_rows >= full:
            return chunks, Position(name, None, count)
    return chunks, end


# -- reading (executors) ---------------------------------------------------------------------


_TEXT_ONLY = AdaptersMap()
# Every value as the text of its type's output function, exactly what pgoutput sends: psycopg
# falls back to OID 0's loader for every type it has no loader for, and this map has no other.
_TEXT_ONLY.register_loader(0, TextLoader)
_TEXT_ONLY.register_dumper(str, StrDumperUnknown)  # parameters of unknown type, as text
_TEXT_ONLY.register_dumper(int, IntDumper)  # the server-side cursor's FETCH count


def read_chunk(
    options: CdcOptions, part: SnapshotPartition
) -> Generator[pa.RecordBatch, None, None]:
    """The chunk's rows as Arrow batches of ``batch_rows``, streamed through a server-side
    cursor (``fetch_rows`` per round trip), so memory does not grow with the table.

    The transaction imports the exported snapshot when there is one. Once it is gone (its
    exporter, the driver, died), the chunk is read at the current state instead: that state
    already holds some changes made after the consistent point, which the stream then
    delivers again after the snapshot, so each key still ends in its latest state (and a
    replayed chunk carries the same ids).
    """
    conn = slot.connect(options, autocommit=False, context=_TEXT_ONLY)
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
        router = Router(options)
        where, params = _range(table, part.lo, part.hi)
        name = Name(table.schema, table.table)
        in_sql = None if router.by_column else _json_columns(table, part.consistent_point)
        with conn.cursor(name="pg_cdc_snapshot") as cur:
            if in_sql is not None:  # the JSON built by Postgres, the worker only moves it
                cur.execute(sql.SQL("SELECT {} FROM ONLY {}{}").format(in_sql, name, where),
                            params)
                yield from _ready_batches(cur, part, router, options.fetch_rows,
                                          options.batch_rows)
            else:
                cur.itersize = options.fetch_rows
                cur.execute(sql.SQL("SELECT {}, {} FROM ONLY {}{}").format(
                    sql.SQL(", ").join(map(Name, table.columns)),
                    sql.SQL(", ").join(map(Name, table.chunk_key)), name, where),
                    params)
                yield from _batches(cur, part, router, options.batch_rows)
        conn.rollback()
    finally:
        conn.close()


def _json_columns(table: SnapshotTable, consistent_point: int) -> sql.Composable | None:
    """``key``, ``after`` and ``id`` of a row as SQL (:mod:`postgres_cdc_source.sql_json`);
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
    point = format_lsn(part.consistent_point)
    route = router.route if router.active else None
    while fetched := cur.fetchmany(fetch_rows):
        for start in range(0, len(fetched), batch_rows):
            rows = fetched[start:start + batch_rows]
            keys, afters, ids = (list(c) for c in zip(*rows, strict=True))
            places = [route(Change(part.consistent_point, 0, table.schema, table.table, READ, k,
                                   None, a, ())) for k, a in zip(keys, afters, strict=True)
                      ] if route is not None else []
            yield _batch(table, point, keys, afters, ids, places)


def _batches(
    rows: Iterator[tuple[Any, ...]], part: SnapshotPartition, router: Router, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Rows -> Arrow batches. Each row is converted and serialized as pgoutput's decoder does an
    insert (same converters, same ``orjson`` objects in column order), inlined here because it
    is the snapshot's hot path; a value a converter rejects is reported by :func:`build_change`,
    which names the column."""
    table = part.table
    shape = RowShape(table.schema, table.table, table.columns,
                     [converter_for_oid(oid) for oid in table.type_oids], table.identity, True)
    names, converters, identity = shape.names, shape.converters, shape.key
    key_names = shape.key_names
    width = len(names)
    point = format_lsn(part.consistent_point)
    prefix = f"{point}:{READ}:"
    route = router.route if router.active else None
    dumps = orjson.dumps
    keys: list[str | None] = []
    afters: list[str | None] = []
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
        after = dumps(dict(zip(names, values, strict=True))).decode()
        key = (dumps(dict(zip(key_names, [values[i] for i in identity], strict=True))).decode()
               if identity else None)
        keys.append(key)
        afters.append(after)
        ids.append(prefix + dumps([table.schema, table.table, *row[width:]]).decode())
        if route is not None:
            row_values = dict(zip(names, values, strict=True))  # for routes by a column
            places.append(route(Change(part.consistent_point, 0, table.schema, table.table, READ,
                                       key, None, after, (), row_values)))
        if len(ids) >= batch_rows:
            yield _batch(table, point, keys, afters, ids, places)
            keys, afters, ids, places = [], [], [], []
    if ids:
        yield _batch(table, point, keys, afters, ids, places)


def _batch(
    table: SnapshotTable, point: str, keys: list[str | None], afters: list[str | None],
    ids: list[str], places: list[tuple[str | None, str | None, str | None]],
) -> pa.RecordBatch:
    n = len(ids)
    string = pa.string()

    def repeat(value: str) -> pa.Array:
        return pa.array([value] * n, string)

    if places:
        stream, topic, partition_key = (pa.array(c, string) for c in zip(*places, strict=True))
    else:
        stream = topic = partition_key = pa.nulls(n, string)
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
            pa.array(keys, string),
            pa.nulls(n, string),
            pa.array(afters, string),
            pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), pa.array([], string)),
            pa.array(ids, string),
            stream,
            topic,
            partition_key,
        ],
        schema=ARROW_SCHEMA,
    )
