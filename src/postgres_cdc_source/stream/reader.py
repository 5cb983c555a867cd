"""The ``pg_cdc`` streaming reader: LSN offsets, a batch's partitions, peek, and commit.

Contract with Spark (pyspark 4.3; see the docs' delivery semantics):

* ``initialOffset``/``latestOffset``/``partitions``/``commit`` run in one long-lived driver-side
  Python process; ``read`` runs on an executor with a pickled copy of this reader, so
  connections are opened lazily and never pickled.
* A batch ``(start, end]`` holds exactly the transactions whose commit record starts at or after
  ``start`` and before ``end``: the slot is put at ``start`` before the batch is read, and the
  read peeks up to ``end``. ``end`` never exceeds the WAL flush position seen when planning.
* The slot moves forward only to LSNs Spark has durably committed: to ``end`` in
  :meth:`commit` (the normal path), or up to ``start`` in every ``latestOffset(start)`` and
  every read of a batch starting there (Spark asks for ``latestOffset(start)`` only after the
  batch ending at ``start`` is in ``commits/``; ``commit`` is at-most-once, is not called when
  nothing is new, and never runs for the last batch of an ``availableNow`` run). So an idle
  server's slot reaches the last committed batch's end within one trigger.
* A batch is read by one task peeking the slot, or (``min_partitions`` > 1 and a batch of at
  least twice ``min_bytes_per_partition``) by several tasks, each peeking one WAL sub-range
  (:mod:`postgres_cdc_source.stream.splitting`) from a temporary copy of the slot; either way
  the query's slot moves only as above.
* With ``snapshot=initial``, batches first read the tables (:mod:`postgres_cdc_source.snapshot`:
  offsets at the slot's consistent point carrying the snapshot's progress, one partition per
  chunk), then stream from that point.
* With ``on_slot_lost=resnapshot``, a planning that finds the slot lost (missing or invalidated)
  creates it again and returns the start offset of a new snapshot: that batch is empty (its
  changes are gone with the slot), and the next ones read the snapshot as above. A replayed
  batch of a slot lost since is empty too, for the same reason.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
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

from postgres_cdc_source import snapshot
from postgres_cdc_source.backfill.planning import BackfillPlanner
from postgres_cdc_source.backfill.splice import ChunkRead, is_marker, spliced
from postgres_cdc_source.connections import (
    DriverConnection,
    connect_with_retry,
    riding_out_restarts,
)
from postgres_cdc_source.decoding.factory import make_decoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import SlotLostError
from postgres_cdc_source.health import SourceHealth, TableBackfill
from postgres_cdc_source.lsn import format_lsn
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import (
    diagnostics,
    exported,
    lifecycle,
    peeking,
    positions,
    publication_sync,
    slots,
)
from postgres_cdc_source.stream import reselect, splitting
from postgres_cdc_source.stream.assembly import record_batches, transactions
from postgres_cdc_source.stream.offset import PENDING, StreamOffset

__all__ = ["PgCdcStreamReader", "CdcPartition"]

log = logging.getLogger(__name__)

HELD_BACK_WARN_EVERY = 60.0
"""Seconds between two warnings naming the transaction that holds the slot's restart point
back (:func:`postgres_cdc_source.replication.diagnostics.restart_holder`)."""
DEGRADED_AFTER = 3
"""Consecutive commits that could not advance the slot before the source reports itself
degraded (a log line per commit and the ``pg_cdc_degraded`` metric); one success clears it."""
T = TypeVar("T")

_CONNECT_RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class CdcPartition(InputPartition):
    """The slot's changes in ``(start, end]`` (integer LSNs): a whole batch, read from the slot,
    or with ``copy_from`` (the batch's start) one sub-range of it, read from a temporary copy."""

    start: int
    end: int
    copy_from: int | None = None
    reselect_until: int | None = None
    """Complete unchanged TOAST values up to here (:mod:`postgres_cdc_source.stream.reselect`)."""
    backfill: ChunkRead | None = None
    """The backfill chunk whose marker lies in the range (:mod:`postgres_cdc_source.backfill`)."""


class PgCdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a logical replication slot as a stream of micro-batches bounded by LSNs."""

    def __init__(self, options: CdcOptions) -> None:
        self.options = options
        self._db = DriverConnection(options)
        self._checked = False
        self._target: int | None = None
        self._exported: exported.ExportedSnapshot | None = None  # held while a snapshot runs
        self._planned: dict[tuple[StreamOffset, StreamOffset], list[snapshot.Chunk]] = {}
        self._initial: StreamOffset | None = None
        self._commit_failures = 0
        self._held_back_warned = -HELD_BACK_WARN_EVERY
        self._backfills = BackfillPlanner(options)
        self._planned_flush = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_exported"] = None
        state["_planned"] = {}
        return state

    # -- driver side ---------------------------------------------------------------------------

    def _driver(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``work`` on the driver's connection, reconnecting once if the server went away."""
        if not self._checked:  # going on from a checkpoint: initialOffset was not called
            try:
                lifecycle.ensure_slot(self.options, resuming=True)
            except SlotLostError:
                if not self._resnapshots:
                    raise
                # the planning that finds it lost again takes a new snapshot
            self._checked = True
        return self._db.run(work)

    @property
    def _resnapshots(self) -> bool:
        return self.options.on_slot_lost == "resnapshot"

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: the slot's confirmed position (created if allowed), or with
        ``snapshot=initial`` the start of a snapshot of the tables at that position.

        Spark asks twice (planning batch 0, then for its partitions): the answer is kept, so the
        second call neither finds "our" new slot existing nor drops the exported snapshot.
        """
        if self._initial is None:
            self._initial = self._initial_offset()
        return self._initial.to_json()

    def _initial_offset(self) -> StreamOffset:
        try:
            if self.options.snapshot == "initial":
                return self._snapshot_start()
            state = lifecycle.ensure_slot(self.options)
        except SlotLostError as lost:
            if not self._resnapshots:
                raise
            return self._resnapshot(lost)
        finally:
            self._checked = True
        return StreamOffset(state.confirmed_flush)

    def _snapshot_start(self) -> StreamOffset:
        """Create the slot exporting a snapshot of its consistent point (if it does not exist)
        and return the offset of a snapshot starting there."""
        self._exported = exported.export_snapshot(self.options)
        state = lifecycle.ensure_slot(self.options)
        if self._exported is None:
            log.warning(
                "pg_cdc: replication slot %s already existed, so no snapshot of its position "
                "could be exported: the snapshot reads the tables as they are now and the "
                "stream repeats the changes since %s (docs: pg_cdc, Initial snapshot)",
                self.options.slot,
                format_lsn(state.confirmed_flush),
            )
            return StreamOffset.snapshot_start(state.confirmed_flush)
        return StreamOffset.snapshot_start(self._exported.consistent_point)

    def _resnapshot(self, lost: SlotLostError) -> StreamOffset:
        """``on_slot_lost=resnapshot``: the slot dropped if invalidated, created again, and the
        start offset of a snapshot of the captured tables at its new consistent point."""
        log.warning(
            "pg_cdc: replication slot %s is lost: %s. on_slot_lost=resnapshot: creating it "
            "again and reading the captured tables as they are now (rows with op 'read'); the "
            "changes since the checkpoint are not delivered (docs: operations, Lost slots)",
            lost.slot, lost.because,
        )
        self._db.run(lambda conn: lifecycle.drop_lost(conn, self.options.slot))
        return self._snapshot_start()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_bytes_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxBytes(self.options.max_bytes_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the flush position now as the target: data arriving later waits for the next run.

        Spark calls this before ``initialOffset``, so it must not create the slot: with
        ``snapshot=initial`` that is ``initialOffset``'s job (it exports the snapshot).
        """
        with connect_with_retry(self.options, autocommit=True) as conn:
            self._target = positions.flush_lsn(conn)

    def reportLatestOffset(self) -> dict[str, Any]:
        """The flush position, plus the slot's health for monitoring.

        Spark shows this only in progress events (``sources[].latestOffset``); it is never
        compared or stored as an offset. That makes it the channel from this driver-side
        worker process to a ``StreamingQueryListener`` in the user's process: the
        :class:`~postgres_cdc_source.health.SourceHealth` contract.
        """
        def report(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            backfills = {name: TableBackfill(t.rows, t.chunks, t.rows_per_second)
                         for name, t in self._backfills.tables.items()}
            health = SourceHealth(diagnostics.health(conn, self.options.slot),
                                  self._commit_failures, self._commit_failures >= DEGRADED_AFTER,
                                  self._backfills.requests, backfills)
            return {**StreamOffset(positions.flush_lsn(conn)).to_json(), **health.as_progress()}

        return self._driver(report)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        return self._latest(StreamOffset.from_json(start), max_bytes).to_json()

    def _latest(self, start: StreamOffset, max_bytes: int | None) -> StreamOffset:
        if start.snapshot is not None:
            return self._driver(lambda conn: self._plan_snapshot(conn, start))
        horizon = start.reselect_until
        if horizon == PENDING:  # the snapshot's batches are committed
            horizon = self._reselect_horizon()
        try:
            end_lsn = self._driver(lambda conn: self._plan(conn, start.lsn, max_bytes))
        except SlotLostError as lost:
            if not self._resnapshots:
                raise
            return self._resnapshot(lost)
        caught_up = end_lsn >= self._planned_flush
        backfills, end_lsn = self._driver(lambda conn: self._backfills.plan(
            conn, start.backfill.delivered(), start.lsn, caught_up, end_lsn))
        # reselect_until is kept in every later offset: key changes are completed too
        return StreamOffset(end_lsn, backfill=backfills, reselect_until=horizon)

    def _reselect_horizon(self) -> int | None:
        """``None`` when every chunk read the exported snapshot (this process exported it and
        its session lived to the end); otherwise the WAL position now, past every chunk's read,
        up to which the stream completes unchanged TOAST values from the tables."""
        exported, self._exported = self._exported, None
        exact = exported is not None and exported.survived()
        if exported is not None:
            exported.close()
        if exact:
            return None
        horizon = self._driver(lambda conn: positions.insert_lsn(conn))
        log.warning(
            "pg_cdc snapshot: some chunks were read without the exported snapshot (a restart, "
            "or a slot that already existed); changes up to %s, and later changes of a row's "
            "key, get unchanged TOAST values read from the tables (docs: pg_cdc, After a crash "
            "during the snapshot)",
            format_lsn(horizon),
        )
        return horizon

    def _plan(self, conn: psycopg.Connection[Any], start: int, max_bytes: int | None) -> int:
        # Spark asks for the end of batch N only once batch N-1 (ending at `start`) is in
        # `commits/`; `commit` for it may never come (nothing new, the end of an availableNow
        # run, a lost callback), so release its WAL here, idle or not.
        positions.bring_to(conn, self.options, start)
        self._warn_if_held_back(conn)
        if self.options.plugin == "pgoutput":
            publication_sync.sync(conn, self.options)  # new tables join before their changes count
        flush = positions.flush_lsn(conn)
        if self._target is not None:
            flush = min(flush, self._target)
        self._planned_flush = flush
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

    def _warn_if_held_back(self, conn: psycopg.Connection[Any]) -> None:
        """Name the transaction that makes every read re-decode WAL, at most once a minute."""
        now = time.monotonic()
        if now - self._held_back_warned < HELD_BACK_WARN_EVERY:
            return
        state = slots.slot_state(conn, self.options.slot)
        holder = None if state is None else diagnostics.restart_holder(conn, state)
        if state is not None and holder is not None:
            reread = state.confirmed_flush - state.restart_lsn
            log.warning("%s", diagnostics.describe_holder(self.options.slot, reread, holder))
            self._held_back_warned = now

    def _slot_lost(self, conn: psycopg.Connection[Any]) -> bool:
        state = slots.slot_state(conn, self.options.slot)
        return state is None or state.lost

    def _plan_snapshot(self, conn: psycopg.Connection[Any], start: StreamOffset) -> StreamOffset:
        assert start.snapshot is not None
        chunks, reached = snapshot.plan(conn, self.options, start.snapshot, None, bounded=True)
        end = StreamOffset.snapshot_batch(start.lsn, reached, tuple(c.pinned() for c in chunks))
        self._planned[(start, end)] = chunks
        log.info(
            "pg_cdc snapshot: next batch reads %d chunks; then %s",
            len(chunks),
            reached.describe() if reached is not None else "snapshot complete",
        )
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self._partitions(StreamOffset.from_json(start), StreamOffset.from_json(end))

    def _partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        if start.snapshot is not None:
            return self._snapshot_partitions(start, end)
        if end.snapshot is not None:
            return []  # the batch on_slot_lost=resnapshot planned: its changes are gone
        if end.lsn <= start.lsn:
            return []
        if self._resnapshots and self._driver(self._slot_lost):
            # a batch planned before the slot was lost, replayed: the next planning resnapshots
            log.warning("pg_cdc: replication slot %s is lost: batch (%s, %s] is skipped, its "
                        "changes are gone; the next batch takes a new snapshot",
                        self.options.slot, format_lsn(start.lsn), format_lsn(end.lsn))
            return []
        until = end.reselect_until
        assert until != PENDING  # only a snapshot batch ends at a pending offset
        chunk = end.backfill.chunk
        if chunk is not None:  # read whole: one task places the chunk where its marker is
            table = self._driver(lambda conn: snapshot.describe(conn, *chunk.table))
            read = None if table is None else ChunkRead(chunk, table)
            return [CdcPartition(start.lsn, end.lsn, reselect_until=until, backfill=read)]
        count = splitting.partition_count(
            start.lsn, end.lsn, self.options.min_partitions, self.options.min_bytes_per_partition
        )
        if count == 1:
            return [CdcPartition(start.lsn, end.lsn, reselect_until=until)]
        return [
            CdcPartition(lo, hi, copy_from=start.lsn, reselect_until=until)
            for lo, hi in splitting.sub_ranges(start.lsn, end.lsn, count)
        ]

    def _snapshot_partitions(
        self, start: StreamOffset, end: StreamOffset
    ) -> list[snapshot.SnapshotPartition]:
        """The chunks planned for ``(start, end]``: when Spark replays a batch this process did
        not plan (after a restart), the ones ``end`` pins, so each row goes to the same Spark
        partition again; planned anew only for an offset that pins none."""
        chunks = self._planned.pop((start, end), None)
        if chunks is None:
            chunks = self._driver(lambda conn: self._replanned(conn, start, end))
        name = self._exported.name if self._exported is not None else None
        return [snapshot.SnapshotPartition(c.table, c.lo, c.hi, name, start.lsn) for c in chunks]

    def _replanned(
        self, conn: psycopg.Connection[Any], start: StreamOffset, end: StreamOffset
    ) -> list[snapshot.Chunk]:
        if end.planned:
            return snapshot.planned_chunks(conn, end.planned)
        assert start.snapshot is not None
        return snapshot.plan(conn, self.options, start.snapshot, end.snapshot, bounded=False)[0]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has durably committed every batch up to ``end``: release that WAL.

        A failure here loses nothing (the next batch's planning or read moves the slot up to its
        start), so it is logged rather than allowed to stop the query.
        """
        end_lsn = StreamOffset.from_json(end).lsn
        try:
            self._driver(lambda conn: positions.advance(conn, self.options.slot, end_lsn))
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
        if self._exported is not None:
            self._exported.close()
            self._exported = None
        self._db.close()

    # -- executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Peek the slot from ``start`` to ``end`` and yield the batch's rows as Arrow batches
        (or read one snapshot chunk)."""
        if isinstance(partition, snapshot.SnapshotPartition):
            yield from riding_out_restarts(
                lambda: snapshot.read_chunk(self.options, partition), self.options,
                repeatable=False,
            )
            return
        assert isinstance(partition, CdcPartition)
        # a chunk's rows are read anew each time: not the same rows, so never skipped by count
        yield from riding_out_restarts(
            lambda: _peeked(self.options, partition), self.options,
            repeatable=partition.backfill is None,
        )


def _peeked(options: CdcOptions, partition: CdcPartition) -> Generator[pa.RecordBatch, None, None]:
    """The batch's rows: the slot (or a temporary copy) put at the partition's start and
    peeked to its end, which gives the same rows however often it is done."""
    conn = connect_with_retry(options, autocommit=False)
    try:
        rows = peeking.peek_range(conn, options, partition.start, partition.end,
                                  partition.copy_from)
        decoder = make_decoder(options, conn, is_marker if partition.backfill else None)
        events = decoder.events(rows)
        txns = reselect.complete(transactions(events, options.spill_rows), options,
                                 partition.reselect_until)
        with _collector_paused():
            if partition.backfill is not None:
                yield from spliced(txns, partition.backfill, options, Router(options))
            else:
                yield from record_batches(txns, Router(options), options.batch_rows)
    finally:
        conn.close()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a partition is decoded.

    Decoding allocates a few containers per change (a row dict, the key's dict, a tuple), none of
    them in a reference cycle: reference counting frees them all, and the collector, triggered
    every 700 allocations, finds nothing; it was about 7% of the read's instructions (callgrind,
    pgoutput). The few cycles made meanwhile (an exception's traceback) are collected once the
    read ends. It is re-enabled even if the read fails or is closed early, and left alone if it
    was already off (a concurrent read in the same process).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
