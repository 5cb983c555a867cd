"""Planning a snapshot batch on the driver: which tables, and chunk bounds of about
``snapshot_chunk_rows`` rows found with index-ordered probes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from postgres_cdc_source import partitions
from postgres_cdc_source.catalog import table_info
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import publication
from postgres_cdc_source.snapshot.offsets import Key, PlannedChunk, Position
from postgres_cdc_source.sql_names import Name

__all__ = [
    "Chunk",
    "Key",
    "SnapshotTable",
    "captured_tables",
    "describe",
    "key_range",
    "next_bound",
    "plan",
    "planned_chunks",
]

Conn = psycopg.Connection[Any]
_CTID = "ctid"
_PARTITIONED_CTID = ("tableoid", _CTID)  # a partitioned table without a primary key
_BLOCK = re.compile(r"\((\d+),0\)")


@dataclass(frozen=True)
class SnapshotTable:
    """What a chunk reader needs to know of its table, looked up on the driver."""

    schema: str
    table: str
    columns: tuple[str, ...]  # published columns (generated ones excluded, as pgoutput does)
    type_oids: tuple[int, ...]
    identity: tuple[int, ...]  # indexes into columns of the replica identity (the `key` JSON)
    chunk_key: tuple[str, ...]  # primary key columns, or ("ctid",) (partitioned: "tableoid" too)
    rows_per_block: float  # for ctid chunks: the table's average, from its statistics
    partitioned: bool = False  # a partitioned table: its rows are its partitions'

    @property
    def keyed(self) -> bool:
        """Whether the table has a primary key (its chunks are key ranges)."""
        return _CTID not in self.chunk_key

    def relation(self) -> sql.Composable:
        """The table in a ``FROM``: ``ONLY`` the table, whose inheritance children are tables
        of their own, but a partitioned table whole (``ONLY`` holds none of its rows)."""
        name = Name(self.schema, self.table)
        return name if self.partitioned else sql.SQL("ONLY {}").format(name)


_TABLES_PGOUTPUT = """\
SELECT n.nspname, c.relname FROM pg_catalog.pg_publication_tables AS p
JOIN pg_catalog.pg_namespace AS n ON n.nspname = p.schemaname
JOIN pg_catalog.pg_class AS c ON c.relnamespace = n.oid AND c.relname = p.tablename
WHERE p.pubname = ANY (%s) AND c.relkind IN ('r', 'p')"""
_PRIMARY_KEY = """\
SELECT a.attname FROM pg_catalog.pg_index AS i
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = %s::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)"""
_PARTITIONED = "SELECT relkind = 'p' FROM pg_catalog.pg_class WHERE oid = %s::regclass"
_STATS = """\
SELECT c.reltuples::float8, c.relpages::int8,
       pg_catalog.pg_relation_size(c.oid) / current_setting('block_size')::int8
