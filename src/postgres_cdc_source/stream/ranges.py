"""Where the stream's next batch ends: the slot put at the batch's start, then the WAL flush
position (or an ``availableNow`` run's target), cut by ``max_bytes_per_trigger`` without
splitting a transaction."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import (
    diagnostics,
    peeking,
    positions,
    publication_sync,
    slots,
    standby,
)

__all__ = ["HELD_BACK_WARN_EVERY", "RangePlanner"]

log = logging.getLogger(__name__)

HELD_BACK_WARN_EVERY = 60.0
"""Seconds between two warnings naming the transaction that holds the slot's restart point
back (:func:`postgres_cdc_source.replication.diagnostics.restart_holder`)."""


class RangePlanner:
    """Plans the stream's batches of one query, on the driver."""

    def __init__(self, options: CdcOptions) -> None:
        self.options = options
        self.target: int | None = None
        """The flush position an ``availableNow`` run stops at; ``None``: no such run."""
        self.flush = 0
        """The flush position (or target) the last planning saw."""
        self._held_back_warned = -HELD_BACK_WARN_EVERY
        self.primary = standby.Primary(options)
        """Where the query's writes go when ``dsn`` is a standby (:mod:`~postgres_cdc_source.
        replication.standby`)."""

    def plan(self, conn: psycopg.Connection[Any], start: int, max_bytes: int | None) -> int:
        """The end of the batch from ``start``: the flush position, or less with ``max_bytes``
        (but past the first transaction after ``start``); ``start`` when nothing is new."""
        # Spark asks for the end of batch N only once batch N-1 (ending at `start`) is in
        # `commits/`; `commit` for it may never come (nothing new, the end of an availableNow
        # run, a lost callback), so release its WAL here, idle or not.
        positions.bring_to(conn, self.options, start)
        self._warn_if_held_back(conn)
        if self.options.plugin == "pgoutput":  # new tables join before their changes count
            self.primary.run(conn, lambda writer: publication_sync.sync(writer, self.options))
        flush = positions.flush_lsn(conn)
        if self.target is not None:
            flush = min(flush, self.target)
        self.flush = flush
        if flush <= start:
            return start
        if max_bytes is None or start + max_bytes >= flush:
            return flush
        # A transaction larger than the limit must still fit in one batch whole: otherwise every
        # batch it spans would re-decode it from its first change. Find where the first
        # transaction after `start` ends (the slot is at `start` now).
        pubs = peeking.publications(conn, self.options, start)
        first_end = peeking.first_commit_end(conn, self.options, flush, pubs)
        return max(start + max_bytes, min(first_end or 0, flush))

    def caught_up(self, end: int) -> bool:
        """Whether a batch ending at ``end`` reaches the flush position the planning saw."""
        return end >= self.flush

    def _warn_if_held_back(self, conn: psycopg.Connection[Any]) -> None:
        """Name the transaction that makes every read re-decode WAL, at most once a minute."""
        now = time.monotonic()
        if now - self._held_back_warned < HELD_BACK_WARN_EVERY:
            return
        state = slots.slot_state(conn, self.options.slot)
        reread = 0 if state is None else state.confirmed_flush - state.restart_lsn
        if state is None or reread < diagnostics.REREAD_WARN_BYTES:
            return
        # on a standby, the transactions holding it back are the primary's
        holder = diagnostics.restart_holder(self.primary.connection(conn) or conn, state)
        if holder is not None:
            log.warning("%s", diagnostics.describe_holder(self.options.slot, reread, holder))
            self._held_back_warned = now
