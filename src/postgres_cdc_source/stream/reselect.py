"""Complete changes that left a TOASTed value out, by reading it from the table (reselect).

Postgres does not log a large (TOASTed) value an update left unchanged: the change lists the
column in ``unchanged`` and a consumer keeps the value from the row it holds. That is right
while the consumer's rows are right. After a snapshot that lost its exported snapshot (the
driver died mid-snapshot, Postgres restarted, or the slot already existed), chunks read late
show a newer state than the consistent point, and the row a consumer holds under a key can be
another row's, or missing (docs: pg_cdc, After a crash during the snapshot). This module closes
that gap the way Debezium's reselect post-processor does: the column's value is read from the
table.

Rule, for a query whose snapshot was not exact (``horizon``: an LSN taken once every chunk had
been read): a change with unchanged columns is completed when its transaction committed at or
before the horizon, or when it changes the row's key. Then each key's final state is exact:

* the value read is the column's value at reading time, which is after the change committed.
  For the last change of a key nothing touched the row since, so it is the change's own value;
* a later change that is not completed (after the horizon, same key) takes the column from the
  row the consumer holds, which the previous change of that key set right: a completed one was
  read while the row stayed under that key, and a snapshot row with no change of its key before
  the horizon was read in the state the later change started from.

Earlier changes of a key may show a newer value (the column as it is when read) until the later
changes arrive. A row no longer under the change's key (deleted or moved since) is left as
Postgres sent it: a later change of that key follows. Tables without a primary key, and keys of
types whose JSON does not read back as the same value (``bytea``, floats, arrays), are left as
sent.

With ``row_format=struct`` and ``variant`` the same rule holds: a value read is converted as
the query's decoders convert it, and a key is matched by its JSON mode's text, both as the
query's row format gives them
(:meth:`~postgres_cdc_source.rows.RowFormat.reselect_converters`), so every mode completes the
same changes with the same values (in ``variant`` mode, not those of a table keyed by a json
or jsonb column).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import orjson
import psycopg
from psycopg import sql

from postgres_cdc_source import connections, snapshot
from postgres_cdc_source.decoding import UNCHANGED, UPDATE, Change, Commit
from postgres_cdc_source.decoding.blocks import ChangeBlock, Chunk
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows import RowFormat
from postgres_cdc_source.rows.json.format import JSON_ROWS
from postgres_cdc_source.rows.json.sql import row_json_sql
from postgres_cdc_source.rows.json.values import Converter
from postgres_cdc_source.rows.shape import json_text
from postgres_cdc_source.sql_names import Name

__all__ = ["complete"]

log = logging.getLogger(__name__)

_BATCH_KEYS = 1000
"""Keys looked up per query (a batch of changes rarely needs more; the limit bounds one query)."""

Transactions = Iterable[tuple[Commit, Iterator[Chunk]]]


def complete(
    txns: Transactions, options: CdcOptions, horizon: int | None,
    rows: RowFormat = JSON_ROWS,
) -> Iterator[tuple[Commit, Iterator[Chunk]]]:
    """``txns`` with the changes the rule above names completed; as is when ``horizon`` is
    ``None`` (the snapshot was exact, or there was none). ``rows``: the query's row format,
    which converts the values read and makes the completed images."""
    if horizon is None:
        yield from txns
        return
    tables = _Tables(options, rows)
    try:
        for commit, chunks in txns:
            every = commit.end_lsn <= horizon
            # a block the compiled core decoded holds no change with unchanged columns
            yield commit, (chunk if isinstance(chunk, ChangeBlock) else tables.complete(
                chunk, every) for chunk in chunks)
    finally:
        tables.close()


def _moves_key(change: Change) -> bool:
    """Whether an update gives its row another key: its ``key`` (the old one Postgres sent, or
    the new row's when it sent none) differs from the new row's key columns."""
    if change.op != UPDATE or change.key is None or change.new_row is None:
        return False
    typed = isinstance(change.key, dict)  # struct or variant: dicts, compared as such
    old = change.key if typed else orjson.loads(change.key)
    row = change.new_row
    if any(row.get(name, UNCHANGED) is UNCHANGED for name in old):
        return False
    if typed:
        return bool({name: row[name] for name in old} != old)
    return bool(orjson.dumps({name: row[name] for name in old}).decode() != change.key)


class _Table:
    """How to look rows of one table up by primary key, and convert what comes back.

    ``converters``: each column's, as the query's decoders convert it; ``json_value``: a key
    column's converted value -> its JSON mode's value (the same value for the JSON mode)."""

    def __init__(self, described: snapshot.SnapshotTable, key_json: sql.Composable,
                 converters: dict[str, Converter],
                 json_value: dict[str, Callable[[Any], Any]]) -> None:
        self.key = described.chunk_key
        self.converters = converters
        self.json_value = json_value
        self.name = Name(described.schema, described.table)
        self.relation = described.relation()  # a partitioned table whole
        self.label = f"{described.schema}.{described.table}"
        self.key_json = key_json  # the key's JSON as the decoders write it, built by Postgres

    def query(self, columns: Sequence[str]) -> sql.Composed:
        """``(key JSON, column text...)`` of the rows whose key is in the JSON array parameter;
        one index lookup per key (the lateral join keeps the planner off a scan)."""
        return sql.SQL(
            "SELECT x.* FROM json_populate_recordset(NULL::{t}, %s::json) AS r, LATERAL ("
            "SELECT {key_json}, {columns} FROM {src} AS t WHERE {match}) AS x"
        ).format(
            t=self.name, src=self.relation,
            key_json=self.key_json,
            columns=sql.SQL(", ").join(  # the output text, as the decoders convert it
                sql.SQL("format('%%s', {})").format(Name("t", c)) for c in columns),
            match=sql.SQL(" AND ").join(
                sql.SQL("{} = {}").format(Name("t", k), Name("r", k)) for k in self.key),
        )


class _Tables:
    """The lookups of one partition's read: a connection opened on first need, tables described
    once."""

    def __init__(self, options: CdcOptions, rows: RowFormat) -> None:
        self.options = options
        self.rows = rows
        self._conn: psycopg.Connection[Any] | None = None
        self._tables: dict[tuple[str, str], _Table | None] = {}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            # autocommit: every lookup reads the latest committed state (the rule needs it)
            self._conn = connections.connect(self.options, autocommit=True)
        return self._conn

    def _table(self, schema: str, table: str) -> _Table | None:
        if (schema, table) not in self._tables:
            self._tables[schema, table] = _lookup_table(
                self._connection(), schema, table, self.rows, self.options.delivers_generated)
        return self._tables[schema, table]

    def complete(self, changes: list[Change], every: bool) -> list[Change]:
        todo: dict[tuple[str, str], list[int]] = {}
        for i, change in enumerate(changes):
            if change.unchanged and (every or _moves_key(change)):
                assert change.schema is not None and change.table is not None  # a row change
                todo.setdefault((change.schema, change.table), []).append(i)
        if not todo:
            return changes
        done = list(changes)
        for (schema, name), indexes in todo.items():
            table = self._table(schema, name)
            if table is None:
                continue
            for start in range(0, len(indexes), _BATCH_KEYS):
                self._fill(table, done, indexes[start:start + _BATCH_KEYS])
        return done

    def _fill(self, table: _Table, changes: list[Change], indexes: list[int]) -> None:
        keys: dict[str, list[int]] = {}
        for i in indexes:
            row = changes[i].new_row
            assert row is not None  # build_change keeps it for every change with unchanged
            if any(row.get(k, UNCHANGED) is UNCHANGED for k in table.key):
                continue
            key = orjson.dumps({k: table.json_value[k](row[k]) for k in table.key}).decode()
            keys.setdefault(key, []).append(i)
        if not keys:
            return
        columns = sorted({c for i in indexes for c in changes[i].unchanged}
                         & table.converters.keys())
        found = self._connection().execute(
            table.query(columns), ("[" + ",".join(keys) + "]",)).fetchall()
        for key, *texts in found:
            current = {
                c: None if t is None else table.converters[c](t)
                for c, t in zip(columns, texts, strict=True)
            }
            for i in keys.pop(key, ()):
                changes[i] = _completed(changes[i], current, self.rows.encode_image)
        if keys:
            log.info("pg_cdc reselect: %d changed rows of %s no longer under their key; "
                     "left as Postgres sent them", len(keys), table.label)


def _completed(change: Change, current: dict[str, Any],
               encode: Callable[[dict[str, Any]], Any] = json_text) -> Change:
    """``change`` with its unchanged columns filled from ``current``, its new image made by
    ``encode`` (the row format's: JSON text, or the dict itself)."""
    row = change.new_row
    assert row is not None
    if any(c not in current for c in change.unchanged):
        return change
    after = {n: current[n] if v is UNCHANGED else v for n, v in row.items()}
    values = change.values
    if values is not None:
        values = {**values, **{c: current[c] for c in change.unchanged}}
    return change._replace(after=encode(after),
                           unchanged=(), values=values, new_row=None)


def _lookup_table(conn: psycopg.Connection[Any], schema: str, table: str,
                  rows: RowFormat, generated: bool) -> _Table | None:
    """The table's lookup, or ``None`` when rows cannot be found by key: the table is gone, has
    no primary key, a key column's JSON would not read back as its value, or the row format
    cannot convert its rows back (:meth:`~postgres_cdc_source.rows.RowFormat.
    reselect_converters`: ``struct`` a table not the query's, whose changes fail the batch
    anyway)."""
    described = snapshot.describe(conn, schema, table, generated=generated)
    if described is None or not described.keyed:
        return None
    oids = dict(zip(described.columns, described.type_oids, strict=True))
    key = described.chunk_key
    if any(k not in oids for k in key):
        return None
    key_json = row_json_sql(key, [oids[k] for k in key], [Name("t", k) for k in key])
    if key_json is None:
        return None
    converters = rows.reselect_converters(schema, table, oids, key)
    if converters is None:
        return None
    return _Table(described, key_json, *converters)
