"""``snapshot=initial``: the captured tables' rows, read in parallel chunks before the stream.

Where a snapshot stands is part of the offset, so Spark's checkpoint records which rows were
delivered. While a snapshot runs, an offset is::

    {"lsn": "0/1505AE0", "snapshot": {"after": ["41"], "chunks": 7, "table": ["public", "t"]}}

``lsn`` is the slot's consistent point, where the stream starts once the snapshot is done (the
slot stays there until then). ``snapshot`` is the :class:`Position` reached: every captured
table sorting before ``table``, and the rows of ``table`` whose chunk key is at most ``after``,
are delivered (``after`` null: all of ``table``; ``table`` null: nothing yet); ``chunks``
counts the chunks delivered, for progress. The offset of a finished snapshot is
``{"lsn": ..., "reselect_until": "pending"}``: the stream's first planning replaces ``pending``
with an LSN (the snapshot was not exact: :mod:`postgres_cdc_source.stream.reselect`) or drops it
(the whole offset: :class:`postgres_cdc_source.stream.offset.StreamOffset`).

The end offset of a snapshot batch also pins the chunks it was planned with, in order::

    "planned": [["public", "t", null, ["41"]], ["public", "t", ["41"], ["82"]], ...]

so a batch replayed after a restart gives every row to the Spark partition that had it the
first time (bounds found again after rows were deleted or inserted would split differently).
That lets the sink's effectively-once delivery, which reads back what each task landed, skip
exactly what landed (see :mod:`iggy_spark.sink.delivery`: a chunk read again without the exported
snapshot holds other rows, so the sink skips by message id).

A chunk is a range ``(lo, hi]`` of a table's primary key (of ``ctid`` for a table without one),
read by one Spark partition in a ``REPEATABLE READ`` transaction that imports the snapshot the
slot exported, so every chunk sees the tables exactly as of the consistent point. Bounds only
partition the key space, so they may be computed at any moment: the driver finds them with
index-ordered ``OFFSET`` probes at planning time, and a replayed batch may split its range
differently and still read the same rows.

When the exported snapshot is gone (the driver that held its connection died), chunks are read
at the state current when their transaction starts: see :func:`read_chunk`, and the docs
(pg_cdc, After a crash during the snapshot) for why the consumer's final state per key is still
right.
"""

from postgres_cdc_source.snapshot.offsets import PlannedChunk, Position
from postgres_cdc_source.snapshot.planning import (
    Chunk,
    SnapshotTable,
    captured_tables,
    describe,
    next_bound,
    plan,
    planned_chunks,
)
from postgres_cdc_source.snapshot.reading import READ, SnapshotPartition, read_chunk

__all__ = [
    "READ",
    "Chunk",
    "PlannedChunk",
    "Position",
    "SnapshotPartition",
    "SnapshotTable",
    "captured_tables",
    "describe",
    "next_bound",
    "plan",
    "planned_chunks",
    "read_chunk",
]
