"""``format("iggy")``: read Iggy topics into Spark, batch and streaming.

A source of its own next to the ``iggy_routed`` sink: it shares the sink's ``url`` grammar and
connection pool, and needs only the ``[iggy]`` extra. The offsets Spark checkpoints are the only
truth about what was read (``{topic: {partition: next offset}}``): a replayed micro-batch polls
the same offset ranges and so reads the same messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from iggy_spark.source.offsets import behind, from_json, to_json
from iggy_spark.source.source import IggyDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["IggyDataSource", "lag", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``iggy`` format on ``spark`` explicitly (it is also found unregistered)."""
    spark.dataSource.register(IggyDataSource)


def lag(source_progress: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Per topic and partition, how many messages the query has not read yet, from one source's
    entry of a query's progress (``query.lastProgress["sources"][i]``): Spark records the
    source's latest offsets there next to the batch's end offsets.
    """

    def offsets(key: str) -> dict[Any, int]:
        value = source_progress.get(key) or {}
        return from_json(json.loads(value) if isinstance(value, str) else value)

    return to_json(behind(offsets("endOffset"), offsets("latestOffset")))
