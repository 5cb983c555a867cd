"""Reading a hot standby: what only the primary can do, and where the query does it.

Postgres 16 and later decode on a hot standby: the slot is created, peeked and advanced there,
and the primary carries no decoding. A standby takes no writes, so what ``pg_cdc`` writes (the
managed publications and their membership, the event trigger, the backfill requests table,
``LISTEN`` for requests, and each backfill chunk's marker, a ``pg_logical_emit_message``) goes
to the primary through ``primary_dsn``. Without it the standby is read with what the primary
already has, and the query says at start what it goes without: a managed publication that is
missing cannot be created (an error naming it), membership is not synced, no backfill runs.

* :func:`check`: the early errors (a standby older than 16, ``hot_standby_feedback`` off,
  ``failover=true``, a synced slot, a ``primary_dsn`` that is not this standby's primary) and
  the warnings, at start;
* :func:`writer`: the connection the start's writes go to; :class:`Primary` the driver's,
  kept between plannings;
* :func:`create_slot`: a slot created on a standby waits for the primary to log its running
  transactions: with ``primary_dsn`` the query asks it to (``pg_log_standby_snapshot``);
* :func:`wait_replayed`: a marker written on the primary is in a batch only once the standby
  replayed it.

The WAL positions a standby reads up to (its replay position) are
:mod:`.positions`'; a promoted standby is a primary from its next statement on: everything
here asks ``pg_is_in_recovery()`` rather than remembering.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from connector_common.lsn import format_lsn
from postgres_cdc_source.connections import (
    DriverConnection,
    connect_with_retry,
    server_version,
)
from postgres_cdc_source.errors import ConfigError, SlotError
from postgres_cdc_source.options import CdcOptions

__all__ = [
    "STANDBY_VERSION", "Primary", "check", "create_slot", "creation_refused", "in_recovery",
    "wait_replayed", "writer",
]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]

STANDBY_VERSION = 160000
"""Logical decoding on a standby exists from Postgres 16."""
REPLAY_WAIT = 30.0
"""Seconds a planning waits for the standby to replay a marker written on the primary."""
_NUDGE_EVERY = 0.5


def in_recovery(conn: Conn) -> bool:
    """Whether ``conn``'s server is a standby (``pg_is_in_recovery()``) now."""
    row = conn.execute("SELECT pg_catalog.pg_is_in_recovery()").fetchone()
    return bool(row and row[0])


def check(conn: Conn, options: CdcOptions, primary: Conn | None) -> None:
    """Refuse, before anything is created, a standby the query cannot read; warn of what it
    goes without. ``conn`` is the standby's connection, ``primary`` one to ``primary_dsn``
    (``None`` without it)."""
    version = conn.info.server_version
    if version < STANDBY_VERSION:
        raise ConfigError(
            "dsn", f"connects to a standby of Postgres {server_version(version)}, which cannot "
            "decode: logical decoding on a standby needs Postgres 16 or later; point dsn at "
            "the primary (docs: deployment, Reading a standby)")
    if options.failover:
        raise ConfigError(
            "failover", "dsn connects to a standby, and Postgres makes failover slots only "
            "on a primary: set failover=false (a slot made on a standby survives that "
            "standby's promotion; docs: deployment, Reading a standby)")
    if options.all_tables_publication:
        raise ConfigError(
            "all_tables_publication", "not supported when dsn is a standby (whether the slot "
            "reads <publication>_all is recorded beside the slot's position, which is on the "
            "standby and the publication on the primary): leave it false")
    feedback = conn.execute("SHOW hot_standby_feedback").fetchone()
    if feedback is None or feedback[0] != "on":
        raise SlotError(
            "dsn connects to a standby with hot_standby_feedback off: the primary's VACUUM "
            "would remove catalog rows the slot needs and Postgres would invalidate it "
            "(rows_removed); set hot_standby_feedback = on on the standby (a reload), with a "
            "physical slot on the primary (primary_slot_name) so it holds while the standby "
            "is disconnected (docs: deployment, Reading a standby)")
    slot_name = conn.execute("SHOW primary_slot_name").fetchone()
    if slot_name is None or not slot_name[0]:
        log.warning(
            "pg_cdc: the standby streams from the primary without a physical slot "
            "(primary_slot_name is empty): hot_standby_feedback protects the slot's catalog "
            "rows only while the standby is connected, and Postgres invalidates the slot "
            "(rows_removed) if the primary vacuums them meanwhile; give it one "
            "(pg_create_physical_replication_slot on the primary, primary_slot_name here)")
    if version >= 170000:
        synced = conn.execute("SELECT synced FROM pg_replication_slots WHERE slot_name = %s",
                              (options.slot,)).fetchone()
        if synced is not None and synced[0]:
            raise SlotError(
                f"replication slot {options.slot!r} on this standby is a failover slot "
                "synchronized from the primary: Postgres lets it be read only once the standby "
                "is promoted; read it on the primary, or choose another slot name to read this "
                "standby")
    if primary is not None:
        _check_primary(conn, options, primary)
    else:
        log.warning(
            "pg_cdc: dsn connects to a standby and primary_dsn is not set, so the query "
            "writes nothing on the primary: the publications must exist there already "
            "(the managed pair's membership is not synced: tables created or changing their "
            "replica identity later are not followed), no backfill runs (requests and "
            "markers need the primary) and the event trigger is not installed; set "
            "primary_dsn to have pg_cdc do this on the primary (docs: deployment, Reading a "
            "standby)")


