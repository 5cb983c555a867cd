"""Where the server's WAL and the slot stand, and moving the slot: advancing it, putting it at a
batch's start, and temporary copies of it for parallel reads.

The slot is moved only with ``pg_replication_slot_advance``, never consumed with
``get_changes``: reading is repeatable, so a batch Spark replays after a crash decodes to
exactly the same rows.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from connector_common.lsn import format_lsn
from postgres_cdc_source.errors import SlotError, SlotLostError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication.slots import (
    check_not_lost,
    in_use,
    slot_state,
    standbys_missing,
)

__all__ = [
    "FLUSHED", "REPLAYED", "advance", "bring_to", "flush_lsn", "insert_lsn", "temporary_copy",
]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]


REPLAYED = "pg_catalog.pg_last_wal_replay_lsn()"
"""A standby's end of WAL: what it has replayed, all it can decode and all its sessions see."""


def _position(current: str) -> str:
    """The server's position ``current`` names (``pg_current_wal_*_lsn()``), or on a standby,
    where those fail (``recovery is in progress``), its replay position."""
    return (f"CASE WHEN pg_catalog.pg_is_in_recovery() THEN {REPLAYED}"
            f" ELSE pg_catalog.{current} END")


FLUSHED = _position("pg_current_wal_flush_lsn()")
"""SQL of :func:`flush_lsn`'s position, for queries that compare a slot with it."""


def insert_lsn(conn: Conn) -> int:
    """The server's WAL insert position: past the commit record of every transaction visible
    now (with ``synchronous_commit=off`` one is visible before its record is flushed); on a
    standby its replay position, past every commit its sessions see."""
    row = conn.execute(
        f"SELECT ({_position('pg_current_wal_insert_lsn()')} - '0/0')::int8").fetchone()
    assert row is not None
    return int(row[0])


def flush_lsn(conn: Conn) -> int:
    """The server's WAL flush position: the furthest a batch may end; on a standby its replay
    position, the furthest it decodes."""
    row = conn.execute(f"SELECT ({FLUSHED} - '0/0')::int8").fetchone()
    assert row is not None
    return int(row[0])


def advance(conn: Conn, slot: str, lsn: int) -> None:
    """Move the slot's confirmed position to ``lsn`` (no-op if it is already there or beyond)."""
    try:
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(lsn)))
    except pgerrors.ObjectInUse as exc:
        raise in_use(slot, exc) from None


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
    included: from Postgres 14 the session checks every second that its client is still there,
    so it ends within a second, not only when the running statement finishes), and its name is
    new for every read, so queries, tasks and retries never collide. The query's own slot is
    not moved here.
    """
    if conn.info.server_version >= 140000:
        conn.execute("SELECT set_config('client_connection_check_interval', '1s', false)")
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
