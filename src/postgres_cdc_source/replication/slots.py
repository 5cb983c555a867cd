"""A replication slot as ``pg_replication_slots`` shows it: its state, whether it is lost, and
what a failover slot waits for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from postgres_cdc_source.errors import SlotError, SlotLostError

__all__ = [
    "FAILOVER_VERSION",
    "SlotState",
    "check_not_lost",
    "in_use",
    "slot_state",
    "standbys_missing",
]

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
    """Why Postgres invalidated the slot (17+; ``conflicting`` on a 16 standby), ``None``
    while valid."""
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
        # 16's ``conflicting`` is true for every invalidated logical slot, WAL removal included
        # (17 narrowed it to conflicts with recovery). Only a standby has conflicts with
        # recovery, so on a primary an invalidated slot lost its WAL (``wal_status`` says so).
        return sql.SQL("CASE WHEN conflicting AND pg_catalog.pg_is_in_recovery()"
                       " THEN 'conflicting' END")
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


def in_use(slot: str, exc: psycopg.Error) -> SlotError:
    """The error for a slot another session holds (``exc``: what Postgres said)."""
    return SlotError(
        f"replication slot {slot!r} is in use by another session "
        f"({exc.diag.message_primary}): stop the other consumer or use another slot"
    )
