"""Slot and publication administration, peeking and advancing: the SQL of the change stream
(the initial snapshot's table reads are in :mod:`postgres_cdc_source.snapshot`).

Identifiers are composed with :mod:`psycopg.sql`; slot names, LSNs and plugin options are query
parameters. Nothing is string-formatted into SQL.

The slot is read with ``pg_logical_slot_peek_*changes`` and moved only with
``pg_replication_slot_advance``, never consumed with ``get_changes``: reading is repeatable, so a
batch Spark replays after a crash decodes to exactly the same rows.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from postgres_cdc_source.connections import connect, connect_with_retry
from postgres_cdc_source.decoding.factory import plugin_options
from postgres_cdc_source.errors import SlotError
from postgres_cdc_source.health import SlotHealth
from postgres_cdc_source.lsn import format_lsn, parse_lsn
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream import publication

__all__ = [
    "SlotState",
    "ExportedSnapshot",
    "export_snapshot",
    "ensure_slot",
    "slot_state",
    "flush_lsn",
    "insert_lsn",
    "advance",
    "bring_to",
    "temporary_copy",
    "peek",
    "publications",
    "first_commit_end",
]

log = logging.getLogger(__name__)

Row = tuple[int, int, "bytes | str"]
Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class SlotState:
    """What ``pg_replication_slots`` says about our slot."""

    plugin: str
    database: str
    active_pid: int | None
    restart_lsn: int
    confirmed_flush: int


def slot_state(conn: Conn, slot: str) -> SlotState | None:
    row = conn.execute(
        "SELECT plugin, slot_type, database, active_pid,"
        " (restart_lsn - '0/0')::int8, (confirmed_flush_lsn - '0/0')::int8"
        " FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    plugin, slot_type, database, active_pid, restart, confirmed = row
    if slot_type != "logical":
        raise SlotError(
            f"replication slot {slot!r} is a {slot_type} slot; pg_cdc needs a "
            "logical one: choose another slot name"
        )
    return SlotState(plugin, database, active_pid, int(restart or 0), int(confirmed or 0))


def ensure_slot(options: CdcOptions) -> SlotState:
    """Check the server and the slot (creating slot and publication if allowed); return its state.

    Every precondition that would otherwise surface as an obscure error inside a Spark task is
    checked here, on the driver, with a message that says what to do. A server restarting
    while the query starts is waited for, as during planning.
    """
    with connect_with_retry(options) as conn:
        wal_level = conn.execute("SHOW wal_level").fetchone()
        if wal_level is None or wal_level[0] != "logical":
            raise SlotError(
                f"wal_level is {wal_level[0] if wal_level else '?'!r}, logical decoding needs "
                "'logical': set wal_level = logical in postgresql.conf and restart Postgres"
            )
        state = slot_state(conn, options.slot)
        if state is None:
            if not options.create_slot:
                raise SlotError(
                    f"replication slot {options.slot!r} does not exist: create it or "
                    "set create_slot=true"
                )
            _create_slot(conn, options)
            state = slot_state(conn, options.slot)
            assert state is not None
        database = conn.info.dbname
        if state.plugin != options.plugin:
            raise SlotError(
                f"replication slot {options.slot!r} uses plugin {state.plugin!r}, not "
                f"{options.plugin!r}: set plugin={state.plugin} or use another slot"
            )
        if state.database != database:
            raise SlotError(
                f"replication slot {options.slot!r} belongs to database "
                f"{state.database!r}, but dsn connects to {database!r}"
            )
        if options.plugin == "pgoutput":
            publication.ensure(conn, options)
        return state


@dataclass
class ExportedSnapshot:
    """A slot created with ``SNAPSHOT 'export'``: its consistent point and the snapshot name.

    The snapshot stays importable (``SET TRANSACTION SNAPSHOT``) only while ``conn``, the
    walsender connection that created the slot, stays open and runs nothing else.
    """

    conn: Conn
    name: str
    consistent_point: int

    def close(self) -> None:
        self.conn.close()

    def survived(self) -> bool:
        """Whether the exporting session is still there, so every transaction that imported the
        snapshot while it lived got it; a session that died (Postgres restarted) took the
        snapshot with it. Asking ends the export: call it once the snapshot is read."""
        if self.conn.closed:
            return False
        try:  # a walsender runs only the simple-query protocol
            result = self.conn.pgconn.exec_(b"SELECT 1")
        except psycopg.Error:
            return False
        return result.status == psycopg.pq.ExecStatus.TUPLES_OK


def export_snapshot(options: CdcOptions) -> ExportedSnapshot | None:
    """Create the slot on a replication connection, exporting the snapshot of its consistent
    point; ``None`` when it cannot be ours to create (it exists, ``create_slot`` is off, the
    server is not set up for it: :func:`ensure_slot` then reports whatever is wrong).

    For pgoutput the publication is created first: pgoutput looks it up as of each decoded
    change, so a change between slot and publication creation could not be decoded.
    """
    with connect_with_retry(options) as conn:
        wal_level = conn.execute("SHOW wal_level").fetchone()
        if not options.create_slot or wal_level is None or wal_level[0] != "logical":
            return None
        if slot_state(conn, options.slot) is not None:
            return None
        if options.plugin == "pgoutput":
            publication.ensure(conn, options)
        modern = conn.info.server_version >= 150000
    repl = connect(options, replication=True)
    command = sql.SQL(
        "CREATE_REPLICATION_SLOT {} LOGICAL {} (SNAPSHOT 'export')"
        if modern
        else "CREATE_REPLICATION_SLOT {} LOGICAL {} EXPORT_SNAPSHOT"
    ).format(sql.Identifier(options.slot), sql.Identifier(options.plugin))
    result = repl.pgconn.exec_(command.as_bytes(repl))
    if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
        error = pgerrors.error_from_result(result, encoding=repl.info.encoding)
        repl.close()
        if isinstance(error, pgerrors.DuplicateObject):
            return None  # created by someone else at the same moment
        raise SlotError(
            f"cannot create replication slot {options.slot!r} with an exported snapshot "
            f"(SQLSTATE {error.sqlstate}): {error.diag.message_primary}"
        ) from error
    point, name = result.get_value(0, 1), result.get_value(0, 2)
    assert point is not None and name is not None
    log.info("created replication slot %s exporting snapshot %s at %s",
             options.slot, name.decode(), point.decode())
    return ExportedSnapshot(repl, name.decode(), parse_lsn(point.decode()))


def _create_slot(conn: Conn, options: CdcOptions) -> None:
    try:
        conn.execute(
            "SELECT pg_create_logical_replication_slot(%s, %s)", (options.slot, options.plugin)
        )
        log.info("created replication slot %s (plugin %s)", options.slot, options.plugin)
    except pgerrors.DuplicateObject:
        pass  # another query created it at the same moment: same outcome
    except pgerrors.InsufficientPrivilege as exc:
        user = conn.info.user
        raise SlotError(
            f"role {user!r} may not create replication slots ({exc.diag.message_primary}):"
            f" ALTER ROLE {user} REPLICATION, or create slot {options.slot!r} as a "
            "superuser"
        ) from None


def insert_lsn(conn: Conn) -> int:
    """The server's WAL insert position: past the commit record of every transaction visible
    now (with ``synchronous_commit=off`` one is visible before its record is flushed)."""
    row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0')::int8").fetchone()
    assert row is not None
    return int(row[0])


def flush_lsn(conn: Conn) -> int:
    """The server's WAL flush position: the furthest a batch may end."""
    row = conn.execute("SELECT (pg_current_wal_flush_lsn() - '0/0')::int8").fetchone()
    assert row is not None
    return int(row[0])


