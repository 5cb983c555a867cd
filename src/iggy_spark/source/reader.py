"""Spark's reader contracts for ``format("iggy")``: batch and micro-batch streaming.

Planning (offsets, partitions) runs on the driver over :mod:`~iggy_spark.source.catalog`;
:meth:`read` runs in executors on a pickled copy and only polls its range
(:mod:`~iggy_spark.source.polling`). Offsets are ``{topic: {partition: next offset}}``; Spark
checkpoints them before a batch runs, so a batch replayed after a crash gets the same ranges and
reads the same messages: with Spark's exactly-once sinks, every message lands once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from connector_common.spark_versions import (
    BatchStarts,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from iggy_spark.errors import ConfigError
from iggy_spark.source import catalog, progress
from iggy_spark.source.errors import DataLoss, SourceError, raise_or_skip
from iggy_spark.source.offsets import (
    EARLIEST,
    LATEST,
    Position,
    Range,
    admit,
    from_json,
    resolve,
    split,
    to_json,
)
from iggy_spark.source.options import SourceOptions
from iggy_spark.source.polling import read_range

__all__ = ["IggyBatchReader", "IggyStreamReader"]

_log = logging.getLogger(__name__)


def _read(
    options: SourceOptions, rows: pa.Schema | None, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    work: Range | None = partition.value
    return iter(()) if work is None else read_range(options, work, rows)


def _partitions(
    options: SourceOptions, start: Mapping[Position, int], end: Mapping[Position, int]
) -> Sequence[InputPartition]:
    """One Spark partition per range; one empty one when there is nothing to read (Spark wants
    at least one)."""
    ranges = split(start, end, options.max_messages_per_partition)
    return [InputPartition(r) for r in ranges] or [InputPartition(None)]


def _starting(options: SourceOptions, latest: Mapping[Position, int]) -> dict[Position, int]:
    """``starting_offsets`` (or ``starting_timestamp``) resolved against the partitions that
    exist now."""
    if options.starting_timestamp is not None:
        found = catalog.at_timestamp(options, latest, options.starting_timestamp)
        return {p: found.get(p, end) for p, end in latest.items()}
    spec = options.starting
    oldest = [p for p in latest
              if spec.explicit.get(p, EARLIEST if spec.default is None else spec.default)
              == EARLIEST]
    try:
        return resolve(spec, catalog.earliest(options, oldest), latest, EARLIEST)
    except ValueError as exc:
        raise ConfigError("starting_offsets", str(exc)) from None


def _ending(options: SourceOptions, latest: Mapping[Position, int]) -> dict[Position, int]:
    """``ending_offsets`` (or ``ending_timestamp``) resolved against the partitions that exist
    now."""
    if options.ending_timestamp is not None:
        found = catalog.at_timestamp(options, latest, options.ending_timestamp)
        return {p: found.get(p, end) for p, end in latest.items()}
    try:
        return resolve(options.ending, {}, latest, LATEST)
    except ValueError as exc:
        raise ConfigError("ending_offsets", str(exc)) from None


class IggyBatchReader(DataSourceReader):
    """``spark.read.format("iggy")``: from ``starting_offsets`` (or ``starting_timestamp``) to
    ``ending_offsets`` (or ``ending_timestamp``), resolved once when Spark plans the read."""

    def __init__(self, options: SourceOptions, rows: pa.Schema | None) -> None:
        self.options = options
        self.rows = rows
        """The schema payloads are parsed into; ``None``: the message columns."""

    def partitions(self) -> Sequence[InputPartition]:
        latest = catalog.latest(self.options)
        start = _starting(self.options, latest)
        end = _ending(self.options, latest)
        for position, stop in end.items():
            if stop < start[position]:
                option = ("ending_offsets" if self.options.ending_timestamp is None
                          else "ending_timestamp")
                raise ConfigError(option, f"offset {stop} of topic "
                                  f"{position.topic!r} partition {position.partition} is before "
                                  f"its starting offset {start[position]}")
        return _partitions(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, self.rows, partition)


class IggyStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("iggy")``: micro-batches of offset ranges.

    ``latestOffset`` lists the subscription afresh every time (a ``topic_pattern`` picks up new
    topics, new partitions start at their earliest offset) and admits at most
    ``max_messages_per_trigger`` messages and ``max_bytes_per_trigger`` bytes; under
    ``Trigger.AvailableNow`` it never goes past the offsets seen when the trigger started.
    Spark's checkpoint is the only record of progress; ``commit`` at most reports it
    (``report_consumer``).
    """

    def __init__(self, options: SourceOptions, rows: pa.Schema | None) -> None:
        self.options = options
        self.rows = rows
        """The schema payloads are parsed into; ``None``: the message columns."""
        self._ceiling: dict[Position, int] | None = None
        self._planned: tuple[dict[Position, int], dict[Position, int]] | None = None
        """The latest offsets and the end the last ``latestOffset`` saw and admitted."""
        self._initial: dict[str, Any] | None = None
        self._starts = BatchStarts()

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: resolved once, so that every call (Spark 4.2 asks twice,
        4.0/4.1 ask after ``latestOffset``) gets the same ``latest``."""
        if self._initial is None:
            self._initial = to_json(_starting(self.options, catalog.latest(self.options)))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        # Python sources get one limit from Spark (no composite): the messages cap when given,
        # else the bytes cap; latestOffset applies both options whenever the limit is not
        # ReadAllAvailable.
        messages, size = self.options.max_messages_per_trigger, self.options.max_bytes_per_trigger
        if messages is not None:
            return ReadMaxRows(messages)
        return ReadAllAvailable() if size is None else ReadMaxBytes(size)

    def prepareForTriggerAvailableNow(self) -> None:
        self._ceiling = catalog.latest(self.options)

    def reportLatestOffset(self) -> dict[str, Any]:
        """The partitions' latest offsets and lag (:mod:`~iggy_spark.source.progress`), as
        ``latestOffset`` just saw them: Spark calls this right after it."""
        if self._planned is None:
            latest = catalog.latest(self.options)
            return progress.report(latest, latest)
        return progress.report(*self._planned)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next batch (Spark 4.0/4.1 pass neither argument: see
        :class:`~connector_common.spark_versions.BatchStarts`; the options cap it)."""
        begin = from_json(self._starts.start(start, self.initialOffset))
        limit = self.getDefaultReadLimit() if limit is None else limit
        # a listed topic deleted under the query is lost data, for fail_on_data_loss: with
        # false it stays passed over at every later planning (no longer in the offsets)
        known = (self.options.topics or ()) if not self.options.fail_on_data_loss else {
            position.topic for position in begin}
        tails = catalog.tails(self.options, known)
        latest = {position: tail.next for position, tail in tails.items()}
        self._check_lost(begin, latest)
        now = self._bounded(latest, begin)
        new = [p for p in now if p not in begin]
        base = {**begin, **self._first(new, now)}
        # a partition that vanished is left out; one whose end went back (both only with
        # fail_on_data_loss=false) has nothing admitted and goes on from its new end
        end = self._admitted(limit, base, now, tails)
        self._planned = (latest, end)
        return to_json(end)

    def _admitted(
        self, limit: ReadLimit, base: dict[Position, int], now: dict[Position, int],
        tails: Mapping[Position, catalog.Tail],
    ) -> dict[Position, int]:
        """How far the batch reads under ``limit`` (both caps unless it is ReadAllAvailable)."""
        if isinstance(limit, ReadAllAvailable):
            return now
        messages = limit.max_rows if isinstance(limit, ReadMaxRows) else (
            self.options.max_messages_per_trigger)
        size = limit.max_bytes if isinstance(limit, ReadMaxBytes) else (
            self.options.max_bytes_per_trigger)
        end = admit(base, now, messages)
        weights = {position: tail.message_bytes for position, tail in tails.items()}
        return admit(base, end, size, weights)

    def _bounded(
        self, now: dict[Position, int], begin: Mapping[Position, int]
    ) -> dict[Position, int]:
        """Under ``Trigger.AvailableNow``: no further than what existed when it started, and
        never back from where the batch starts: Spark takes the ceiling before a new query's
        ``initialOffset``, so ``starting_offsets=latest`` can start past it (an end before the
        start would read as a recreated partition, and read it from its beginning)."""
        if self._ceiling is None:
            return now
        ceiling = self._ceiling

        def bound(p: Position, end: int) -> int:
            limit = ceiling.get(p, begin.get(p, end))
            return min(end, limit if p not in begin else max(limit, begin[p]))

        return {p: bound(p, end) for p, end in now.items() if p in ceiling or p in begin}

    def _check_lost(self, begin: Mapping[Position, int], now: Mapping[Position, int]) -> None:
        """Partitions that vanished or whose end went backwards lost what the checkpoint says
        was there: fatal unless ``fail_on_data_loss=false``, which logs a warning and goes on."""
        for position, offset in sorted(begin.items()):
            if position not in now:
                why = f"partition {position.partition} no longer exists (topic deleted?)"
            elif now[position] < offset:
                why = (f"partition {position.partition} ends at {now[position]}, before the "
                       f"checkpoint's offset {offset} (topic recreated?)")
            else:
                continue
            if self.options.fail_on_data_loss:
                raise SourceError(position.topic, f"{why}; set fail_on_data_loss=false to go on")
            _log.warning("iggy: topic %r %s; going on (fail_on_data_loss=false)",
                         position.topic, why)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._starts.planned(end)
        if start == end:  # an empty range: Spark 4.0/4.1 ask for one when a query restarts
            return []
        begin, stop = from_json(start), from_json(end)
        # a partition whose end went back past the start was recreated (the query passed that
        # over with fail_on_data_loss=false): it is new, read from its start like one
        new = [p for p in stop if p not in begin or stop[p] < begin[p]]
        first = self._first(new, stop)
        for position, offset in sorted(first.items()):
            if offset and position not in begin:
                raise_or_skip(DataLoss(position.topic, position.partition, 0, offset,
                                       "the partition appeared while the query ran, and no "
                                       "longer holds its first messages"),
                              self.options.fail_on_data_loss)
        begin.update(first)
        return _partitions(self.options, begin, stop)

    def _first(self, new: Sequence[Position], ends: Mapping[Position, int]) -> dict[Position, int]:
        """Where partitions new to the query begin: their oldest message, or their end when
        they hold nothing (never written, or emptied by retention)."""
        return {p: ends[p] for p in new} | catalog.earliest(self.options, new)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, self.rows, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Offsets live in Spark's checkpoint; only ``report_consumer`` tells the server.

        Reporting is monitoring: a failure is logged, never fails the query (Spark does not
        retry ``commit`` anyway, and the next one reports further).
        """
        name = self.options.report_consumer
        if name is None:
            return
        try:
            catalog.report(self.options, name, from_json(end))
        except Exception as exc:  # monitoring must not stop the query
            _log.warning("iggy: reporting offsets as consumer %r failed: %s", name, exc)
