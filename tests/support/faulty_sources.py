"""Test-only data sources that raise once, at a chosen point of a micro-batch.

``pg_cdc_faulty`` and ``iggy_routed_faulty`` behave exactly like ``pg_cdc`` and ``iggy_routed``
(they wrap the real classes) until a fault is *armed*: the test creates the file named by the
``fault_marker`` option, and the first call to reach the point named by ``fault_at`` deletes it
(an atomic claim, so the fault fires exactly once across all of Spark's processes), writes the
time into ``<marker>.fired`` and raises :class:`InjectedFault`. The library has no fault hooks;
these subclasses are the only place faults come from.

Fault points, in the order Spark reaches them for a batch N:

* ``write``: a write task sends half of its first Arrow batch to Iggy, then fails;
* ``writer_commit``: the sink's commit ran (ledger saved), then fails: ``commits/N`` is never
  written, so batch N is replayed whole;
* ``latest_offset``: planning batch N+1 fails after ``commits/N`` was written and before the
  slot was advanced to N's end (between the sink's commit and the slot advance);
* ``reader_commit``: ``reader.commit(end of N)`` fails before advancing the slot.

With ``mode=polling`` the source's points are ``latest_offset`` (planning batch N+1 fails after
``commits/N`` was written, before the destructive step of batch N) and ``reader_commit``.

Spark's Python workers import this module by name (``support.faulty_sources``), so ``tests/``
must be on their PYTHONPATH (conftest.py sets it before the SparkSession starts).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

from connector_common.spark_versions import ReadLimit
from iggy_spark.sink.datasource import IggyRoutedDataSource
from iggy_spark.sink.report import TaskReport
from iggy_spark.sink.writer import IggyRoutedStreamWriter
from pg_to_iggy.pipeline import JSON_COLUMNS
from postgres_cdc_source.polling.reader import PgPollingStreamReader
from postgres_cdc_source.source import PgCdcDataSource
from postgres_cdc_source.stream.reader import PgCdcStreamReader

POINTS = ("write", "writer_commit", "latest_offset", "reader_commit")
_OPTIONS = ("fault_at", "fault_marker")


class InjectedFault(RuntimeError):
    """Raised on purpose by a faulty source; its message names the point."""


@dataclass(frozen=True)
class Fault:
    """Where to fail, and the marker file that arms it."""

    at: str | None
    marker: str | None

    @classmethod
    def split(cls, options: Mapping[str, str]) -> tuple[Fault, dict[str, str]]:
        """The fault options, and the rest for the real data source."""
        at = options.get("fault_at")
        if at is not None and at not in POINTS:
            raise ValueError(f"fault_at must be one of {POINTS}, got {at!r}")
        rest = {k: v for k, v in options.items() if k.lower() not in _OPTIONS}
        return cls(at, options.get("fault_marker")), rest

    def fire(self, point: str) -> None:
        """Raise once if armed for ``point``: whoever deletes the marker first raises."""
        if self.at != point or self.marker is None:
            return
        try:
            os.unlink(self.marker)
        except FileNotFoundError:
            return
        Path(f"{self.marker}.fired").write_text(repr(time.time()))
        raise InjectedFault(f"injected fault at {point}")


def fired_at(marker: Path) -> float:
    """When the fault armed with ``marker`` fired (``time.time()``)."""
    return float(Path(f"{marker}.fired").read_text())


class FaultyCdcReader(PgCdcStreamReader):
    def __init__(self, reader: PgCdcStreamReader, fault: Fault) -> None:
        super().__init__(reader.options)
        self.fault = fault

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        begin = self._starts.start(start, self.initialOffset)  # Spark 4.0/4.1 give no start
        end = super().latestOffset(begin, limit)
        if end != begin:  # only when planning a batch: a committed one came before it
            self.fault.fire("latest_offset")
        return end

    def commit(self, end: dict[str, Any]) -> None:
        self.fault.fire("reader_commit")
        super().commit(end)


class FaultyPollingReader(PgPollingStreamReader):
    def __init__(self, reader: PgPollingStreamReader, fault: Fault) -> None:
        super().__init__(reader.options)
        self.fault = fault

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        begin = self._starts.start(start, self.initialOffset)  # Spark 4.0/4.1 give no start
        if begin.get("tracking") is not None:  # a committed batch's step is due
            self.fault.fire("latest_offset")
        return super().latestOffset(begin, limit)

    def commit(self, end: dict[str, Any]) -> None:
        self.fault.fire("reader_commit")
        super().commit(end)


class FaultyCdcSource(DataSource):
    """``pg_cdc`` plus the ``fault_at``/``fault_marker`` options."""

    @classmethod
    def name(cls) -> str:
        return "pg_cdc_faulty"

    def _real(self) -> tuple[Fault, PgCdcDataSource]:
        fault, rest = Fault.split(self.options)
        return fault, PgCdcDataSource(rest)

    def schema(self) -> StructType:
        return self._real()[1].schema()

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        fault, real = self._real()
        reader = real.streamReader(schema)
        if isinstance(reader, PgPollingStreamReader):
            return FaultyPollingReader(reader, fault)
        assert isinstance(reader, PgCdcStreamReader)
        return FaultyCdcReader(reader, fault)


class FaultyWriter(IggyRoutedStreamWriter):
    def __init__(self, writer: IggyRoutedStreamWriter, fault: Fault) -> None:
        super().__init__(writer.options, writer.clock, writer.identify)
        self.fault = fault

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        first = next(iterator, None)
        if first is None:
            return super().write(iter(()))
        if first.num_rows:
            try:
                self.fault.fire("write")
            except InjectedFault:
                # Half of the first Arrow batch reaches Iggy, then the task fails.
                super().write(iter([first.slice(0, (first.num_rows + 1) // 2)]))
                raise
        return super().write(_chain(first, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        super().commit(messages, batchId)
        self.fault.fire("writer_commit")


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


class FaultyRoutedSink(DataSource):
    """``iggy_routed`` plus the ``fault_at``/``fault_marker`` options."""

    @classmethod
    def name(cls) -> str:
        return "iggy_routed_faulty"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        fault, rest = Fault.split(self.options)
        writer = IggyRoutedDataSource(rest).streamWriter(schema, overwrite)
        assert isinstance(writer, IggyRoutedStreamWriter)
        return FaultyWriter(writer, fault)


def register(spark: SparkSession) -> None:
    spark.dataSource.register(FaultyCdcSource)
    spark.dataSource.register(FaultyRoutedSink)


def start_faulty_pipeline(
    spark: SparkSession,
    *,
    source: Mapping[str, str],
    sink: Mapping[str, str],
    checkpoint: str,
) -> StreamingQuery:
    """``pg_cdc_faulty`` -> ``iggy_routed_faulty`` with the pipeline's JSON columns."""
    frame: DataFrame = spark.readStream.format("pg_cdc_faulty").options(**source).load()
    writer = frame.writeStream.format("iggy_routed_faulty").options(**sink)
    return writer.option("json_columns", JSON_COLUMNS).option(
        "checkpointLocation", checkpoint
    ).start()
