"""The ``pg_cdc`` streaming reader: LSN offsets, one partition per batch, peek, and commit.

Contract with Spark (pyspark 4.3, measured; see the README's delivery section):

* ``initialOffset``/``latestOffset``/``partitions``/``commit`` run in one long-lived driver-side
  Python process; ``read`` runs on an executor with a pickled copy of this reader, so
  connections are opened lazily and never pickled.
* A batch ``(start, end]`` holds exactly the transactions whose commit record starts at or after
  ``start`` and before ``end``: the slot is put at ``start`` before the batch is read, and the
  read peeks up to ``end``. ``end`` never exceeds the WAL flush position seen when planning.
* The slot moves forward only to LSNs Spark has durably committed: to ``end`` in
  :meth:`commit` (the normal path), or up to a batch's ``start`` when planning or reading it
  (Spark plans batch N only after batch N-1 is in ``commits/``; ``commit`` is at-most-once and
  never runs for the last batch of an ``availableNow`` run).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)

from postgres_cdc_source import slot
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.decoding.factory import make_decoder
from postgres_cdc_source.errors import SourceError
from postgres_cdc_source.lsn import format_lsn, parse_lsn
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.routing import Router

__all__ = ["PgCdcStreamReader", "CdcPartition"]

log = logging.getLogger(__name__)

DEGRADED_AFTER = 3
"""Consecutive commits that could not advance the slot before the source reports itself
degraded (a log line per commit and the ``pg_cdc_degraded`` metric); one success clears it."""
T = TypeVar("T")

_CONNECT_RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class CdcPartition(InputPartition):
    """The one split of a batch: the slot's changes in ``(start, end]``, as integer LSNs."""

    start: int
    end: int


def _offset(lsn: int) -> dict[str, str]:
    return {"lsn": format_lsn(lsn)}


def _lsn(offset: dict[str, Any]) -> int:
    return parse_lsn(str(offset["lsn"]))


class PgCdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a logical replication slot as a stream of micro-batches bounded by LSNs."""

    def __init__(self, options: CdcOptions) -> None:
        self.options = options
        self._conn: psycopg.Connection[Any] | None = None
        self._checked = False
        self._target: int | None = None
        self._commit_failures = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_conn"] = None  # a live connection cannot travel to an executor
        return state

    # -- driver side ---------------------------------------------------------------------------

    def _driver(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``work`` on the driver's connection, reconnecting once if the server went away."""
        if not self._checked:
            slot.ensure_slot(self.options)
            self._checked = True
        for attempt in (1, 2):
            if self._conn is None or self._conn.closed:
                self._conn = _connect_with_retry(self.options, autocommit=True)
            try:
                return work(self._conn)
            except psycopg.OperationalError as exc:
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise SourceError(
                        f"lost the connection to Postgres ({self.options.safe_dsn}): "
                        f"{exc.__class__.__name__}"
                    ) from None
        raise AssertionError("unreachable")

    def initialOffset(self) -> dict[str, str]:
        """Where a new query starts: the slot's confirmed position (created if allowed)."""
        state = slot.ensure_slot(self.options)
        self._checked = True
        return _offset(state.confirmed_flush)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_bytes_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxBytes(self.options.max_bytes_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the flush position now as the target: data arriving later waits for the next run."""
        self._target = self._driver(slot.flush_lsn)

    def reportLatestOffset(self) -> dict[str, Any]:
        """The flush position, plus the slot's health for monitoring.

        Spark shows this only in progress events (``sources[].latestOffset``); it is never
        compared or stored as an offset. That makes it the channel from this driver-side
        worker process to a ``StreamingQueryListener`` in the user's process
        (:func:`iggy_spark.serve_metrics` reads ``slot_lag_bytes``, ``retained_wal_bytes``,
        ``slot_active``, ``commit_failures`` and ``degraded`` from it).
        """
        def report(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            return {**_offset(slot.flush_lsn(conn)), **slot.health(conn, self.options.slot),
                    "commit_failures": self._commit_failures,
                    "degraded": self._commit_failures >= DEGRADED_AFTER}

        return self._driver(report)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, str]:
        start_lsn = _lsn(start)
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        return _offset(self._driver(lambda conn: self._plan(conn, start_lsn, max_bytes)))

    def _plan(self, conn: psycopg.Connection[Any], start: int, max_bytes: int | None) -> int:
        flush = slot.flush_lsn(conn)
        if self._target is not None:
            flush = min(flush, self._target)
        if flush <= start:
            return start
        if max_bytes is None or start + max_bytes >= flush:
            return flush
        # A transaction larger than the limit must still fit in one batch whole: otherwise every
        # batch it spans would re-decode it from its first change. Find where the first
        # transaction after `start` ends; that needs the slot at `start`, which is safe here
        # because Spark asks for batch N's end only after batch N-1 (ending at `start`) committed.
        slot.bring_to(conn, self.options, start)
        first_end = slot.first_commit_end(conn, self.options, flush)
        return max(start + max_bytes, min(first_end or 0, flush))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        start_lsn, end_lsn = _lsn(start), _lsn(end)
        return [CdcPartition(start_lsn, end_lsn)] if end_lsn > start_lsn else []

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has durably committed every batch up to ``end``: release that WAL.

        A failure here loses nothing (the next batch's planning or read moves the slot up to its
        start), so it is logged rather than allowed to stop the query.
        """
        end_lsn = _lsn(end)
        try:
            self._driver(lambda conn: slot.advance(conn, self.options.slot, end_lsn))
        except Exception as exc:  # noqa: BLE001 - at-most-once callback; see docstring
            self._commit_failures += 1
            degraded = self._commit_failures >= DEGRADED_AFTER
            log.warning(
                "pg_cdc: could not advance slot %s to %s (%s); it will be moved up when "
                "the next batch is planned%s",
                self.options.slot,
                format_lsn(end_lsn),
                exc,
                f"; status DEGRADED ({self._commit_failures} commits in a row)" if degraded
                else "",
            )
            return
        if self._commit_failures >= DEGRADED_AFTER:
            log.warning("pg_cdc: slot %s advanced again; status ok", self.options.slot)
        self._commit_failures = 0

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Peek the slot from ``start`` to ``end`` and yield the batch's rows as Arrow batches."""
        assert isinstance(partition, CdcPartition)
        options = self.options
        conn = _connect_with_retry(options, autocommit=False)
        try:
            slot.bring_to(conn, options, partition.start)
            conn.commit()
            decoder = make_decoder(options, conn)
            events = decoder.events(slot.peek(conn, options, partition.end))
            yield from record_batches(
                transactions(events, options.spill_rows), Router(options), options.batch_rows
            )
        finally:
            conn.close()


def _connect_with_retry(options: CdcOptions, *, autocommit: bool) -> psycopg.Connection[Any]:
    """Connect, riding out a server restart of up to ``_CONNECT_RETRY_SECONDS`` (on the driver
    too: a planning call that fails stops the query)."""
    deadline = time.monotonic() + _CONNECT_RETRY_SECONDS
    while True:
        try:
            return slot.connect(options, autocommit=autocommit)
        except SourceError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