def health(conn: Conn, slot: str) -> SlotHealth | None:
    """Slot lag (flush position minus confirmed), retained WAL (minus restart_lsn), active.

    ``None`` if the slot is gone. For monitoring: :meth:`PgCdcStreamReader.reportLatestOffset`
    carries it to Spark's progress events.
    """
    row = conn.execute(
        "SELECT active, (pg_current_wal_flush_lsn() - confirmed_flush_lsn)::int8,"
        " (pg_current_wal_flush_lsn() - restart_lsn)::int8"
        " FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    active, lag, retained = row
    return SlotHealth(bool(active), int(lag or 0), int(retained or 0))


def advance(conn: Conn, slot: str, lsn: int) -> None:
    """Move the slot's confirmed position to ``lsn`` (no-op if it is already there or beyond)."""
    try:
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(lsn)))
    except pgerrors.ObjectInUse as exc:
        raise SlotError(_in_use(slot, exc)) from None


def _in_use(slot: str, exc: psycopg.Error) -> str:
    return (
        f"replication slot {slot!r} is in use by another session "
        f"({exc.diag.message_primary}): stop the other consumer or use another slot"
    )


def bring_to(conn: Conn, options: CdcOptions, start: int) -> None:
    """Put the slot exactly at a batch's ``start`` before the batch is read.

    Spark plans and reads batch N only after batch N-1 (ending at ``start``) is durably
    committed, but its ``commit`` callback is at-most-once and never runs for the final batch of
    an ``availableNow`` run; so the slot may lag behind ``start`` here, and moving it up is safe.
    A slot found *beyond* ``start`` has had changes consumed by someone else.
    """
    state = slot_state(conn, options.slot)
    if state is None:
        raise SlotError(
            f"replication slot {options.slot!r} disappeared: the stream cannot "
            "continue from its checkpoint (recreate the slot and start a new checkpoint)"
        )
    if state.active_pid is not None and state.active_pid != conn.info.backend_pid:
        raise SlotError(
            f"replication slot {options.slot!r} is in use by another session (PID "
            f"{state.active_pid}): stop the other consumer or use another slot"
        )
    _move_up(conn, options, options.slot, state.confirmed_flush, start)


