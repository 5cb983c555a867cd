"""Connections for every read mode (stream, snapshot, polling), with one retry rule
(:func:`connect_with_retry` to connect, :func:`is_transient` within a session).

Only what waiting can heal is retried: the server starting up,
restarting or a lost connection. A wrong password or a missing database fails at once with
Postgres's message and SQLSTATE, so a user never waits 30 s to learn of a typo.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from typing import Any, TypeVar

import psycopg
import pyarrow as pa
from psycopg.abc import AdaptContext
from psycopg.conninfo import conninfo_to_dict

from postgres_cdc_source.errors import SourceError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.pg_types import SESSION_SETTINGS

__all__ = [
    "DriverConnection", "connect", "connect_with_retry", "is_transient", "riding_out_restarts",
    "server_version", "source_error",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
Conn = psycopg.Connection[Any]


def connect(
    options: CdcOptions,
    *,
    autocommit: bool = True,
    context: AdaptContext | None = None,
    replication: bool = False,
) -> Conn:
    """A connection whose session settings make value text (dates, floats) deterministic.

    ``context`` replaces psycopg's adapters (the snapshot reader wants every value as its output
    text); ``replication`` opens a walsender connection (``replication=database``).

    A failure raises :class:`SourceError` saying whether waiting can heal it. libpq reports no
    SQLSTATE for a failed connection, so the server is asked with ``PQping``, which reads the
    server's SQLSTATE itself: no answer, or ``cannot_connect_now`` (57P03: starting up, shutting
    down, recovering), is transient; a server that accepts connections but refused this one
    (password, database, privileges, ``pg_hba.conf``) will refuse it again, after one more try in
    case it only just finished starting. One exception: a DSN with ``target_session_attrs``
    (``read-write``, ``primary``, ...) that a server accepts without it is waiting for a host to
    get there, as while a standby is being promoted; that is transient too.
    """
    session = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())
    extra: dict[str, Any] = {"replication": "database"} if replication else {}
    for attempt in (1, 2):
        try:
            return psycopg.connect(
                options.dsn,
                autocommit=autocommit,
                options=session,
                application_name="pg_cdc",
                context=context,
                **extra,
            )
        except psycopg.OperationalError as exc:
            ping = psycopg.pq.PGconn.ping(options.dsn.encode())
            if ping == psycopg.pq.Ping.OK and attempt == 1:
                continue
            rejecting = ping == psycopg.pq.Ping.REJECT
            promoting = ping == psycopg.pq.Ping.OK and _only_session_attrs_refused(options)
            # `from None`: libpq's text is kept (scrubbed) in the message; the chained original
            # is not, so no traceback can show a DSN.
            raise SourceError(
                f"cannot connect to Postgres ({options.safe_dsn}): {_scrub(str(exc), options)}"
                + (" (SQLSTATE 57P03)" if rejecting else "")
                + (" (no host is in the state target_session_attrs asks for: a failover in "
                   "progress?)" if promoting else ""),
                "57P03" if rejecting else None,
                transient=rejecting or promoting or ping == psycopg.pq.Ping.NO_RESPONSE,
            ) from None
    raise AssertionError("unreachable")


def _only_session_attrs_refused(options: CdcOptions) -> bool:
    """Whether a failed connection failed only on ``target_session_attrs``: some host accepts
    this login once the DSN stops asking for a state (read-write, primary) none is in yet."""
    attrs = conninfo_to_dict(options.dsn).get("target_session_attrs", "any")
    if attrs == "any":
        return False
    try:
        psycopg.connect(options.dsn, target_session_attrs="any").close()
    except psycopg.OperationalError:
        return False
    return True


def connect_with_retry(options: CdcOptions, *, autocommit: bool = True) -> Conn:
    """Connect, riding out a server that is down or restarting for up to
    ``connect_retry_timeout`` (on the driver too: a start or planning call that fails stops the
    query); what waiting cannot heal fails at once."""
    deadline = time.monotonic() + options.connect_retry_seconds
    while True:
        try:
            return connect(options, autocommit=autocommit)
        except SourceError as exc:
            if not exc.transient or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _scrub(message: str, options: CdcOptions) -> str:
    """Remove the password from a server or libpq message, just in case it echoes the DSN."""
    password = conninfo_to_dict(options.dsn).get("password")
    message = message.strip()
    return message.replace(str(password), "***") if password else message


# Errors of a running session that waiting can heal: the server is shutting down or restarting
# (57P01-57P03), full for now (53300), or the connection failed (class 08, or no SQLSTATE:
# dropped before the server answered).
_TRANSIENT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})


def server_version(number: int) -> str:
    """``server_version_num`` (``conn.info.server_version``, 170004) as errors name it: 17.4."""
    return f"{number // 10000}.{number % 10000}"


def is_transient(exc: psycopg.Error) -> bool:
    """Whether retrying ``exc`` later can succeed (see ``_TRANSIENT_SQLSTATES``)."""
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _TRANSIENT_SQLSTATES


def source_error(what: str, exc: psycopg.Error, options: CdcOptions) -> SourceError:
    """A :class:`SourceError` keeping Postgres's message (scrubbed) and SQLSTATE."""
    state = exc.sqlstate
    detail = _scrub(str(exc), options) + (f" (SQLSTATE {state})" if state else "")
    return SourceError(f"{what}: {detail}", state, is_transient(exc))



