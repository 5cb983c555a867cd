"""The driver's part of a backfill: finding requests in the WAL, and placing one chunk per
micro-batch in the stream with a marker.

A chunk's rows are read on the executor *after* its marker committed, and placed in the stream
right where the marker is: every change before that place is older than what the read sees,
every change after it is delivered after the rows. So replaying the stream in order ends with
each key's current value, and a row deleted before the read is never read, whenever the read
runs (again, after a crash: the rows it then reads are at least as new). Between a chunk's rows
and the changes that follow them a consumer may briefly see a row newer than the next change
of its key; the last one is the newest.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from connector_common.lsn import format_lsn
from postgres_cdc_source import snapshot
from postgres_cdc_source.backfill.progress import Backfills, ChunkPlan, Request, TableProgress
from postgres_cdc_source.backfill.requests import Malformed, request_of
from postgres_cdc_source.decoding.factory import parse_message
from postgres_cdc_source.options import (
    BACKFILL_CHANNEL,
    MARKER_PREFIX,
    REQUEST_PREFIX,
    REQUESTS_TABLE,
    CdcOptions,
)
from postgres_cdc_source.replication import peeking, positions, request_table, standby
from postgres_cdc_source.replication.publication import all_name
from postgres_cdc_source.snapshot.planning import key_range
from postgres_cdc_source.snapshot.reading import GUARDS

__all__ = ["BackfillPlanner"]

SEARCH_TIMEOUT = 5.0
"""Seconds a search may take at first (a failover slot's read waits for its standbys, which
may be gone); doubled after each search that took longer, up to :data:`SEARCH_TIMEOUT_MAX`."""
SEARCH_TIMEOUT_MAX = 300.0
_STANDBY = object()
"""What the planner listens on when the query reads a standby without ``primary_dsn``:
nothing (warned once)."""

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]


class BackfillPlanner:
    """Keeps one query's backfills moving; lives in the driver beside the stream reader.

    The WAL is searched for requests when this process plans its first batch and whenever a
    ``NOTIFY`` on :data:`~postgres_cdc_source.options.BACKFILL_CHANNEL` arrives. The slot
    passes a batch's range once the batch commits, so until a search reaches the flush
    position every batch's own range is searched as it is planned: a backlog read in several
    batches after a notification is decoded twice, steady state not at all. After a start, a
    batch's range is searched only where the requests table could hold a row for it (rows
    written while the query was down, or being written): a request is a row, so a start on a
    backlog without one decodes it once. A chunk
    is planned only when the stream has caught up (the batch ends at the flush position), so a
    backfill never holds the stream back.
    """

    def __init__(self, options: CdcOptions, primary: standby.Primary | None = None) -> None:
        self.options = options
        self._primary = primary or standby.Primary(options)
        """Where requests are listened for and markers written: the server read, or its
        primary when that is a standby."""
        self._search = True
        self._told = False
        """A ``NOTIFY`` arrived since the last search that reached the flush position."""
        self._search_timeout = SEARCH_TIMEOUT
        self._listening: Conn | object | None = None
        self._started: dict[str, float] = {}
        self.tables: dict[str, TableProgress] = {}
        """Rows and chunks planned by this process, per table (``schema.table``)."""
        self.requests = 0
        """Requests queued or running at the last planning."""
        self.skipped = 0
        """Request messages skipped since this process started: without a row of the trusted
        requests table at their LSN (forged, or a release's that sent requests as messages),
        or with a row this version cannot take
        (:mod:`~postgres_cdc_source.replication.request_table`)."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_listening": None}

    def _notified(self, _notify: psycopg.Notify) -> None:
        self._search = self._told = True

    def plan(
        self, conn: Conn, state: Backfills, start: int, caught_up: bool, end: int
    ) -> tuple[Backfills, int]:
        """The state and end of the batch from ``start`` (where the slot is), which the stream
        alone would end at ``end`` (``caught_up``: at the flush position): with a chunk (and its
        marker) if one is due."""
        state, end = self._plan(conn, state, start, caught_up, end)
        self.requests = len(state.queue)
        return state, end

    def _plan(
        self, conn: Conn, state: Backfills, start: int, caught_up: bool, end: int
    ) -> tuple[Backfills, int]:
        writer = self._primary.connection(conn)
        if writer is None:  # a standby without primary_dsn: no requests, no markers
            if self._listening is not _STANDBY:
                self._listening = _STANDBY
                log.warning("pg_cdc backfill: the query reads a standby without primary_dsn, "
                            "so it takes no backfill requests and runs no backfill (requests "
                            "and chunk markers need the primary): set primary_dsn")
            return state, end
        if self._listening is not writer:
            writer.execute(sql.SQL("LISTEN {}").format(sql.Identifier(BACKFILL_CHANNEL)))
            writer.add_notify_handler(self._notified)
            self._listening = writer
            self._search = True
        writer.execute("SELECT 1")  # delivers the notifications that arrived meanwhile
        flush = positions.flush_lsn(conn)
        if self._search:  # in a backlog, the batch's own range: the next planning is past it
            # before: a NOTIFY during the search sets them again
            told, self._told = self._told, self._told and not caught_up
            self._search = not caught_up
            searched = self._requests(conn, writer, state, start,
                                      flush if caught_up else end, told)
            if searched is None:  # the slot must not pass WAL a due search has not read
                self._search = True
                self._told = self._told or told
                return state, start
            state = searched
        if not caught_up:  # the backlog first: chunks are planned once it is read
            return state, end
        if not state.queue:
            return state, end
        while state.queue:
            head = state.queue[0]
            table = self._table(conn, head)
            if table is not None:
                return self._chunk(conn, writer, state, head, table, end)
            state = state.without_table(head.tables[0])
        return state, end

    def _requests(
        self, conn: Conn, writer: Conn, state: Backfills, start: int, upto: int, told: bool
    ) -> Backfills | None:
        """``state`` with the requests and cancels written up to ``upto`` (the flush position
        ends the search; a batch's end, in a backlog, does not). The search reads the WAL from
        ``start``, as the batch will, under a timeout (:data:`SEARCH_TIMEOUT`); ``None`` when
        it took longer: the batch then waits for the next planning's try. Unless ``told`` (a
        ``NOTIFY`` since the last search that reached the flush position, whose messages are
        then all read and the forged ones named), the search runs only where the requests
        table could hold a row of a message it would find
        (:func:`~postgres_cdc_source.replication.request_table.may_hold`): a start or a
        backlog is not decoded twice for requests that are not there."""
        if not (told or writer is not conn
                or request_table.may_hold(conn, self.options.slot, state.scanned, upto)):
            return state.requested([], set(), upto)
        pubs = peeking.publications(conn, self.options, start)
        # a new table's first rows are missing from the stream only with the managed pair
        # alone; whoever reads <publication>_all from here on gets them in the stream
        created_for = (self.options.publication if self.options.plugin == "pgoutput"
                       and all_name(self.options.publication) not in pubs else None)
        try:
            with conn.transaction():
                conn.execute("SELECT pg_catalog.set_config('statement_timeout', %s, true)",
                             (f"{int(self._search_timeout * 1000)}ms",))
                messages = peeking.peek_messages(conn, self.options, upto, pubs)
        except psycopg.errors.QueryCanceled:
            log.warning("pg_cdc backfill: searching the WAL up to %s for requests took over "
                        "%.0f s; the stream waits for the next planning's try", format_lsn(upto),
                        self._search_timeout)
            self._search_timeout = min(self._search_timeout * 2, SEARCH_TIMEOUT_MAX)
            return None
        self._search_timeout = SEARCH_TIMEOUT
        at = [lsn for lsn, data in messages if lsn > state.scanned
              and parse_message(self.options.plugin, data)[1] == REQUEST_PREFIX]
        rows = request_table.rows_at(conn, at)
        found: list[Request] = []
        cancels: set[str] = set()
        for lsn in at:
            row = rows.get(lsn)
            if row is None:
                self._skip(lsn, f"no row of {'.'.join(REQUESTS_TABLE)} placed it (a request is "
                           "a row of that table; a message alone proves nothing of its writer)")
                continue
            try:
                request = request_of(row, self.options.slot, created_for)
            except Malformed as exc:
                self._skip(lsn, f"{exc} (requested by {row.requested_by})")
                continue
            if (isinstance(request, Request) and request.created is not None
                    and not self.options.keeps(*request.tables[0])):
                continue
            if isinstance(request, str):
                cancels.add(request)
                log.warning("pg_cdc backfill %s: cancelled by %s", request, row.requested_by)
            elif request is not None:
                found.append(request)
                log.info("pg_cdc backfill %s: requested by %s for %s", request.id,
                         row.requested_by, ", ".join(".".join(t) for t in request.tables))
        return state.requested(found, cancels, upto)

    def _skip(self, lsn: int, why: str) -> None:
        self.skipped += 1
        log.warning("pg_cdc backfill: the request message at LSN %s is skipped: %s",
                    format_lsn(lsn), why)

    def _table(self, conn: Conn, head: Request) -> snapshot.SnapshotTable | None:
        """The request's current table, if the query can backfill it (else a warning)."""
        name = head.tables[0]
        where = ".".join(name)
        table = snapshot.describe(conn, *name, generated=self.options.delivers_generated)
        if table is None:
            log.warning("pg_cdc backfill %s: table %s is gone; skipped", head.id, where)
        elif not (head.created is not None or name in snapshot.captured_tables(conn, self.options)):
            log.warning("pg_cdc backfill %s: table %s is not captured by this query "
                        "(include_tables/exclude_tables, or not in the publication); skipped",
                        head.id, where)
        elif not table.keyed and head.created is None:
            log.warning("pg_cdc backfill %s: table %s has no primary key; skipped", head.id,
                        where)
        else:
            return table
        return None

    def _chunk(
        self, conn: Conn, writer: Conn, state: Backfills, head: Request,
        table: snapshot.SnapshotTable, end: int,
    ) -> tuple[Backfills, int]:
        """Plan the next chunk of ``head``'s table and write its marker (on ``writer``, the
        primary, when ``conn`` is a standby: the batch then ends once the standby replayed
        it, or without the chunk, ending at ``end``, if it did not within
        :data:`~postgres_cdc_source.replication.standby.REPLAY_WAIT`)."""
        with conn.transaction():
            for setting, value in GUARDS.items():
                conn.execute("SELECT pg_catalog.set_config(%s, %s, true)", (setting, value))
            hi = snapshot.next_bound(conn, table, head.after, None,
                                     self.options.backfill_chunk_rows)
        nonce = uuid.uuid4().hex
        # flushed at commit, so the batch can end after it; applied by synchronous standbys,
        # so every earlier commit waiting for one is released (backfill.visibility)
        with writer.transaction():
            writer.execute("SET LOCAL synchronous_commit = remote_apply")
            writer.execute("SELECT pg_catalog.pg_logical_emit_message(true, %s, %s)",
                           (MARKER_PREFIX, nonce))
        if writer is not conn and not standby.wait_replayed(conn, positions.insert_lsn(writer)):
            log.warning("pg_cdc backfill %s: the standby did not replay the chunk's marker "
                        "within %.0f s; the chunk is planned again at the next planning",
                        head.id, standby.REPLAY_WAIT)
            return state, end
        chunk = ChunkPlan(head.id, nonce, head.tables[0], head.after, hi, head.where,
                          head.created)
        started = self._started.setdefault(head.id, time.monotonic())
        name = ".".join(chunk.table)
        rows = self.options.backfill_chunk_rows if hi is not None else _rows_after(
            conn, table, head.after)
        progress = self.tables.get(name, TableProgress()).planned(rows, time.monotonic())
        self.tables[name] = progress
        log.info(
            "pg_cdc backfill %s: %s chunk %d, keys after %s up to %s; %d chunks in %.0f s; "
            "%s: %d rows at %.0f rows/s",
            head.id, name, head.chunks + 1, _shown(chunk.lo), _shown(hi),
            head.chunks + 1, time.monotonic() - started, name, progress.rows,
            progress.rows_per_second,
        )
        return Backfills(state.queue, chunk, state.scanned), positions.flush_lsn(conn)


def _rows_after(conn: Conn, table: snapshot.SnapshotTable, lo: tuple[str, ...] | None) -> int:
    """The rows of ``table``'s last chunk (keys after ``lo``): fewer than a chunk's worth."""
    where, params = key_range(table, lo, None)
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}{}").format(
        table.relation(), where), params).fetchone()
    return 0 if row is None else int(row[0])


def _shown(key: tuple[str, ...] | None) -> str:
    return "the end" if key is None else "(" + ", ".join(key) + ")"
