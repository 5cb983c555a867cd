"""``format("iggy")``: read Iggy topics into Spark, batch and streaming.

A source of its own next to the ``iggy_routed`` sink: it shares the package root's ``url``
grammar, connection pool and failure rules, imports nothing of the sink, and needs only the
``[iggy]`` extra. The offsets Spark checkpoints are the only truth about what was read
(``{topic: {partition: next offset}}``): a replayed micro-batch polls the same offset ranges and
so reads the same messages.

The names in ``__all__`` are the source's public API (its option errors are
:class:`iggy_spark.ConfigError`); every module under ``iggy_spark.source`` is internal and may
move between versions. They are in layers, lowest first: the pure rules (``offsets``,
``options``, ``schema``, ``payloads``, ``progress``, ``wire``), what talks to Iggy (``catalog``,
``polling``), the ``reader``, the ``datasource`` (held by ``tests/test_layering.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from iggy_spark.source.datasource import IggyDataSource
from iggy_spark.source.errors import DataLoss, SourceError
from iggy_spark.source.progress import lag_from_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DataLoss", "SourceError", "delete_reported_offsets", "lag", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``iggy`` format on ``spark`` explicitly (it is also found unregistered)."""
    spark.dataSource.register(IggyDataSource)


def lag(source_progress: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Per topic and partition, how many messages the query has not read yet once the batch
    commits, from one source's entry of a query's progress
    (``query.lastProgress["sources"][i]``): the source reports it there as its
    ``latestOffset``. Raises :class:`ValueError` for another kind of source's entry.
    """
    found = lag_from_progress(source_progress.get("latestOffset"))
    if found is None:
        raise ValueError("not the progress of an iggy source (its latestOffset has no lag)")
    return found


def delete_reported_offsets(options: Mapping[str, str]) -> list[tuple[str, int]]:
    """Remove from the server the offsets a query stored with ``report_consumer``, once the
    query is gone: ``options`` are the reader's (``url``, ``stream``, ``topics`` or
    ``topic_pattern``, ``report_consumer``). Returns the ``(topic, partition)`` pairs that had
    one; calling it again returns none. Raises
    :class:`~iggy_spark.ConfigError` without ``report_consumer``.
    """
    from iggy_spark.errors import ConfigError
    from iggy_spark.source import catalog
    from iggy_spark.source.options import SourceOptions

    parsed = SourceOptions.from_options(dict(options))
    if parsed.report_consumer is None:
        raise ConfigError("report_consumer", "name the consumer whose offsets to delete")
    return [(p.topic, p.partition) for p in catalog.forget(parsed, parsed.report_consumer)]
