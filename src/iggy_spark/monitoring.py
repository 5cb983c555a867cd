"""The live destinations table of an ``iggy_routed`` query, as a DataFrame for notebooks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from iggy_spark.report import Ledger, ledger_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["destinations", "DESTINATIONS_SCHEMA"]

DESTINATIONS_SCHEMA = (
    "stream string, topic string, messages long, created boolean, admitted boolean, "
    "breaker string, consecutive_failures int, last_error string, first_batch long, "
    "last_batch long"
)


def _checkpoint_of(query: StreamingQuery) -> str:
    """The query's resolved checkpoint root (classic Spark only: it asks the JVM)."""
    return str(query._jsq.streamingQuery().resolvedCheckpointRoot())


def destinations(
    query_or_path: StreamingQuery | str | Path, spark: SparkSession | None = None
) -> DataFrame:
    """One row per destination the query has sent to or admitted, with counts and breaker state.

    ``query_or_path`` is a running or stopped ``StreamingQuery`` or its checkpoint location.
    The table is rewritten after every committed micro-batch, so calling this again shows the
    latest state.
    """
    from pyspark.sql import SparkSession

    location = str(query_or_path) if isinstance(query_or_path, str | Path) else _checkpoint_of(
        query_or_path
    )
    path = ledger_path(location)
    if path is None:
        raise ValueError(f"checkpoint location {location!r} is not on a local filesystem; "
                         "the destinations table is kept only for local checkpoints")
    session = spark or SparkSession.builder.getOrCreate()
    rows: list[dict[str, Any]] = Ledger(path).rows()
    fields = [f.split()[0] for f in DESTINATIONS_SCHEMA.split(", ")]
    return session.createDataFrame([tuple(r.get(f) for f in fields) for r in rows],
                                   DESTINATIONS_SCHEMA)
