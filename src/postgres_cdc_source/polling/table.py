"""The table ``mode=polling`` reads: its checks at ``load()`` and every SQL statement run on it.

:func:`inspect` resolves the ``table`` option as SQL would (``schema.table``, ``search_path``)
and refuses, naming the option, a table that does not exist or is not a table, a tracking
column that does not exist or has no ordering, a processed column that is not boolean, and
``delete_after_read`` on a table without a key. The result, :class:`PolledTable`, is picklable
and travels to executors inside the partition.

Which rows a statement touches is decided by two predicates over ``(tracking value, row xid)``,
where the row xid is the 64-bit id of the transaction that wrote the row version (``xmin``,
widened against the statement's own snapshot, so it is exact for every version the statement
can see): ``batch(start, end)`` for reading and ``covered(end)`` for the destructive step. The
reasoning is in :mod:`postgres_cdc_source.polling.reader`. Identifiers are composed with
:mod:`psycopg.sql`, values are parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from postgres_cdc_source.catalog import table_info
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.options import PollingOptions
from postgres_cdc_source.polling.offset import PollOffset
from postgres_cdc_source.rows.json.sql import row_json_sql
from postgres_cdc_source.sql_names import Name

__all__ = ["PolledTable", "inspect"]

_BOOLEAN = 16
_TABLE_KINDS = ("r", "p")  # ordinary and partitioned tables have row versions with xmin

# The snapshot of the statement it appears in: `nx` is its xmax (the first xid not yet
# assigned when the statement started), which every row version it sees was written below.
_SNAPSHOT = sql.SQL("(SELECT txid_snapshot_xmax(txid_current_snapshot()) AS nx) AS s")
# xmin is a 32-bit xid; widen it to the most recent 64-bit xid with those low bits below nx.
# Exact for every version Postgres has not frozen (their xids are less than 2^31 old). A frozen
# version keeps its raw xmin, and one more than 2^32 transactions old may widen to a recent xid:
# it then counts as written by that transaction and is read once more (a duplicate, never a
# loss, since the widening of a value only moves forward as nx does).
_ROW_XID = sql.SQL(
    "(s.nx - ((s.nx - t.xmin::text::bigint) %% 4294967296 + 4294967296) %% 4294967296)"
)


@dataclass(frozen=True)
class PolledTable:
    """What ``mode=polling`` knows about its table; built by :func:`inspect`."""

    schema: str
    name: str
    columns: tuple[str, ...]  # live, non-generated columns in attnum order (as pgoutput sends)
    type_oids: tuple[int, ...]
    key: tuple[int, ...]  # indexes into columns: the replica-identity key, as the decoders use
    tracking: str
    tracking_oid: int
    processed: str | None
    delete: bool
    partitioned: bool = False  # a partitioned table: its rows are its partitions'

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    # -- SQL ----------------------------------------------------------------------------------

    def _ident(self) -> sql.Composable:
        return Name(self.schema, self.name)

    def _place(self) -> sql.Composable:
        """The row version's place, the id of a row without a key: its ``ctid``, and in a
        partitioned table its partition's oid too (a ``ctid`` is a place in one partition)."""
        if self.partitioned:
            return sql.SQL("t.tableoid::text || ':' || t.ctid::text")
        return sql.SQL("t.ctid::text")

    def _col(self, name: str) -> sql.Composable:
        return sql.SQL("t.{}").format(Name(name))

    def _unprocessed(self) -> sql.Composable:
        if self.processed is None:
            return sql.SQL("true")
        return sql.SQL("{} IS NOT TRUE").format(self._col(self.processed))

    def batch(self, start: PollOffset, end: PollOffset) -> tuple[sql.Composable, dict[str, Any]]:
        """WHERE clause (and parameters) of the rows of batch ``(start, end]``.

        The rows written below ``end.frontier`` that are either after ``start.tracking`` up to
        ``end.tracking`` (the cursor part), or at or below ``start.tracking`` but written at or
        above ``start.frontier`` (late commits: invisible when ``start`` was planned).
        """
        tracking = self._col(self.tracking)
        params: dict[str, Any] = {"end_frontier": end.frontier, "end_tracking": end.tracking}
        if start.tracking is None:
            window = sql.SQL("{t} <= %(end_tracking)s").format(t=tracking)
        else:
            params |= {"start_tracking": start.tracking, "start_frontier": start.frontier}
            window = sql.SQL(
                "(({t} > %(start_tracking)s AND {t} <= %(end_tracking)s)"
                " OR ({t} <= %(start_tracking)s AND {x} >= %(start_frontier)s))"
            ).format(t=tracking, x=_ROW_XID)
        where = sql.SQL("{x} < %(end_frontier)s AND {u} AND {w}").format(
            x=_ROW_XID, u=self._unprocessed(), w=window
        )
        return where, params

    def covered(self, end: PollOffset) -> tuple[sql.Composable, dict[str, Any]]:
        """WHERE clause of every row of every batch up to ``end`` that is still as it was read.

        The union of the batches up to ``end`` is exactly the versions written below
        ``end.frontier`` with a tracking value at or below ``end.tracking``; a version written
        later (an update after the read) is not in it.
        """
        where = sql.SQL("{x} < %(frontier)s AND {t} <= %(tracking)s AND {u}").format(
            x=_ROW_XID, t=self._col(self.tracking), u=self._unprocessed()
        )
        return where, {"frontier": end.frontier, "tracking": end.tracking}

    def json_columns(self) -> sql.Composable | None:
        """The row's ``key`` and ``after`` JSON, built by Postgres (:mod:`~postgres_cdc_source.
        rows.json.sql`); ``None`` when a column's type needs converting in Python."""
        after = row_json_sql(self.columns, self.type_oids, [self._col(c) for c in self.columns])
        names = [self.columns[i] for i in self.key]
        key = row_json_sql(names, [self.type_oids[i] for i in self.key],
                           [self._col(c) for c in names])
        if after is None or key is None:
            return None
        return sql.SQL("{}, {}").format(key if self.key else sql.SQL("NULL::text"), after)

    def select_rows(
        self, start: PollOffset, end: PollOffset, columns: sql.Composable | None = None
    ) -> tuple[sql.Composed, dict[str, Any]]:
        """The batch's rows: xmin, widened xid, ctid, then every column (or ``columns``, e.g.
        :meth:`json_columns`), in tracking order."""
        where, params = self.batch(start, end)
        query = sql.SQL(
            "SELECT t.xmin::text, {x}::text, {place}, {cols} FROM {tbl} AS t, {snap}"
            " WHERE {where} ORDER BY {t}"
        ).format(
            x=_ROW_XID, place=self._place(),
            cols=columns or sql.SQL(", ").join(self._col(c) for c in self.columns),
            tbl=self._ident(),
            snap=_SNAPSHOT,
            where=where,
            t=self._col(self.tracking),
        )
        return query, params

    def select_cursor_end(
        self, start: PollOffset, frontier: int, limit: int | None
    ) -> tuple[sql.Composed, dict[str, Any]]:
        """The tracking value a batch from ``start`` ends on: the ``limit``-th next one (the
        batch then takes every row with that value), or the last one without a limit."""
        tracking = self._col(self.tracking)
        params: dict[str, Any] = {"frontier": frontier}
        if limit is not None:
            params["limit"] = limit
        after: sql.Composable = sql.SQL("true")
        if start.tracking is not None:
            after = sql.SQL("{t} > %(start_tracking)s").format(t=tracking)
            params["start_tracking"] = start.tracking
        rows = (
            "SELECT {t} AS v FROM {tbl} AS t, {snap}"
            " WHERE {x} < %(frontier)s AND {u} AND {after} AND {t} IS NOT NULL"
        )
        if limit is None:  # the last one: a backward index scan stops at the first match
            template = rows + " ORDER BY {t} DESC LIMIT 1"
        else:
            template = (f"SELECT q.v FROM ({rows} ORDER BY {{t}} LIMIT %(limit)s) AS q"
                        " ORDER BY q.v DESC LIMIT 1")
        query = sql.SQL(template).format(
            t=tracking, tbl=self._ident(), snap=_SNAPSHOT, x=_ROW_XID,
            u=self._unprocessed(), after=after,
        )
        return query, params

    def any_late(self, start: PollOffset, frontier: int) -> tuple[sql.Composed, dict[str, Any]]:
        """Whether rows at or below ``start.tracking`` committed since ``start`` was planned."""
        query = sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM {tbl} AS t, {snap} WHERE {x} >= %(start_frontier)s"
            " AND {x} < %(frontier)s AND {t} <= %(start_tracking)s AND {u})"
        ).format(
            tbl=self._ident(), snap=_SNAPSHOT, x=_ROW_XID, t=self._col(self.tracking),
            u=self._unprocessed(),
        )
        return query, {
            "start_frontier": start.frontier,
            "frontier": frontier,
            "start_tracking": start.tracking,
        }

    def destructive(self, end: PollOffset) -> tuple[sql.Composed, dict[str, Any]] | None:
        """The DELETE or UPDATE for every covered row up to ``end``; ``None`` when not
        destructive or nothing was read yet."""
        if end.tracking is None or not (self.delete or self.processed):
            return None
        where, params = self.covered(end)
        if self.delete:
            stmt = sql.SQL("DELETE FROM {tbl} AS t USING {snap} WHERE {where}")
        else:
            stmt = sql.SQL("UPDATE {tbl} AS t SET {p} = true FROM {snap} WHERE {where}")
        return stmt.format(
            tbl=self._ident(), snap=_SNAPSHOT, where=where,
            p=Name(self.processed or ""),
        ), params