FROM pg_catalog.pg_class AS c WHERE c.oid = %s::regclass"""


def captured_tables(conn: Conn, options: CdcOptions) -> list[tuple[str, str]]:
    """The tables a snapshot reads, sorted: regular and partitioned logged tables the slot's
    changes can come from (for pgoutput the publication's, as it publishes them: a partitioned
    table whole under ``publish_via_partition_root``, else its partitions; and its insert-only
    sibling's when ``pg_cdc`` manages the pair: tables without a replica identity are there),
    filtered by include/exclude_tables; for test_decoding every table the rules capture, a
    partitioned one whole (:func:`~postgres_cdc_source.partitions.captured`)."""
    if options.plugin != "pgoutput":
        return sorted(t.named for t in partitions.captured(partitions.relations(conn),
                                                           options.keeps))
    names = [options.publication]
    if publication.managed_oids(conn, options.publication) is not None:
        names.append(publication.inserts_name(options.publication))
    rows = conn.execute(_TABLES_PGOUTPUT, (names,)).fetchall()
    return sorted((str(s), str(t)) for s, t in rows if options.keeps(str(s), str(t)))


def describe(
    conn: Conn, schema: str, table: str, *, generated: bool = False
) -> SnapshotTable | None:
    """The table's published columns (with ``generated``, its stored generated ones too),
    identity and chunk key; ``None`` if it is gone."""
    info = table_info(conn, schema, table, generated=generated)
    if info is None:
        return None
    published = [c for c in info.columns if not c.generated]
    regclass = sql.Identifier(schema, table).as_string(conn)
    key = tuple(str(r[0]) for r in conn.execute(_PRIMARY_KEY, (regclass,)).fetchall())
    row = conn.execute(_PARTITIONED, (regclass,)).fetchone()
    partitioned = bool(row and row[0])
    per_block = 0.0
    if not key and partitioned:  # one chunk; a ctid is a row's place in its partition only
        key = _PARTITIONED_CTID
    elif not key:
        stats = conn.execute(_STATS, (regclass,)).fetchone()
        assert stats is not None
        tuples, pages, _ = stats
        per_block = float(tuples) / int(pages) if int(pages) > 0 and float(tuples) > 0 else 0.0
    return SnapshotTable(
        schema, table, tuple(c.name for c in published), tuple(c.type_oid for c in published),
        tuple(i for i, c in enumerate(published) if c.key), key or (_CTID,), per_block,
        partitioned,
    )


def _row(values: Sequence[Any]) -> sql.Composable:
    return sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(values)))


def _key_columns(table: SnapshotTable) -> sql.Composable:
    return sql.SQL("({})").format(sql.SQL(", ").join(map(Name, table.chunk_key)))


def key_range(
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


def next_bound(
    conn: Conn, table: SnapshotTable, lo: Key | None, limit: Key | None, rows: int
) -> Key | None:
    """The upper bound of the chunk of about ``rows`` rows after ``lo``; ``None`` when the rest
    of the table (up to ``limit``) fits in it."""
    if table.chunk_key == _PARTITIONED_CTID:
        return None  # no page ranges across partitions: read whole
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
    where, params = key_range(table, lo, limit)
    # Qualified: an unqualified ORDER BY name would sort by the output column of that name,
    # and the OFFSET would count rows in another order (by the key's text, a bound of 14498
    # for the 5000th of the keys 1..30000).
    key = [sql.SQL("t.{}").format(Name(c)) for c in table.chunk_key]
    names = [sql.Identifier(f"k{i}") for i in range(len(key))]
    inner = sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(k, n) for k, n in zip(key, names, strict=True))
    outer = [sql.SQL("s.{}").format(n) for n in names]
    # the chunk's last key and the one after it (``limit`` included): without a next row the
    # rest fits, so a table of a multiple of ``rows`` rows ends without an empty chunk. The
    # keys are made text outside the scan: inside, Postgres would make each skipped row's text
    # too (twice the time of a probe of an int8 key).
    query = sql.SQL(
        "SELECT {} FROM (SELECT {} FROM {} AS t{} ORDER BY {} OFFSET %s LIMIT 2) AS s ORDER BY {}"
    ).format(sql.SQL(", ").join(sql.SQL("{}::text").format(o) for o in outer), inner,
             table.relation(), where, sql.SQL(", ").join(key), sql.SQL(", ").join(outer))
    found = conn.execute(query, [*params, rows - 1]).fetchall()
    if len(found) < 2:
        return None
    return tuple(str(v) for v in found[0])


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

    def pinned(self) -> PlannedChunk:
        """The chunk as an offset pins it
        (:attr:`~postgres_cdc_source.stream.offset.StreamOffset.planned`)."""
        return (self.table.schema, self.table.table), self.lo, self.hi


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
    names = captured_tables(conn, options)
    for index, name in enumerate(names):
        if start.table is not None and (
            name < start.table or (name == start.table and start.after is None)
        ):
            continue  # delivered before
        if end is not None and (end.table is None or name > end.table):
            break
        limit = end.after if end is not None and name == end.table else None
        table = describe(conn, *name, generated=options.delivers_generated)
        if table is None:
            continue  # dropped since it was listed
        lo = start.after if name == start.table else None
        while True:
            hi = next_bound(conn, table, lo, limit, chunk_rows)
            chunks.append(Chunk(table, lo, hi if hi is not None else limit))
            count += 1
            if hi is None:
                break
            lo = hi
            if bounded and len(chunks) * chunk_rows >= full:
                return chunks, Position(name, lo, count)
        if end is not None and name == end.table:
            return chunks, end
        # a batch full at the last table's end finishes the snapshot: no empty batch after it
        if bounded and len(chunks) * chunk_rows >= full and index + 1 < len(names):
            return chunks, Position(name, None, count)
    return chunks, end


def planned_chunks(
    conn: Conn, bounds: Sequence[PlannedChunk], *, generated: bool = False
) -> list[Chunk]:
    """The chunks a batch's end offset pinned (``bounds``), in their order (chunks of a table
    dropped since are left out: nothing of it can be read)."""
    tables: dict[tuple[str, str], SnapshotTable | None] = {}
    chunks = []
    for name, lo, hi in bounds:
        if name not in tables:
            tables[name] = describe(conn, *name, generated=generated)
        table = tables[name]
        if table is not None:
            chunks.append(Chunk(table, lo, hi))
    return chunks
