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
from postgres_cdc_source.errors import ConfigError, SlotError, SlotLostError
from postgres_cdc_source.health import SlotHealth
from postgres_cdc_source.lsn import format_lsn, parse_lsn
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream import publication

__all__ = [
    "SlotState",
    "FAILOVER_VERSION",
    "check_not_lost",
    "standbys_missing",
    "drop_lost",
    "REREAD_WARN_BYTES",
    "RestartHolder",
    "restart_holder",
    "describe_holder",
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


FAILOVER_VERSION = 170000
"""Failover slots (``pg_create_logical_replication_slot(..., failover)``, ``invalidation_reason``
in ``pg_replication_slots``) exist from Postgres 17."""


@dataclass(frozen=True)
class SlotState:
    """What ``pg_replication_slots`` says about our slot."""

    plugin: str
    database: str
    active_pid: int | None
    restart_lsn: int
    confirmed_flush: int
    wal_status: str | None = None
    """``reserved``/``extended`` (safe), ``unreserved`` (its WAL goes at the next checkpoint
    unless it catches up), ``lost``."""
    invalidation_reason: str | None = None
    """Why Postgres invalidated the slot (17+; ``conflicting`` on 16), ``None`` while valid."""
    failover: bool = False
    """Created as a failover slot (17+)."""

    @property
    def lost(self) -> bool:
        return self.wal_status == "lost" or self.invalidation_reason is not None

    @property
    def lost_reason(self) -> str:
        """Postgres's reason, or ``wal_removed`` for a slot ``lost`` without one (15, 16)."""
        return self.invalidation_reason or "wal_removed"


def _reason_column(conn: Conn) -> sql.Composable:
    """The slot's invalidation reason as this server version can tell it."""
    version = conn.info.server_version
    if version >= FAILOVER_VERSION:
        return sql.SQL("invalidation_reason")
    if version >= 160000:
        return sql.SQL("CASE WHEN conflicting THEN 'conflicting' END")
    return sql.SQL("NULL::text")


def slot_state(conn: Conn, slot: str) -> SlotState | None:
    failover = sql.SQL(
        "failover" if conn.info.server_version >= FAILOVER_VERSION else "false"
    )
    row = conn.execute(
        sql.SQL(
            "SELECT plugin, slot_type, database, active_pid,"
            " (restart_lsn - '0/0')::int8, (confirmed_flush_lsn - '0/0')::int8,"
            " wal_status, {}, {}"
            " FROM pg_replication_slots WHERE slot_name = %s"
        ).format(_reason_column(conn), failover),
        (slot,),
    ).fetchone()
    if row is None:
        return None
    plugin, slot_type, database, active_pid, restart, confirmed, wal, reason, fails_over = row
    if slot_type != "logical":
        raise SlotError(
            f"replication slot {slot!r} is a {slot_type} slot; pg_cdc needs a "
            "logical one: choose another slot name"
        )
    return SlotState(plugin, database, active_pid, int(restart or 0), int(confirmed or 0),
                     wal, reason, bool(fails_over))


def check_not_lost(slot: str, state: SlotState | None) -> SlotState:
    """``state``, unless the slot is missing or invalidated: then :class:`SlotLostError`."""
    if state is None:
        raise SlotLostError(slot, None)
    if state.lost:
        raise SlotLostError(slot, state.lost_reason)
    return state


def standbys_missing(conn: Conn, state: SlotState) -> list[str]:
    """The physical slots ``synchronized_standby_slots`` names that no standby streams from
    now (``name (missing)`` or ``name (inactive)``), for a failover slot; empty otherwise.

    Postgres decodes a failover slot's changes only once those standbys confirm them, so while
    one is missing (a promoted server inherited the setting) or down, every read waits.
    """
    if not state.failover:
        return []
    rows = conn.execute(
        "SELECT s.name, r.active FROM unnest(string_to_array(current_setting("
        "'synchronized_standby_slots', true), ',')) AS s(name)"
        " LEFT JOIN pg_replication_slots AS r ON r.slot_name = trim(s.name)"
        " AND r.slot_type = 'physical' WHERE trim(s.name) <> ''"
    ).fetchall()
    return [f"{str(name).strip()} ({'missing' if active is None else 'inactive'})"
            for name, active in rows if not active]


def drop_lost(conn: Conn, slot: str) -> None:
    """Drop slot ``slot`` if it is invalidated, so it can be created again; a missing slot is
    left missing, and a valid one (created again by someone meanwhile) is left alone."""
    state = slot_state(conn, slot)
    if state is None or not state.lost:
        return
    try:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    except pgerrors.UndefinedObject:
        pass  # dropped by someone else at the same moment: same outcome
    except pgerrors.ObjectInUse as exc:
        raise SlotError(_in_use(slot, exc)) from None
    log.info("dropped lost replication slot %s (%s)", slot, state.lost_reason)


def ensure_slot(options: CdcOptions, resuming: bool = False) -> SlotState:
    """Check the server and the slot (creating slot and publication if allowed); return its state.

    Every precondition that would otherwise surface as an obscure error inside a Spark task is
    checked here, on the driver, with a message that says what to do. A server restarting
    while the query starts is waited for, as during planning. ``resuming``: the query goes on
    from a checkpoint, so a missing slot is lost (:class:`SlotLostError`), never created anew
    at today's position; an invalidated slot is lost either way.
    """
    with connect_with_retry(options) as conn:
        wal_level = conn.execute("SHOW wal_level").fetchone()
        if wal_level is None or wal_level[0] != "logical":
            raise SlotError(
                f"wal_level is {wal_level[0] if wal_level else '?'!r}, logical decoding needs "
                "'logical': set wal_level = logical in postgresql.conf and restart Postgres"
            )
        _check_failover_supported(conn, options)
        state = slot_state(conn, options.slot)
        if state is None and resuming:
            raise SlotLostError(options.slot, None)
        created = state is None
        if state is None:
            if not options.create_slot:
                raise SlotError(
                    f"replication slot {options.slot!r} does not exist: create it or "
                    "set create_slot=true"
                )
            if options.plugin == "pgoutput":  # first: the slot must not predate them
                _check_may_create_slots(conn, options)
                publication.ensure(conn, options)
            _create_slot(conn, options)
            if options.plugin == "pgoutput":
                publication.admit(conn, options, new_slot=True)
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
        check_not_lost(options.slot, state)
        if options.failover and not state.failover:
            raise SlotError(
                f"replication slot {options.slot!r} exists without failover, but failover=true: "
                "while no query uses it, run ALTER_REPLICATION_SLOT "
                f"{options.slot} (FAILOVER true) over a replication connection (psql "
                "\"dbname=... replication=database\"), or drop it and start the query with a "
                "new checkpoint (snapshot=initial for a full resync)"
            )
        if options.plugin == "pgoutput" and not created:
            publication.ensure(conn, options)
        return state


def _check_failover_supported(conn: Conn, options: CdcOptions) -> None:
    version = conn.info.server_version
    if options.failover and version < FAILOVER_VERSION:
        raise ConfigError(
            "failover",
            f"failover slots need Postgres 17 or later; this server is {_version(version)}: "
            "set failover=false (a slot lives only on the primary: see Failover slots)",
        )


def _version(number: int) -> str:
    return f"{number // 10000}.{number % 10000}"


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
        _check_failover_supported(conn, options)
        if options.plugin == "pgoutput":
            publication.ensure(conn, options)
        modern = conn.info.server_version >= 150000
    repl = connect(options, replication=True)
    command = sql.SQL(
        "CREATE_REPLICATION_SLOT {} LOGICAL {} (SNAPSHOT 'export'{})"
        if modern
        else "CREATE_REPLICATION_SLOT {} LOGICAL {} EXPORT_SNAPSHOT{}"
    ).format(
        sql.Identifier(options.slot),
        sql.Identifier(options.plugin),
        sql.SQL(", FAILOVER true" if options.failover else ""),
    )
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
    if options.plugin == "pgoutput":
        with connect_with_retry(options) as conn:
            publication.admit(conn, options, new_slot=True)
    return ExportedSnapshot(repl, name.decode(), parse_lsn(point.decode()))


def _create_slot(conn: Conn, options: CdcOptions) -> None:
    try:
        if options.failover:  # 17+, checked by the caller
            conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, %s, false, false, true)",
                (options.slot, options.plugin),
            )
        else:
            conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, %s)",
                (options.slot, options.plugin),
            )
        log.info("created replication slot %s (plugin %s, failover %s)", options.slot,
                 options.plugin, options.failover)
    except pgerrors.DuplicateObject:
        pass  # another query created it at the same moment: same outcome
    except pgerrors.InsufficientPrivilege as exc:
        raise _cannot_create_slots(conn, options, exc.diag.message_primary) from None