FRONTIER_QUERY = "SELECT txid_snapshot_xmin(txid_current_snapshot())"
"""The frontier now: the oldest transaction still running (or the next one, if none runs)."""


def inspect(
    conn: psycopg.Connection[Any], options: PollingOptions, *, generated: bool = False
) -> PolledTable:
    """Resolve and check the polled table (its rows with its stored generated columns when
    ``generated``); raise :class:`ConfigError` naming the bad option."""
    try:
        row = conn.execute(
            "SELECT n.nspname, c.relname, c.relkind::text, c.oid::int8"
            " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.oid = to_regclass(%s)",
            (options.table,),
        ).fetchone()
    except psycopg.DatabaseError as exc:  # a malformed name: to_regclass raises on syntax
        raise ConfigError(
            "table", f"bad value: {options.table!r}: {exc.diag.message_primary}"
        ) from exc
    if row is None:
        raise ConfigError(
            "table", f"bad value: {options.table!r} does not exist (or is not visible)"
        )
    schema, name, kind, oid = row
    if kind not in _TABLE_KINDS:
        raise ConfigError("table", f"bad value: {schema}.{name} is not a table")
    info = table_info(conn, schema, name, generated=generated)
    assert info is not None
    columns = [c for c in info.columns if not c.generated]
    by_name = {c.name: c for c in columns}
    tracking = by_name.get(options.tracking_column)
    if tracking is None:
        raise ConfigError(
            "tracking_column",
            f"bad value: {schema}.{name} has no column "
            f"{options.tracking_column!r}",
        )
    processed = None
    if options.processed_column is not None:
        processed = by_name.get(options.processed_column)
        if processed is None or _base_type(conn, processed.type_oid) != _BOOLEAN:
            what = "no column" if processed is None else "a non-boolean column"
            raise ConfigError(
                "processed_column",
                f"bad value: {schema}.{name} has {what} "
                f"{options.processed_column!r} (it must be boolean)",
            )
    key = tuple(i for i, c in enumerate(columns) if c.key)
    if options.delete_after_read and not key:
        raise ConfigError(
            "delete_after_read",
            f"delete_after_read needs a key on {schema}.{name} (a primary key or a replica "
            "identity index): without one a deleted row cannot be told from its duplicates",
        )
    table = PolledTable(
        schema=schema, name=name, columns=tuple(c.name for c in columns),
        type_oids=tuple(c.type_oid for c in columns), key=key, tracking=tracking.name,
        tracking_oid=tracking.type_oid, processed=processed.name if processed else None,
        delete=options.delete_after_read, partitioned=kind == "p",
    )
    _check_orderable(conn, table)
    _check_privileges(conn, table, oid, options)
    return table


