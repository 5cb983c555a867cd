"""The ``pg_cdc`` streaming reader: LSN offsets, a batch's partitions, peek, and commit.

Contract with Spark (pyspark 4.2+, and 4.0/4.1 through
:mod:`connector_common.spark_versions`; see the docs' delivery semantics):

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
* What comes before and between the stream's batches (the initial snapshot, a resnapshot after
  the slot was lost, backfill chunks, the reselect horizon) is
  :mod:`postgres_cdc_source.stream.coordinator`'s to sequence; offsets are
  :class:`~postgres_cdc_source.stream.offset.StreamOffset`.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from types import ModuleType
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from connector_common.lsn import format_lsn
from connector_common.spark_versions import (
    BatchStarts,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)
from postgres_cdc_source import snapshot
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.backfill.splice import ChunkRead, is_marker, spliced
from postgres_cdc_source.catalog import column_lists
from postgres_cdc_source.connections import connect_with_retry, riding_out_restarts
from postgres_cdc_source.decoding import compiled
from postgres_cdc_source.decoding.factory import make_decoder
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.decoding.schema_changes import ColumnState, ColumnTracker
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.health import SourceHealth, TableBackfill
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import diagnostics, peeking, positions
from postgres_cdc_source.rows import RowFormat
from postgres_cdc_source.rows.json.format import JSON_ROWS
from postgres_cdc_source.rows.struct.structs import StructRows
from postgres_cdc_source.stream import halves, reselect, splitting
from postgres_cdc_source.stream.coordinator import Coordinator
from postgres_cdc_source.stream.offset import PENDING, StreamOffset
from postgres_cdc_source.stream.ranges import RangePlanner

__all__ = ["CdcPartition", "PgCdcStreamReader"]

log = logging.getLogger(__name__)

DEGRADED_AFTER = 3
"""Consecutive commits that could not advance the slot before the source reports itself
degraded (a log line per commit and the ``pg_cdc_degraded`` metric); one success clears it."""


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
    columns: ColumnState = ()
    """``include_schema_changes``: the captured tables' columns at ``start``
    (:mod:`postgres_cdc_source.stream.column_states`)."""


class PgCdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a logical replication slot as a stream of micro-batches bounded by LSNs, its rows
    of the format ``rows`` (fixed when the query started; the JSON mode's by default)."""

    def __init__(self, options: CdcOptions, rows: RowFormat = JSON_ROWS) -> None:
        self.options = options
        self.rows = rows
        self._ranges = RangePlanner(options)
        self._phases = Coordinator(options, self._ranges, rows)
        self._commit_failures = 0
        self._starts = BatchStarts()
        if options.plugin == "pgoutput":
            compiled.announce()

    # -- driver side ---------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: the slot's confirmed position (created if allowed), or with
        ``snapshot=initial`` the start of a snapshot of the tables at that position."""
        return self._stamped(self._phases.initial().to_json())

    def _stamped(self, offset: dict[str, Any]) -> dict[str, Any]:
        """``offset`` with what the row format keeps there (``struct``'s structs)."""
        return self.rows.stamped(offset)

    def _check_structs(self, offset: dict[str, Any]) -> None:
        """Refuse to go on from a checkpoint's offset the row format cannot go on from."""
        self.rows.check_offset(offset, self.options)

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
            self._ranges.target = positions.flush_lsn(conn)

    def reportLatestOffset(self) -> dict[str, Any]:
        """The flush position, plus the slot's health for monitoring.

        Spark shows this only in progress events (``sources[].latestOffset``); it is never
        compared or stored as an offset. That makes it the channel from this driver-side
        worker process to a ``StreamingQueryListener`` in the user's process: the
        :class:`~postgres_cdc_source.health.SourceHealth` contract.
        """
        planner = self._phases.backfills

        def report(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            backfills = {name: TableBackfill(t.rows, t.chunks, t.rows_per_second)
                         for name, t in planner.tables.items()}
            health = SourceHealth(diagnostics.health(conn, self.options.slot),
                                  self._commit_failures, self._commit_failures >= DEGRADED_AFTER,
                                  planner.requests, backfills, planner.skipped,
                                  compiled.core() is not None)
            return {**StreamOffset(positions.flush_lsn(conn)).to_json(), **health.as_progress()}

        return self._phases.run(report)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next batch. Spark 4.0/4.1 pass neither argument: the batch starts
        where the last one planned ended, and ``max_bytes_per_trigger`` caps it."""
        begin = self._starts.start(start, self.initialOffset)
        self._check_structs(begin)
        limit = self.getDefaultReadLimit() if limit is None else limit
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        return self._stamped(
            self._phases.next_end(StreamOffset.from_json(begin), max_bytes).to_json())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._starts.planned(end)
        self._check_structs(start)
        if start == end:  # an empty range: Spark 4.0/4.1 ask for one when a query restarts
            return []
        return self._partitions(StreamOffset.from_json(start), StreamOffset.from_json(end))

    def _partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        if start.snapshot is not None:
            return self._phases.snapshot_partitions(start, end)
        if end.snapshot is not None:
            return []  # the batch on_slot_lost=resnapshot planned: its changes are gone
        if end.lsn <= start.lsn or self._phases.lost_since(start, end):
            return []
        until = end.reselect_until
        assert until != PENDING  # only a snapshot batch ends at a pending offset
        count = self._phases.partition_count(start, end)
        columns = ([()] * count if not self.options.include_schema_changes
                   else self._phases.column_starts(start, end))
        chunk = end.backfill.chunk
        if chunk is not None:  # read whole: one task places the chunk where its marker is
            read = self._phases.chunk_read(chunk)
            return [CdcPartition(start.lsn, end.lsn, reselect_until=until, backfill=read,
                                 columns=columns[0])]
        if count == 1:
            return [CdcPartition(start.lsn, end.lsn, reselect_until=until, columns=columns[0])]
        return [
            CdcPartition(lo, hi, copy_from=start.lsn, reselect_until=until, columns=state)
            for (lo, hi), state in zip(splitting.sub_ranges(start.lsn, end.lsn, count), columns,
                                       strict=True)
        ]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has durably committed every batch up to ``end``: release that WAL.

        A failure here loses nothing (the next batch's planning or read moves the slot up to its
        start), so it is logged rather than allowed to stop the query.
        """
        end_lsn = StreamOffset.from_json(end).lsn
        try:
            self._phases.run(lambda conn: positions.advance(conn, self.options.slot, end_lsn))
        except Exception as exc:  # at-most-once callback; see docstring
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
        self._phases.stop()

    # -- executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Peek the slot from ``start`` to ``end`` and yield the batch's rows as Arrow batches
        (or read one snapshot chunk)."""
        if isinstance(partition, snapshot.SnapshotPartition):
            yield from riding_out_restarts(
                lambda: snapshot.read_chunk(self.options, partition, self.rows), self.options,
                repeatable=False,
            )
            return
        assert isinstance(partition, CdcPartition)
        # a chunk's rows are read anew each time: not the same rows, so never skipped by count
        yield from riding_out_restarts(
            lambda: _peeked(self.options, partition, self.rows), self.options,
            repeatable=partition.backfill is None,
        )


def _peeked(
    options: CdcOptions, partition: CdcPartition, rows_format: RowFormat = JSON_ROWS
) -> Generator[pa.RecordBatch, None, None]:
    """The batch's rows: the slot (or a temporary copy) put at the partition's start and
    peeked to its end, which gives the same rows however often it is done."""
    conn = connect_with_retry(options, autocommit=False)
    try:
        core = _compiled(options, rows_format)
        fetched = (halves.fetched_halves(conn, options, partition.start, partition.end)
                   if partition.copy_from is None and partition.backfill is None
                   else peeking.fetched_range(conn, options, partition.start, partition.end,
                                              partition.copy_from))
        columns = None
        if options.include_schema_changes:
            columns = ColumnTracker(partition.columns,
                                    lambda old, new, keys: column_lists(conn, old, new, keys))
        decoder = make_decoder(options, conn, is_marker if partition.backfill else None,
                               rows_format.retyping, columns)
        events: Iterable[Any]
        if core is not None:
            assert isinstance(decoder, PgOutputDecoder)  # _compiled takes pgoutput only
            events = compiled.CompiledPgOutput(
                decoder, core, rows_format if isinstance(rows_format, StructRows) else None,
            ).events(fetched)
        else:
            events = decoder.events(chain.from_iterable(fetched))
        txns = transactions(events, options.spill_rows)
        txns = reselect.complete(txns, options, partition.reselect_until, rows_format)
        schema = rows_format.schemas()[1]
        router = Router(options, rows_format)
        with _collector_paused():
            if partition.backfill is not None:
                yield from spliced(txns, partition.backfill, options, router, rows_format)
            else:
                yield from record_batches(txns, router, options.batch_rows, schema)
    finally:
        conn.close()


def _compiled(options: CdcOptions, rows: RowFormat) -> ModuleType | None:
    """The compiled core, when it reads the batch: pgoutput's rows of the JSON mode or of
    ``row_format=struct`` with no route by a column (nor, with ``struct``, by the key's JSON
    text); otherwise the Python decoder reads it."""
    if options.plugin != "pgoutput" or options.routes_by_column:
        return None
    if rows.retyping is not None and (not isinstance(rows, StructRows)
                                      or options.partition_key_from is not None):
        return None
    return compiled.core()


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