def _check_may_create_slots(conn: Conn, options: CdcOptions) -> None:
    """Refuse before anything is created (the publications) if the slot cannot be."""
    row = conn.execute(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if row is not None and not row[0]:
        raise _cannot_create_slots(conn, options, "the role has neither REPLICATION nor "
                                   "superuser")


def _cannot_create_slots(conn: Conn, options: CdcOptions, why: str | None) -> SlotError:
    user = conn.info.user
    return SlotError(
        f"role {user!r} may not create replication slots ({why}): ALTER ROLE {user} "
        f"REPLICATION, or create slot {options.slot!r} as a superuser"
    )


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
    """Slot lag (flush position minus confirmed), retained WAL (minus restart_lsn), active,
    ``wal_status`` and ``safe_wal_size`` (how close the slot is to being lost).

    ``None`` if the slot is gone. For monitoring: :meth:`PgCdcStreamReader.reportLatestOffset`
    carries it to Spark's progress events.
    """
    row = conn.execute(
        "SELECT active, (pg_current_wal_flush_lsn() - confirmed_flush_lsn)::int8,"
        " (pg_current_wal_flush_lsn() - restart_lsn)::int8, wal_status, safe_wal_size,"
        " (confirmed_flush_lsn - restart_lsn)::int8"
        " FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    active, lag, retained, wal_status, safe, reread = row
    return SlotHealth(bool(active), int(lag or 0), int(retained or 0), wal_status,
                      None if safe is None else int(safe), max(0, int(reread or 0)))


REREAD_WARN_BYTES = 64 * 1024 * 1024
"""Above this much WAL between the slot's restart and confirmed positions (re-decoded by every
read), planning looks for the transaction holding the restart point back and warns."""


@dataclass(frozen=True)
class RestartHolder:
    """The oldest open transaction with a transaction id: what keeps ``restart_lsn`` back."""

    pid: int | None
    """Its backend's PID; ``None`` for a prepared transaction (``gid`` names it)."""
    gid: str | None
    age_seconds: float
    user: str | None
    application: str | None
    state: str | None


def restart_holder(conn: Conn, state: SlotState) -> RestartHolder | None:
    """The transaction holding the slot's restart point back, when the slot re-reads more than
    :data:`REREAD_WARN_BYTES` per read; ``None`` otherwise or when none is visible (a role
    without ``pg_read_all_stats`` does not see other roles' transactions)."""
    if state.confirmed_flush - state.restart_lsn < REREAD_WARN_BYTES:
        return None
    row = conn.execute(
        "SELECT pid, NULL::text, extract(epoch FROM now() - xact_start)::float8, usename,"
        " application_name, state, age(backend_xid) FROM pg_stat_activity"
        " WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
        " UNION ALL"
        " SELECT NULL, gid, extract(epoch FROM now() - prepared)::float8, owner, NULL,"
        " 'prepared', age(transaction) FROM pg_prepared_xacts"
        " ORDER BY 7 DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    pid, gid, age, user, application, session_state, _ = row
    return RestartHolder(pid, gid, float(age or 0.0), user, application, session_state)


def describe_holder(slot: str, reread: int, holder: RestartHolder) -> str:
    who = (f"prepared transaction {holder.gid!r}" if holder.gid is not None
           else f"PID {holder.pid} (user {holder.user!r}, application {holder.application!r}, "
                f"{holder.state})")
    end = ("COMMIT PREPARED or ROLLBACK PREPARED it" if holder.gid is not None
           else f"end it (SELECT pg_terminate_backend({holder.pid})), or set "
                "idle_in_transaction_session_timeout (or transaction_timeout, 17+)")
    return (
        f"pg_cdc: replication slot {slot} re-decodes {reread} bytes of WAL before its first "
        f"change on every read: its restart point is held back by the oldest open transaction, "
        f"{who}, open for {holder.age_seconds:.0f} s; {end} (docs: operations, Long-open "
        "transactions)"
    )


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
    state = check_not_lost(options.slot, slot_state(conn, options.slot))
    if state.wal_status == "unreserved":
        log.warning(
            "pg_cdc: replication slot %s is about to be lost (wal_status unreserved): it is "
            "further behind than max_slot_wal_keep_size allows, and the next checkpoint "
            "removes WAL it needs unless the query catches up first (docs: operations, Lost "
            "slots)",
            options.slot,
        )
    waiting_for = standbys_missing(conn, state)
    if waiting_for:
        log.warning(
            "pg_cdc: replication slot %s is a failover slot, and Postgres sends its changes "
            "only once the standbys named in synchronized_standby_slots have them; no standby "
            "streams from %s, so reads wait until one does: start it, or set "
            "synchronized_standby_slots to the standbys there are ('' for none; a promoted "
            "server keeps the old primary's) (docs: operations, Failover slots)",
            options.slot, ", ".join(waiting_for),
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
        raise SlotLostError(options.slot, None) from None
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


def publications(conn: Conn, options: CdcOptions, start: int) -> list[str]:
    """pgoutput's ``publication_names`` for a batch from ``start`` (empty for test_decoding)."""
    return publication.names(conn, options, start) if options.plugin == "pgoutput" else []


def _peek_query(options: CdcOptions, pubs: list[str]) -> tuple[sql.Composed, list[str]]:
    if options.plugin == "pgoutput":
        func, data = "pg_logical_slot_peek_binary_changes", "data"
    else:
        func, data = "pg_logical_slot_peek_changes", _TEXT_DATA
    query = sql.SQL(
        "SELECT (lsn - '0/0')::int8, xid::text::int8, {}"
        " FROM {}(%s, %s::pg_lsn, %s, VARIADIC %s::text[])"
    ).format(sql.SQL(data), sql.Identifier(func))
    return query, plugin_options(options, pubs)


_TEXT_DATA = (
    "CASE WHEN starts_with(data, 'message: ') "
    "THEN 'message-hex: ' || encode(textsend(data), 'hex') ELSE data END"
)
"""test_decoding's line, with a logical message's line sent as the hex of its bytes: the
content is printed raw, and bytes that are not text in the client encoding would fail the read
(:mod:`postgres_cdc_source.decoding.text_format` reads both forms)."""


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


def peek_messages(
    conn: Conn, options: CdcOptions, upto: int, pubs: list[str]
) -> list[tuple[int, bytes | str]]:
    """``(lsn, data)`` of the logical messages the slot would emit up to ``upto`` (pgoutput
    peeked with ``messages``), filtered by the server: the rows of table changes never travel.
    """
    query, plugin_options = _peek_query(options, pubs)
    is_message = ("get_byte(data, 0) = 77" if options.plugin == "pgoutput"
                  else "starts_with(data, 'message-hex: ')")
    probe = sql.SQL("SELECT lsn, data FROM ({}) AS peeked(lsn, xid, data) WHERE {}").format(
        query, sql.SQL(is_message))
    try:
        rows = conn.execute(probe, (options.slot, format_lsn(upto), None, plugin_options))
        return [(int(lsn), data) for lsn, data in rows.fetchall()]
    except pgerrors.ObjectInUse as exc:
        raise SlotError(_in_use(options.slot, exc)) from None


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
