"""Connections for both readers (cdc and polling), with one retry rule
(:func:`slot.connect_with_retry` to connect, :func:`slot.is_transient` within a session).

Only what waiting can heal is retried: the server starting up,
restarting or a lost connection. A wrong password or a missing database fails at once with
Postgres's message and SQLSTATE, so a user never waits 30 s to learn of a typo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from postgres_cdc_source import slot
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.slot import connect_with_retry

__all__ = ["DriverConnection", "connect_with_retry"]

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
