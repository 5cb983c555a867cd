"""Per-key order when one batch is decoded by several tasks.

With ``min_partitions`` > 1, the changes of one key that fall into different WAL sub-ranges of a
batch are read by different tasks at the same time; written as they are read, a later change
could reach Iggy before an earlier one. :func:`in_key_order` restores the order before the sink:
it sends every change of one destination (stream, topic, partition key) to one task and sorts
each task's rows by commit order, so each key's changes are sent in the order they committed.

Spark refuses ``sortWithinPartitions`` on a stream, so the sort runs in ``mapInArrow``: each
task holds its share of the batch (about the batch divided by ``spark.sql.shuffle.partitions``)
while sorting it. The shuffle uses ``spark.sql.shuffle.partitions``, which Spark records in the
checkpoint when the query first starts, and the sort key (``position``, then ``id``) is total:
so a replayed batch gives every sink task exactly the rows, in exactly the order, it gave the
first time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["DESTINATION", "in_key_order"]

DESTINATION = ("stream", "topic", "partition_key")
"""The columns pg_cdc fills and iggy_routed routes by: one key's messages share all three."""

# position's two fields as columns of their own (Arrow sorts by top-level columns); dropped
# after the sort.
_LSN, _SEQ = "_pg_to_iggy_commit_lsn", "_pg_to_iggy_seq"
_ORDER = [(_LSN, "ascending"), (_SEQ, "ascending"), ("id", "ascending")]


def in_key_order(changes: DataFrame) -> DataFrame:
    """``changes`` (a ``pg_cdc`` stream) with each destination's rows in one partition, in
    commit order: put it between ``pg_cdc`` with ``min_partitions`` > 1 and ``iggy_routed``.

    ``id`` breaks ties: the rows of one snapshot or backfill chunk share their ``position``.
    """
    from pyspark.sql import functions as F

    keyed = changes.repartition(*(F.col(c) for c in DESTINATION)).withColumns({
        _LSN: F.col("position.commit_lsn"), _SEQ: F.col("position.seq")})
    return keyed.mapInArrow(sort_in_commit_order, changes.schema)


def sort_in_commit_order(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task's rows, sorted by ``position`` and ``id``, without the helper columns."""
    import pyarrow as pa

    held = list(batches)
    if not held:
        return
    table = pa.Table.from_batches(held).sort_by(_ORDER).drop_columns([_LSN, _SEQ])
    yield from table.to_batches(max_chunksize=10_000)
