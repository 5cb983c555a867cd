"""A slot's life: the checks and creation when a query starts, and dropping a lost one."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from postgres_cdc_source.connections import connect_with_retry
from postgres_cdc_source.errors import ConfigError, SlotError, SlotLostError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import publication, publication_setup, request_table
from postgres_cdc_source.replication.slots import (
    FAILOVER_VERSION,
    SlotState,
    check_not_lost,
    in_use,
    slot_state,
)

__all__ = ["check_failover_supported", "drop_lost", "ensure_slot"]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]


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
        raise in_use(slot, exc) from None
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
        check_failover_supported(conn, options)
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
                publication_setup.ensure(conn, options)
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
            publication_setup.ensure(conn, options)
        request_table.ensure(conn)  # so that requests can be made before the first planning
        return state


def check_failover_supported(conn: Conn, options: CdcOptions) -> None:
    """Refuse ``failover=true`` on a server older than Postgres 17."""
    version = conn.info.server_version
    if options.failover and version < FAILOVER_VERSION:
        raise ConfigError(
            "failover",
            f"failover slots need Postgres 17 or later; this server is {_version(version)}: "
            "set failover=false (a slot lives only on the primary: see Failover slots)",
        )


def _version(number: int) -> str:
    return f"{number // 10000}.{number % 10000}"


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
