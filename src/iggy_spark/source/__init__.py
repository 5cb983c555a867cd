"""``format("iggy")``: read Iggy topics into Spark, batch and streaming.

A source of its own next to the ``iggy_routed`` sink: it shares the sink's ``url`` grammar and
connection pool, and needs only the ``[iggy]`` extra. The offsets Spark checkpoints are the only
truth about what was read (``{topic: {partition: next offset}}``): a replayed micro-batch polls
the same offset ranges and so reads the same messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iggy_spark.source.source import IggyDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["IggyDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``iggy`` format on ``spark`` explicitly (it is also found unregistered)."""
    spark.dataSource.register(IggyDataSource)
