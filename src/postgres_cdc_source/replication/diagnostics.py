"""How a slot is doing, for monitoring and warnings: its lag and retained WAL, and the
transaction that holds its restart point back."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from postgres_cdc_source.connections import connect
from postgres_cdc_source.health import SlotHealth
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication.positions import FLUSHED
from postgres_cdc_source.replication.slots import SlotState

__all__ = [
    "REREAD_WARN_BYTES", "HealthReader", "RestartHolder", "describe_holder", "health",
    "restart_holder",
]

Conn = psycopg.Connection[Any]


def health(conn: Conn, slot: str) -> SlotHealth | None:
    """Slot lag (flush position, on a standby the replay position, minus confirmed), retained
    WAL (minus restart_lsn), active,
    ``wal_status`` and ``safe_wal_size`` (how close the slot is to being lost).

    ``None`` if the slot is gone. For monitoring: :meth:`PgCdcStreamReader.reportLatestOffset`
    carries it to Spark's progress events.
    """
    row = conn.execute(
        f"SELECT active, ({FLUSHED} - confirmed_flush_lsn)::int8,"
        f" ({FLUSHED} - restart_lsn)::int8, wal_status, safe_wal_size,"
        " (confirmed_flush_lsn - restart_lsn)::int8"
        " FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    active, lag, retained, wal_status, safe, reread = row
    return SlotHealth(bool(active), int(lag or 0), int(retained or 0), wal_status,
                      None if safe is None else int(safe), max(0, int(reread or 0)))


class HealthReader:
    """:func:`health` of ``options.slot`` on one connection kept between reads: for a listener
    where Spark never asks the reader for its report (4.0, 4.1), at every scrape. One
    connection however often it is scraped, so scrapes cannot use up ``max_connections``.

    The connection (autocommit, so it holds no snapshot between reads) is opened at the first
    :meth:`read` and after one that failed, giving up after ``connect_timeout`` seconds unless
    the DSN sets its own ``connect_timeout``; no retry. Reads from several threads take turns.
    """

    def __init__(self, options: CdcOptions, connect_timeout: int = 5) -> None:
        if "connect_timeout" not in conninfo_to_dict(options.dsn):
            options = replace(options, dsn=make_conninfo(options.dsn,
                                                         connect_timeout=str(connect_timeout)))
        self.options = options
        self._conn: Conn | None = None
        self._lock = threading.Lock()

    def read(self) -> SlotHealth | None:
        """The slot's health now (``None``: it is gone). A failure raises
        :class:`~postgres_cdc_source.errors.SourceError` (no connection: its message shows the
        DSN redacted) or :class:`psycopg.Error`, and closes the connection for the next read to
        open anew."""
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect(self.options)
                return health(self._conn, self.options.slot)
            except BaseException:
                self._close()
                raise

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


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