def _base_type(conn: psycopg.Connection[Any], type_oid: int) -> int:
    row = conn.execute(
        "SELECT coalesce(nullif(typbasetype, 0), oid)::int8 FROM pg_catalog.pg_type"
        " WHERE oid = %s",
        (type_oid,),
    ).fetchone()
    return int(row[0]) if row else 0


def _check_orderable(conn: psycopg.Connection[Any], table: PolledTable) -> None:
    """Let the planner say whether the tracking column can be compared and sorted."""
    t = sql.Identifier(table.tracking)
    probe = sql.SQL("SELECT {t} FROM {tbl} WHERE {t} > {t} ORDER BY {t} LIMIT 0").format(
        t=t, tbl=sql.Identifier(table.schema, table.name)
    )
    try:
        with conn.transaction():
            conn.execute(probe)
    except (pgerrors.UndefinedFunction, pgerrors.UndefinedObject) as exc:
        raise ConfigError(
            "tracking_column",
            f"bad value: {table.tracking!r} of {table.qualified} cannot be "
            f"ordered ({exc.diag.message_primary})",
        ) from exc


def _check_privileges(
    conn: psycopg.Connection[Any], table: PolledTable, oid: int, options: PollingOptions
) -> None:
    needed = [("SELECT", "table")]
    if options.delete_after_read:
        needed.append(("DELETE", "delete_after_read"))
    if options.processed_column is not None:
        needed.append(("UPDATE", "processed_column"))
    for privilege, option in needed:
        row = conn.execute("SELECT has_table_privilege(%s::oid, %s)", (oid, privilege)).fetchone()
        if not (row and row[0]):
            raise ConfigError(
                option,
                f"role {conn.info.user!r} lacks {privilege} on {table.qualified}, which "
                f"{option} needs",
            )