def _move_up(conn: Conn, options: CdcOptions, name: str, confirmed: int, start: int) -> None:
    """Advance slot ``name`` (found at ``confirmed``) to ``start``, or report data loss if the
    query's slot is already beyond ``start``."""
    if confirmed < start:
        advance(conn, name, start)
    elif confirmed > start:
        message = (
            f"replication slot {options.slot!r} is at {format_lsn(confirmed)}, "
            f"beyond this batch's start {format_lsn(start)}: changes in between were consumed "
            "elsewhere and cannot be read again"
        )
        if options.fail_on_data_loss:
            raise SlotError(message + " (set fail_on_data_loss=false to skip ahead)")
        log.warning("%s; skipping ahead because fail_on_data_loss=false", message)


def temporary_copy(conn: Conn, options: CdcOptions, batch_start: int, start: int) -> str:
    """Copy the query's slot into a temporary slot of this session, put it at ``start`` (a
    point inside the batch beginning at ``batch_start``) and return its name.

    The copy has the slot's ``restart_lsn``, so a transaction that began before ``start`` is
    still decoded whole; advancing only decodes (no output), about 1/15 of the cost of peeking.
    The copy is dropped by Postgres when this session ends, however it ends (a killed executor
    included), and its name is new for every read, so queries, tasks and retries never collide.
    The query's own slot is not moved here.
    """
    name = f"{options.slot[:24]}_part_{uuid.uuid4().hex}"
    try:
        conn.execute(
            "SELECT pg_copy_logical_replication_slot(%s, %s, true)", (options.slot, name)
        )
    except pgerrors.UndefinedObject:
        raise SlotError(
            f"replication slot {options.slot!r} disappeared: the stream cannot "
            "continue from its checkpoint (recreate the slot and start a new checkpoint)"
        ) from None
    except pgerrors.ConfigurationLimitExceeded as exc:
        raise SlotError(
            f"cannot copy replication slot {options.slot!r} for a parallel read "
            f"({exc.diag.message_primary}): raise max_replication_slots by the number of "
            "partitions read at once, or lower min_partitions"
        ) from None
    state = slot_state(conn, name)
    assert state is not None
    _move_up(conn, options, name, state.confirmed_flush, batch_start)
    if start > max(batch_start, state.confirmed_flush):
        advance(conn, name, start)
    return name


def publications(conn: Conn, options: CdcOptions) -> list[str]:
    """pgoutput's ``publication_names`` for this slot (empty for test_decoding)."""
    return publication.names(conn, options) if options.plugin == "pgoutput" else []


def _peek_query(options: CdcOptions, pubs: list[str]) -> tuple[sql.Composed, list[str]]:
    func = (
        "pg_logical_slot_peek_binary_changes"
        if options.plugin == "pgoutput"
        else "pg_logical_slot_peek_changes"
    )
    query = sql.SQL(
        "SELECT (lsn - '0/0')::int8, xid::text::int8, data"
        " FROM {}(%s, %s::pg_lsn, %s, VARIADIC %s::text[])"
    ).format(sql.Identifier(func))
    return query, plugin_options(options, pubs)


def peek(
    conn: Conn,
    options: CdcOptions,
    upto: int,
    pubs: list[str],
    slot: str | None = None,
) -> Iterator[Row]:
    """Stream ``(lsn, xid, data)`` rows up to ``upto`` without consuming them.

    A server-side cursor fetches ``fetch_rows`` at a time, so a transaction of a million changes
    never sits whole in this process. The rows of each fetch are handed on from its list, not
    through the cursor's per-row ``__next__`` (a Python call per change, 2-3% of a read).
    ``conn`` must not be in autocommit mode. ``slot`` names a temporary copy to read instead of
    the query's slot.
    """
    query, plugin_options = _peek_query(options, pubs)
    name = slot or options.slot
    try:
        with conn.cursor(name="pg_cdc_peek", binary=True) as cur:
            cur.execute(query, (name, format_lsn(upto), None, plugin_options))
            while rows := cur.fetchmany(options.fetch_rows):
                yield from rows
    except pgerrors.ObjectInUse as exc:
        raise SlotError(_in_use(name, exc)) from None


def first_commit_end(
    conn: Conn,
    options: CdcOptions,
    upto: int,
    pubs: list[str],
) -> int | None:
    """End LSN of the first transaction the slot would emit, looking no further than ``upto``.

    Used to stretch a byte-limited batch so it holds at least one whole transaction: otherwise a
    transaction larger than the limit would be re-decoded from its start by every batch it spans.
    """
    query, plugin_options = _peek_query(options, pubs)
    probe = sql.SQL("SELECT max(lsn) FROM ({}) AS peeked(lsn, xid, data)").format(query)
    try:
        row = conn.execute(probe, (options.slot, format_lsn(upto), 1, plugin_options)).fetchone()
    except pgerrors.ObjectInUse as exc:
        raise SlotError(_in_use(options.slot, exc)) from None
    return None if row is None or row[0] is None else int(row[0])