class DriverConnection:
    """A reader's driver-side connection: opened on first use, reopened once if the server went
    away, never pickled (the reader travels to executors without it)."""

    def __init__(self, options: CdcOptions) -> None:
        self.options = options
        self._conn: psycopg.Connection[Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_conn": None}

    def run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        for attempt in (1, 2):
            if self._conn is None or self._conn.closed:
                self._conn = connect_with_retry(self.options, autocommit=True)
            try:
                return work(self._conn)
            except psycopg.OperationalError as exc:
                self._conn.close()
                self._conn = None
                if attempt == 2 or not is_transient(exc):
                    raise source_error(
                        f"Postgres failed ({self.options.safe_dsn})", exc, self.options
                    ) from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _heals(exc: psycopg.OperationalError | SourceError) -> bool:
    """Whether waiting can heal ``exc``: the server restarting, a lost session."""
    return exc.transient if isinstance(exc, SourceError) else is_transient(exc)


def waiting_out_restarts(work: Callable[[], T], options: CdcOptions, what: str) -> T:
    """``work()``, run again while it fails in a way waiting can heal, for up to
    ``connect_retry_timeout`` after the first failure; ``work`` must be safe to run again.

    For the driver's start of a query, which checks the server and creates the slot over
    several statements: a restart between them must not fail the query when a restart during
    any later planning does not (:class:`DriverConnection`).
    """
    deadline: float | None = None
    while True:
        try:
            return work()
        except (psycopg.OperationalError, SourceError) as exc:
            now = time.monotonic()
            deadline = deadline or now + options.connect_retry_seconds
            if not _heals(exc) or now > deadline:
                if isinstance(exc, SourceError):
                    raise
                raise source_error(f"{what} ({options.safe_dsn})", exc, options) from exc
            log.warning("pg_cdc: lost the connection to Postgres while %s (%s); trying again",
                        what, exc.sqlstate or type(exc).__name__)
            time.sleep(1.0)


def riding_out_restarts(
    read: Callable[[], Generator[pa.RecordBatch, None, None]], options: CdcOptions, *,
    repeatable: bool,
) -> Iterator[pa.RecordBatch]:
    """``read()``'s batches, read again when the session is lost on the way (the server
    restarted or failed over, or an administrator ended the session).

    A task that fails stops a ``local[N]`` query for good (Spark retries no task there), and on
    a cluster it costs a task retry that reads the partition again from its start; a restart
    that a read can wait out should cost neither. ``repeatable`` says that ``read()`` gives the
    same rows each time (a peek of a fixed LSN range from a slot at a fixed position): the new
    read skips the rows already given, so the partition goes on where it stopped. Any other read
    is started again only if it had given nothing yet; after that the failure is raised, marked
    transient. Waiting stops ``connect_retry_timeout`` after the first failure; what waiting
    cannot heal is raised at once, as it came.
    """
    given = 0
    deadline: float | None = None
    while True:
        skip = given
        try:
            with closing(read()) as batches:
                for batch in batches:
                    if skip >= batch.num_rows:
                        skip -= batch.num_rows
                        continue
                    if skip:
                        batch, skip = batch.slice(skip), 0
                    given += batch.num_rows
                    yield batch
            return
        except (psycopg.OperationalError, SourceError) as exc:
            if not _heals(exc):
                raise
            now = time.monotonic()
            deadline = deadline or now + options.connect_retry_seconds
            if (given and not repeatable) or now > deadline:
                if isinstance(exc, SourceError):
                    raise
                raise source_error(
                    f"lost the connection to Postgres ({options.safe_dsn}) after {given} rows "
                    "of the partition", exc, options,
                ) from exc
            log.warning("pg_cdc: lost the connection to Postgres mid-read (%s); reading the "
                        "partition again, skipping the %d rows already given",
                        exc.sqlstate or type(exc).__name__, given)
            time.sleep(1.0)
