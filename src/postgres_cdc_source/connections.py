"""Connections for both readers (cdc and polling), with one retry rule
(:func:`slot.connect_with_retry` to connect, :func:`slot.is_transient` within a session).

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

from postgres_cdc_source import slot
from postgres_cdc_source.errors import SourceError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.slot import connect_with_retry

__all__ = ["DriverConnection", "connect_with_retry", "riding_out_restarts"]

log = logging.getLogger(__name__)

T = TypeVar("T")


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
                if attempt == 2 or not slot.is_transient(exc):
                    raise slot.source_error(
                        f"Postgres failed ({self.options.safe_dsn})", exc, self.options
                    ) from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


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
            if not (exc.transient if isinstance(exc, SourceError) else slot.is_transient(exc)):
                raise
            now = time.monotonic()
            deadline = deadline or now + options.connect_retry_seconds
            if (given and not repeatable) or now > deadline:
                if isinstance(exc, SourceError):
                    raise
                raise slot.source_error(
                    f"lost the connection to Postgres ({options.safe_dsn}) after {given} rows "
                    "of the partition", exc, options,
                ) from exc
            log.warning("pg_cdc: lost the connection to Postgres mid-read (%s); reading the "
                        "partition again, skipping the %d rows already given",
                        exc.sqlstate or type(exc).__name__, given)
            time.sleep(1.0)