def _check_primary(conn: Conn, options: CdcOptions, primary: Conn) -> None:
    """Refuse a ``primary_dsn`` that is not the standby's primary, or one that cannot serve a
    standby's slot."""
    where = options.on_primary().safe_dsn
    if in_recovery(primary):
        raise ConfigError("primary_dsn", f"connects to a standby too ({where}): give the "
                          "primary's conninfo, the server that takes writes")
    ids = [c.execute("SELECT system_identifier FROM pg_catalog.pg_control_system()").fetchone()
           for c in (conn, primary)]
    if ids[0] != ids[1]:
        raise ConfigError(
            "primary_dsn", f"connects to another cluster ({where}: system identifier "
            f"{ids[1][0] if ids[1] else '?'}; the standby's is {ids[0][0] if ids[0] else '?'}): "
            "give the conninfo of the primary this standby replicates")
    if primary.info.dbname != conn.info.dbname:
        raise ConfigError("primary_dsn", f"connects to database {primary.info.dbname!r}, dsn "
                          f"to {conn.info.dbname!r}: both must name the captured database")
    wal_level = primary.execute("SHOW wal_level").fetchone()
    if wal_level is None or wal_level[0] != "logical":
        raise SlotError(
            f"the primary's wal_level is {wal_level[0] if wal_level else '?'!r}: a slot on a "
            "standby needs wal_level = logical on the primary (postgresql.conf, then a "
            "restart)")


@contextmanager
def writer(conn: Conn, options: CdcOptions) -> Iterator[Conn | None]:
    """The connection the query's writes go to: ``conn`` itself on a primary, a new one to
    ``primary_dsn`` on a standby (closed after), ``None`` on a standby without it."""
    if not in_recovery(conn):
        yield conn
    elif options.primary_dsn is None:
        yield None
    else:
        with connect_with_retry(options.on_primary()) as primary:
            yield primary


class Primary:
    """The driver's way to the primary, between plannings: :meth:`connection` gives the
    connection the query writes through, reopened when the primary went away; never pickled."""

    def __init__(self, options: CdcOptions) -> None:
        self.options = options
        self._db = (DriverConnection(options.on_primary()) if options.primary_dsn is not None
                    else None)

    def connection(self, conn: Conn) -> Conn | None:
        """``conn`` on a primary (a standby promoted included), the primary's on a standby,
        ``None`` on a standby without ``primary_dsn`` (:func:`check` warned at start)."""
        if not in_recovery(conn):
            return conn
        if self._db is None:
            return None
        return self._db.run(lambda primary: primary)

    def run(self, conn: Conn, work: Callable[[Conn], None]) -> None:
        """``work`` on :meth:`connection`, if there is one."""
        target = self.connection(conn)
        if target is not None:
            work(target)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


def create_slot(options: CdcOptions, create: Callable[[], None]) -> None:
    """``create()`` (it makes the slot on the standby ``dsn`` names), where Postgres waits
    for the primary's next record of its running transactions before the slot is ready: with
    ``primary_dsn`` the query asks the primary for one every half second while it waits."""
    if options.primary_dsn is None:
        log.info("pg_cdc: creating replication slot %s on a standby: Postgres waits for the "
                 "primary's next record of its running transactions (every 15 s while it "
                 "writes; SELECT pg_log_standby_snapshot() on the primary makes one now)",
                 options.slot)
        create()
        return
    done = threading.Event()

    def nudge() -> None:
        try:
            with connect_with_retry(options.on_primary()) as primary:
                while not done.wait(_NUDGE_EVERY):
                    primary.execute("SELECT pg_catalog.pg_log_standby_snapshot()")
        except psycopg.Error as exc:  # not granted: Postgres's own record comes, in time
            log.warning("pg_cdc: cannot ask the primary for a record of its running "
                        "transactions (%s); creating slot %s waits for the primary's own "
                        "(every 15 s while it writes)", exc.diag.message_primary or exc,
                        options.slot)
        except Exception as exc:  # the creation goes on either way
            log.warning("pg_cdc: cannot reach the primary (%s); creating slot %s waits for "
                        "the primary's own record", exc, options.slot)

    helper = threading.Thread(target=nudge, name=f"pg_cdc-nudge-{options.slot}", daemon=True)
    helper.start()
    try:
        create()
    finally:
        done.set()
        helper.join(5.0)


def creation_refused(exc: psycopg.Error) -> SlotError | None:
    """The error for a slot a standby refused to create because of the primary's settings."""
    message = exc.diag.message_primary or ""
    if isinstance(exc, pgerrors.ObjectNotInPrerequisiteState) and "primary" in message:
        return SlotError(f"cannot create the replication slot on this standby ({message}): "
                         "set wal_level = logical on the primary (postgresql.conf, then a "
                         "restart)")
    return None


def wait_replayed(conn: Conn, lsn: int, timeout: float = REPLAY_WAIT) -> bool:
    """Whether the standby ``conn`` replayed the WAL up to ``lsn`` within ``timeout`` seconds
    (at once on a primary)."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        row = conn.execute(
            "SELECT NOT pg_catalog.pg_is_in_recovery()"
            " OR pg_catalog.pg_last_wal_replay_lsn() >= %s::pg_lsn", (format_lsn(lsn),)
        ).fetchone()
        if row is not None and row[0]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.25)
