"""What a ``pg_cdc`` query does next, on the driver: the snapshot, a resnapshot, the stream with
its backfills, and the reselect horizon, in their order.

* A new query starts at the slot's confirmed position (the slot created if allowed), or with
  ``snapshot=initial`` at the start of a snapshot of the captured tables at the slot's consistent
  point: batches first read the tables (:mod:`postgres_cdc_source.snapshot`: offsets at the
  consistent point carrying the snapshot's progress, one partition per chunk), then stream from
  that point.
* With ``on_slot_lost=resnapshot``, a planning that finds the slot lost (missing or invalidated)
  creates it again and returns the start offset of a new snapshot: that batch is empty (its
  changes are gone with the slot), and the next ones read the snapshot as above. A replayed
  batch of a slot lost since is empty too, for the same reason.
* After a snapshot that was not read from the exported snapshot throughout, the stream
  completes unchanged TOAST values up to a horizon (:mod:`postgres_cdc_source.stream.reselect`).
* While streaming, once the stream has caught up, a batch carries a backfill chunk
  (:mod:`postgres_cdc_source.backfill`).

Where the query stands is its offset (:mod:`.offset`); the stream's own batch ends are
:mod:`.ranges`' to plan.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from connector_common.lsn import format_lsn
from postgres_cdc_source import snapshot
from postgres_cdc_source.backfill.planning import BackfillPlanner
from postgres_cdc_source.backfill.progress import ChunkPlan
from postgres_cdc_source.backfill.splice import ChunkRead
from postgres_cdc_source.connections import DriverConnection, waiting_out_restarts
from postgres_cdc_source.decoding.schema_changes import ColumnState
from postgres_cdc_source.errors import SlotLostError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import exported, lifecycle, positions, slots
from postgres_cdc_source.stream import column_states, splitting
from postgres_cdc_source.stream.offset import PENDING, StreamOffset
from postgres_cdc_source.stream.ranges import RangePlanner
from postgres_cdc_source.stream.schema_watch import catalog_changed, typed_end

if TYPE_CHECKING:
    from postgres_cdc_source.rows import RowFormat

__all__ = ["Coordinator"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Conn = psycopg.Connection[Any]


class Coordinator:
    """One query's phases, for its stream reader; a pickled copy (an executor's) carries no
    connection, exported snapshot or planned chunks."""

    def __init__(self, options: CdcOptions, ranges: RangePlanner,
                 rows: RowFormat | None = None) -> None:
        self.options = options
        self.ranges = ranges
        self.rows = rows
        """The query's row format; one with :attr:`~postgres_cdc_source.rows.RowFormat.
        fixed_tables` ends a batch before a change it cannot type
        (:mod:`~postgres_cdc_source.stream.schema_watch`)."""
        self.backfills = BackfillPlanner(options, ranges.primary)
        self.checked = False
        """Whether this process checked the slot (or created it): done once, before first use."""
        self._db = DriverConnection(options)
        self._exported: exported.ExportedSnapshot | None = None  # held while a snapshot runs
        self._planned: dict[tuple[StreamOffset, StreamOffset], list[snapshot.Chunk]] = {}
        self._initial: StreamOffset | None = None
        self._column_starts: dict[tuple[StreamOffset, StreamOffset], list[ColumnState]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_exported": None, "_planned": {}, "_column_starts": {}}

    def run(self, work: Callable[[Conn], T]) -> T:
        """Run ``work`` on the driver's connection, reconnecting once if the server went away."""
        if not self.checked:  # going on from a checkpoint: initial() was not called
            try:
                lifecycle.ensure_slot(self.options, resuming=True)
            except SlotLostError:
                if not self._resnapshots:
                    raise
                # the planning that finds it lost again takes a new snapshot
            self.checked = True
        return self._db.run(work)

    @property
    def _resnapshots(self) -> bool:
        return self.options.on_slot_lost == "resnapshot"

    def initial(self) -> StreamOffset:
        """Where a new query starts (see the module docstring).

        Spark asks twice (planning batch 0, then for its partitions): the answer is kept, so the
        second call neither finds "our" new slot existing nor drops the exported snapshot.
        """
        if self._initial is None:
            # safe to run again: a slot made before the failure is found and kept (with
            # snapshot=initial its export is gone, so the snapshot reads the tables as they are)
            self._initial = waiting_out_restarts(self._initial_offset, self.options,
                                                 "starting the query")
        return self._initial

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
            self.checked = True
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

    def next_end(self, start: StreamOffset, max_bytes: int | None) -> StreamOffset:
        """The end of the batch from ``start``: the snapshot's next chunks, or the stream's
        next range (with a backfill chunk when one is due), or a new snapshot's start when the
        slot is found lost with ``on_slot_lost=resnapshot``."""
        if start.snapshot is not None:
            return self.run(lambda conn: self._plan_snapshot(conn, start))
        horizon = start.reselect_until
        if horizon == PENDING:  # the snapshot's batches are committed
            horizon = self._reselect_horizon()
        try:
            end_lsn = self.run(lambda conn: self.ranges.plan(conn, start.lsn, max_bytes))
        except SlotLostError as lost:
            if not self._resnapshots:
                raise
            return self._resnapshot(lost)
        rows = self.rows
        if (rows is not None and rows.fixed_tables is not None and end_lsn > start.lsn
                and self.run(lambda conn: catalog_changed(conn, self.options, rows))):
            end_lsn = typed_end(self.options, rows, start.lsn, end_lsn)
        caught_up = self.ranges.caught_up(end_lsn)
        backfills, end_lsn = self.run(lambda conn: self.backfills.plan(
            conn, start.backfill.delivered(), start.lsn, caught_up, end_lsn))
        # reselect_until is kept in every later offset: key changes are completed too
        if not self.options.include_schema_changes:  # a checkpoint's columns are dropped
            return StreamOffset(end_lsn, backfill=backfills, reselect_until=horizon)
        end = StreamOffset(end_lsn, backfill=backfills, reselect_until=horizon,
                           columns=start.columns)
        if end_lsn > start.lsn:
            found = column_states.states(self.options, start.lsn, end_lsn,
                                         self.partition_count(start, end), start.columns)
            end = dataclasses.replace(end, columns=found[-1])
            if len(found) > 2:  # several partitions: their states are kept for partitions()
                self._column_starts[(start, end)] = found[:-1]
        return end

    def partition_count(self, start: StreamOffset, end: StreamOffset) -> int:
        """How many partitions the stream batch ``(start, end]`` is read in: one when it
        carries a backfill chunk (placed by one task where its marker is)."""
        if end.backfill.chunk is not None:
            return 1
        return splitting.partition_count(start.lsn, end.lsn, self.options.min_partitions,
                                         self.options.min_bytes_per_partition)

    def column_starts(self, start: StreamOffset, end: StreamOffset) -> list[ColumnState]:
        """``include_schema_changes``: the state each partition of the stream batch ``(start,
        end]`` starts from (:mod:`.column_states`): kept from planning, or found again for a
        batch this process did not plan (a replay after a restart)."""
        count = self.partition_count(start, end)
        if count == 1:
            return [start.columns]
        found = self._column_starts.pop((start, end), None)
        if found is None:
            found = column_states.states(self.options, start.lsn, end.lsn, count,
                                         start.columns)[:-1]
        return found

    def _reselect_horizon(self) -> int | None:
        """``None`` when every chunk read the exported snapshot (this process exported it and
        its session lived to the end); otherwise the WAL position now, past every chunk's read,
        up to which the stream completes unchanged TOAST values from the tables."""
        held, self._exported = self._exported, None
        exact = held is not None and held.survived()
        if held is not None:
            held.close()
        if exact:
            return None
        horizon = self.run(lambda conn: positions.insert_lsn(conn))
        log.warning(
            "pg_cdc snapshot: some chunks were read without the exported snapshot (a restart, "
            "or a slot that already existed); changes up to %s, and later changes of a row's "
            "key, get unchanged TOAST values read from the tables (docs: pg_cdc, After a crash "
            "during the snapshot)",
            format_lsn(horizon),
        )
        return horizon

    def _plan_snapshot(self, conn: Conn, start: StreamOffset) -> StreamOffset:
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

    def snapshot_partitions(
        self, start: StreamOffset, end: StreamOffset
    ) -> list[snapshot.SnapshotPartition]:
        """The chunks planned for ``(start, end]``: when Spark replays a batch this process did
        not plan (after a restart), the ones ``end`` pins, so each row goes to the same Spark
        partition again; planned anew only for an offset that pins none."""
        chunks = self._planned.pop((start, end), None)
        if chunks is None:
            chunks = self.run(lambda conn: self._replanned(conn, start, end))
        name = self._exported.name if self._exported is not None else None
        return [snapshot.SnapshotPartition(c.table, c.lo, c.hi, name, start.lsn) for c in chunks]

    def _replanned(
        self, conn: Conn, start: StreamOffset, end: StreamOffset
    ) -> list[snapshot.Chunk]:
        if end.planned:
            return snapshot.planned_chunks(conn, end.planned,
                                           generated=self.options.delivers_generated)
        assert start.snapshot is not None
        return snapshot.plan(conn, self.options, start.snapshot, end.snapshot, bounded=False)[0]

    def lost_since(self, start: StreamOffset, end: StreamOffset) -> bool:
        """Whether the stream batch ``(start, end]`` is to be skipped: with
        ``on_slot_lost=resnapshot``, a batch planned before the slot was lost and replayed (its
        changes are gone; the next planning takes a new snapshot)."""
        if not self._resnapshots or not self.run(self._slot_lost):
            return False
        log.warning("pg_cdc: replication slot %s is lost: batch (%s, %s] is skipped, its "
                    "changes are gone; the next batch takes a new snapshot",
                    self.options.slot, format_lsn(start.lsn), format_lsn(end.lsn))
        return True

    def _slot_lost(self, conn: Conn) -> bool:
        state = slots.slot_state(conn, self.options.slot)
        return state is None or state.lost

    def chunk_read(self, chunk: ChunkPlan) -> ChunkRead | None:
        """What reading a backfill chunk needs (its table, looked up now); ``None`` when the
        table is gone."""
        table = self.run(lambda conn: snapshot.describe(
            conn, *chunk.table, generated=self.options.delivers_generated))
        return None if table is None else ChunkRead(chunk, table)

    def stop(self) -> None:
        if self._exported is not None:
            self._exported.close()
            self._exported = None
        self._db.close()
        self.ranges.primary.close()
