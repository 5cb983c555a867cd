"""A slot created with an exported snapshot: the tables as of its consistent point, for
``snapshot=initial``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from connector_common.lsn import parse_lsn
from postgres_cdc_source.connections import connect, connect_with_retry
from postgres_cdc_source.errors import SlotError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import publication, publication_setup, standby
from postgres_cdc_source.replication.lifecycle import check_failover_supported
from postgres_cdc_source.replication.slots import slot_state

__all__ = ["ExportedSnapshot", "export_snapshot"]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]


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
    server is not set up for it: :func:`~.lifecycle.ensure_slot` then reports whatever is
    wrong).

    For pgoutput the publication is created first: pgoutput looks it up as of each decoded
    change, so a change between slot and publication creation could not be decoded.
    """
    with connect_with_retry(options) as conn, standby.writer(conn, options) as writer:
        wal_level = conn.execute("SHOW wal_level").fetchone()
        if not options.create_slot or wal_level is None or wal_level[0] != "logical":
            return None
        if slot_state(conn, options.slot) is not None:
            return None
        on_standby = writer is not conn
        if on_standby:
            standby.check(conn, options, writer)
        check_failover_supported(conn, options)
        if options.plugin == "pgoutput":
            if writer is not None:
                publication_setup.ensure(writer, options)
            elif conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                              (options.publication,)).fetchone() is None:
                return None  # a standby without primary_dsn: ensure_slot says what to do
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
    results: list[psycopg.pq.abc.PGresult] = []

    def create() -> None:
        results.append(repl.pgconn.exec_(command.as_bytes(repl)))

    if on_standby:  # Postgres waits there for the primary's running transactions
        standby.create_slot(options, create)
    else:
        create()
    result = results[0]
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
    if options.plugin == "pgoutput" and not on_standby:
        with connect_with_retry(options) as conn:
            publication.admit(conn, options, new_slot=True)
    return ExportedSnapshot(repl, name.decode(), parse_lsn(point.decode()))
