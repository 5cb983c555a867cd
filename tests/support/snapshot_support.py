"""Test helpers for ``snapshot=initial``: Spark's call order in-process, and a consumer's replay.

:class:`InProcessQuery` drives a :class:`PgCdcStreamReader` the way Spark does (initialOffset
once, then per batch latestOffset -> partitions -> read every partition on a pickled copy,
several at once -> commit), with offsets round-tripped through JSON as Spark stores them. It
exercises the real planning and reading against the real Postgres in a second, without a JVM;
the end-to-end tests run the same source under real Spark.

:func:`~iggy_spark_testing.replay.replay` (re-exported here) is the consumer that rebuilds the
tables from the messages.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from iggy_spark_testing.replay import Message, ordered, replay
from postgres_cdc_source.source import PgCdcDataSource
from postgres_cdc_source.stream.offset import StreamOffset
from postgres_cdc_source.stream.reader import PgCdcStreamReader

__all__ = ["InProcessQuery", "Message", "in_snapshot", "ordered", "replay"]


def in_snapshot(offset: dict[str, Any]) -> bool:
    """Whether ``offset`` is one of a snapshot still running."""
    return StreamOffset.from_json(offset).snapshot is not None


class InProcessQuery:
    """A ``pg_cdc`` reader driven in Spark's call order; ``batches`` holds each batch's
    ``(start, end, partitions, rows)``."""

    def __init__(
        self, options: Mapping[str, str], offset: dict[str, Any] | None = None, *,
        available_now: bool = False,
    ) -> None:
        source = PgCdcDataSource(dict(options))  # as Spark builds it (row_format=struct too)
        reader = source.streamReader(source.schema())
        assert isinstance(reader, PgCdcStreamReader)
        self.reader = reader
        if available_now:  # Spark calls it first, before initialOffset
            self.reader.prepareForTriggerAvailableNow()
        if offset is None:
            offset = _spark_json(self.reader.initialOffset())
            # Spark asks again when it plans batch 0's partitions.
            assert _spark_json(self.reader.initialOffset()) == offset
        self.offset = offset
        self.batches: list[tuple[dict[str, Any], dict[str, Any], list[Any], list[Message]]] = []

    def plan(self) -> tuple[dict[str, Any], list[Any]] | None:
        """Plan the next batch: its end offset and partitions (``None`` if there is no data)."""
        end = _spark_json(self.reader.latestOffset(self.offset, self.reader.getDefaultReadLimit()))
        if StreamOffset.from_json(end) == StreamOffset.from_json(self.offset):
            return None
        return end, list(self.reader.partitions(self.offset, end))

    def read(self, partitions: Sequence[Any]) -> list[Message]:
        """Read partitions as executors do: on a pickled copy of the reader, up to 4 at once."""
        executor = pickle.loads(pickle.dumps(self.reader))

        def rows(partition: Any) -> list[Message]:
            return [r for b in executor.read(partition) for r in pa.Table.from_batches(
                [b]).to_pylist()]

        with ThreadPoolExecutor(4) as pool:
            return [row for part in pool.map(rows, partitions) for row in part]

    def step(self) -> list[Message] | None:
        """One whole batch: plan, read, commit. ``None`` when there was nothing to read."""
        planned = self.plan()
        if planned is None:
            return None
        end, partitions = planned
        rows = self.read(partitions)
        self.reader.commit(end)
        self.batches.append((self.offset, end, partitions, rows))
        self.offset = end
        return rows

    def run_snapshot(self) -> list[Message]:
        """Batches until the snapshot is finished; the rows they delivered."""
        rows: list[Message] = []
        while in_snapshot(self.offset):
            batch = self.step()
            assert batch is not None, "a running snapshot always has a next batch"
            rows += batch
        return rows

    def run_stream(self, upto: int) -> list[Message]:
        """Stream batches until the offset reaches LSN ``upto``."""
        rows: list[Message] = []
        while StreamOffset.from_json(self.offset).lsn < upto:
            batch = self.step()
            assert batch is not None, "the stream stopped short (an availableNow target?)"
            rows += batch
        return rows

    def close(self) -> None:
        self.reader.stop()


def _spark_json(offset: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(offset))
    return loaded
