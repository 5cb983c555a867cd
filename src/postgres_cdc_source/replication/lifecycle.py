"""A slot's life: the checks and creation when a query starts, and dropping a lost one."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from postgres_cdc_source import partitions
from postgres_cdc_source.connections import connect_with_retry, server_version
from postgres_cdc_source.errors import ConfigError, SlotError, SlotLostError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import (
    publication,
    publication_setup,
    request_table,
    standby,
)
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
    with connect_with_retry(options) as conn, standby.writer(conn, options) as writer:
        wal_level = conn.execute("SHOW wal_level").fetchone()
        if wal_level is None or wal_level[0] != "logical":
            raise SlotError(
                f"wal_level is {wal_level[0] if wal_level else '?'!r}, logical decoding needs "
                "'logical': set wal_level = logical in postgresql.conf and restart Postgres"
            )
        if writer is not conn:  # a standby: the primary does the writes, or nobody
            standby.check(conn, options, writer)
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
                _publications(conn, writer, options)
            _create_slot(conn, options, on_standby=writer is not conn)
            if options.plugin == "pgoutput" and writer is conn:
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
            _publications(conn, writer, options)
        partitions.warn_unmatched(conn, options.keeps, options.include_tables is not None
                                  or options.exclude_tables is not None)
        if writer is not None:  # so that requests can be made before the first planning
            request_table.ensure(writer)
        return state


def _publications(conn: Conn, writer: Conn | None, options: CdcOptions) -> None:
    """The publication checked (the managed pair created and synced) where the writes go; on a
    standby without ``primary_dsn``, only checked to exist (replicated from the primary)."""
    if writer is not None:
        publication_setup.ensure(writer, options)
        return
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                    (options.publication,)).fetchone() is None:
        raise SlotError(
            f"publication {options.publication!r} does not exist, and dsn connects to a "
            "standby, which cannot create it: set primary_dsn to the primary's conninfo "
            "(pg_cdc then creates and syncs the managed pair there), or CREATE PUBLICATION "
            f"{options.publication} FOR TABLE ... on the primary (used as it is; docs: deployment, "
            "Reading a standby)"
        )


def check_failover_supported(conn: Conn, options: CdcOptions) -> None:
    """Refuse ``failover=true`` on a server older than Postgres 17."""
    version = conn.info.server_version
    if options.failover and version < FAILOVER_VERSION:
        raise ConfigError(
            "failover",
            f"failover slots need Postgres 17 or later; this server is {server_version(version)}: "
            "set failover=false (a slot lives only on the primary: see Failover slots)",
        )


def _create_slot(conn: Conn, options: CdcOptions, on_standby: bool = False) -> None:
    def create() -> None:
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

    try:
        if on_standby:
            standby.create_slot(options, create)
        else:
            create()
        log.info("created replication slot %s (plugin %s, failover %s%s)", options.slot,
                 options.plugin, options.failover, ", on a standby" if on_standby else "")
    except pgerrors.DuplicateObject:
        pass  # another query created it at the same moment: same outcome
    except pgerrors.InsufficientPrivilege as exc:
        raise _cannot_create_slots(conn, options, exc.diag.message_primary) from None
    except pgerrors.ObjectNotInPrerequisiteState as exc:
        refused = standby.creation_refused(exc) if on_standby else None
        if refused is None:
            raise
        raise refused from exc


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
