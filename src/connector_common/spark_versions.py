"""What Python data sources get from the installed pyspark, 4.0 to 4.3, in one place.

The readers and the writer are written once, against 4.2's contract; this module fills in what
an older pyspark lacks, so that each connector keeps its promises by its own means there:

* **Read limits** (``pyspark.sql.streaming.datasource``, new in 4.2). From 4.2 Spark passes
  ``latestOffset`` the batch's start and a :class:`ReadLimit` (admission control), calls
  ``prepareForTriggerAvailableNow`` and ``reportLatestOffset``. 4.0 and 4.1 call
  ``latestOffset()`` with no arguments and none of the others, so a reader caps each batch
  by its own ``max_*_per_trigger`` options (its ``getDefaultReadLimit``) and learns where the
  batch starts from :class:`BatchStarts`. Stand-ins with the same names and fields are defined
  here for those versions, so one ``isinstance`` test reads a limit on every version.
* **The Arrow stream writer** (``DataSourceStreamArrowWriter``, new in 4.1). On 4.0 a stream
  writer gets :class:`~pyspark.sql.Row` objects; :func:`arrow_batches` turns them back into
  record batches, so the writer handles one kind of input.
* ``to_arrow_schema``'s time zone keyword: ``timezone`` from 4.2, ``timestamp_utc`` before
  (:func:`arrow_schema`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyspark
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import Row
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as ArrowStreamWriter
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
else:
    try:
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadLimit,
            ReadMaxBytes,
            ReadMaxRows,
            SupportsTriggerAvailableNow,
        )
    except ImportError:  # pyspark 4.0, 4.1: Spark never passes nor asks for a limit

        class ReadLimit:
            """How much one batch may read (4.2's class of the same name)."""

        @dataclass
        class ReadAllAvailable(ReadLimit):
            """No limit."""

        @dataclass
        class ReadMaxRows(ReadLimit):
            """At most ``max_rows`` rows."""

            max_rows: int

        @dataclass
        class ReadMaxBytes(ReadLimit):
            """At most ``max_bytes`` bytes."""

            max_bytes: int

        class SupportsTriggerAvailableNow:
            """Never detected before 4.2: Spark runs ``Trigger.AvailableNow`` as one batch."""

    try:
        from pyspark.sql.datasource import DataSourceStreamArrowWriter as ArrowStreamWriter
    except ImportError:  # pyspark 4.0: the writer gets Rows, see arrow_batches
        from pyspark.sql.datasource import DataSourceStreamWriter as ArrowStreamWriter

__all__ = [
    "PYSPARK_VERSION",
    "READ_LIMITS",
    "ArrowStreamWriter",
    "BatchStarts",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "arrow_batches",
    "arrow_schema",
]

_MAJOR, _MINOR = pyspark.__version__.split(".")[:2]
PYSPARK_VERSION = (int(_MAJOR), int(_MINOR))
"""The installed pyspark's (major, minor)."""

READ_LIMITS = PYSPARK_VERSION >= (4, 2)
"""Whether Spark passes ``latestOffset`` the batch's start and a read limit, asks for
``reportLatestOffset`` and runs ``Trigger.AvailableNow`` to the end (4.2+)."""

ROWS_PER_BATCH = 10_000
"""Rows per record batch when :func:`arrow_batches` converts a 4.0 writer's Rows."""


class BatchStarts:
    """Where the next micro-batch starts, where Spark does not say (4.0 and 4.1).

    Those versions call ``latestOffset()`` with no start. What they do call is enough: every
    batch is planned as ``latestOffset()`` then ``partitions(start, end)``, and a restarted query
    first calls ``partitions(end, end)`` with the end of the newest batch in the checkpoint's
    offsets log (then replays that batch if it was not committed) before any ``latestOffset``;
    a new query asks ``latestOffset()`` before ``initialOffset()``. So the end given to the last
    ``partitions`` is the next batch's start, and before any, the initial offset. Spark asks
    for ``latestOffset`` only once the batch before is in ``commits/``, as on 4.2 (measured on
    4.0.5 and 4.1.4: fresh, clean restart, restart after a kill mid-write, once, availableNow).
    """

    def __init__(self) -> None:
        self._next: dict[str, Any] | None = None

    def planned(self, end: dict[str, Any]) -> None:
        """Spark asked for the partitions of a batch ending at ``end``."""
        self._next = end

    def start(
        self, given: dict[str, Any] | None, initial: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """``given`` (4.2+), else the end of the last batch planned, else ``initial()``."""
        if given is not None:
            return given
        return self._next if self._next is not None else initial()


def arrow_schema(schema: StructType) -> pa.Schema:
    """Spark's Arrow schema for ``schema``, timestamps in UTC (the keyword changed in 4.2)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema, timestamp_utc=True)  # type: ignore[call-arg]


def arrow_batches(
    items: Iterable[pa.RecordBatch | Row], schema: StructType | None
) -> Iterator[pa.RecordBatch]:
    """A writer's input as record batches: as they come on 4.1+, converted from the Rows of
    4.0 (``schema`` is the input's) in batches of :data:`ROWS_PER_BATCH`.

    Rows go through Spark's own ``toInternal`` (timestamps to UTC microseconds, dates to
    days, structs to tuples), which pyarrow reads into the types of :func:`arrow_schema`
    exactly as Spark's Arrow path writes them.
    """
    rows: list[tuple[Any, ...]] = []
    target: pa.Schema | None = None
    for item in items:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        if schema is None:
            raise TypeError("a stream writer given Rows needs the input's schema")
        if target is None:
            target = arrow_schema(schema)
        rows.append(schema.toInternal(item))
        if len(rows) >= ROWS_PER_BATCH:
            yield _record_batch(rows, target)
            rows = []
    if rows:
        assert target is not None
        yield _record_batch(rows, target)


def _record_batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    columns = [pa.array([row[i] for row in rows], type=field.type)
               for i, field in enumerate(schema)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
