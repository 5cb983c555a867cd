"""A streaming Python data source that reads from memory: the ceiling of any Python source.

``bench_iggy_source`` compares the ``iggy`` source with a hand-written SDK loop. Both pay for
Iggy; only the source pays for what pyspark's Python data source path costs (tasks in Python
workers, Arrow batches handed to the JVM, one micro-batch). This source pays only the latter:
it yields, in the ``iggy`` source's schema, batch size and number of tasks, rows that already
sit in memory (ids of the width Iggy gives: 128-bit numbers as decimal text), so no source
built on that path can read faster than it does.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
    ReadLimit,
)
from pyspark.sql.types import StructType

from iggy_spark.source.schema import ARROW_SCHEMA, SCHEMA

__all__ = ["NAME", "MemorySource", "batch_file"]

NAME = "bench_memory"
BATCH = 10_000  # the iggy source's poll of small messages (its poll_messages), one Arrow batch


class _Range(InputPartition):
    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high


def _batch(rows: int, payload: bytes) -> pa.RecordBatch:
    columns: dict[str, Any] = {
        "stream": ["bench"] * rows, "topic": ["events"] * rows, "partition": [0] * rows,
        "offset": list(range(rows)), "id": [str(random.getrandbits(128)) for _ in range(rows)],
        "timestamp": [datetime.now(UTC)] * rows, "headers": [None] * rows,
        "payload": [payload] * rows,
    }
    return pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)


def batch_file(batch: pa.RecordBatch, prefix: str) -> str:
    """A new temporary file holding ``batch`` (an Arrow IPC stream), for ``batch_file``."""
    path = tempfile.mkstemp(prefix=prefix, suffix=".arrows")[1]
    with pa.OSFile(path, "wb") as file, pa.ipc.new_stream(file, batch.schema) as stream:
        stream.write_batch(batch)
    return path


def _read(path: str) -> pa.RecordBatch:
    with pa.OSFile(path) as file:
        return pa.ipc.open_stream(file).read_next_batch()


class _Reader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.messages = int(options["messages"])
        self.splits = int(options.get("tasks", "1"))
        self.payload = b"x" * int(options.get("payload_bytes", "200"))
        self.batch_file = options.get("batch_file")

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        return {"n": self.messages}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        low, high = start["n"], end["n"]
        share = -(-(high - low) // self.splits)
        return [_Range(i, min(i + share, high)) for i in range(low, high, share)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        # built once: the ceiling leaves out building rows
        full = _batch(BATCH, self.payload) if self.batch_file is None else _read(self.batch_file)
        size = full.num_rows
        for low in range(partition.low, partition.high, size):
            rows = min(size, partition.high - low)
            yield full if rows == size else full.slice(0, rows)

    def commit(self, end: dict[str, int]) -> None:
        pass


class MemorySource(DataSource):
    """``spark.readStream.format("bench_memory").option("messages", N)``, in the ``iggy``
    source's schema, or with ``.option("batch_file", path).option("schema", json)`` in that
    batch's."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        given = self.options.get("schema")
        return SCHEMA if given is None else StructType.fromJson(json.loads(given))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _Reader(self.options)
