"""The live destinations table of an ``iggy_routed`` query, as a DataFrame for notebooks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from iggy_spark.connection import IggyConnection
from iggy_spark.iggy_url import IggyUrl
from iggy_spark.sink.control_topic import ControlTopic, checkpoint_query_id
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.sink.report import Ledger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["DESTINATIONS_SCHEMA", "destinations", "read_ledger"]

DESTINATIONS_SCHEMA = (
    "stream string, topic string, messages long, created boolean, admitted boolean, "
    "breaker string, consecutive_failures int, last_error string, first_batch long, "
    "last_batch long"
)
_READ_TIMEOUT = 30.0


def _query_id(
    query_or_location: StreamingQuery | str | Path | None, query_id: str | None
) -> str:
    if query_id:
        return query_id
    if query_or_location is None:
        raise ValueError("name the query: a StreamingQuery, its checkpoint location, or "
                         "query_id=")
    if not isinstance(query_or_location, str | Path):
        return str(query_or_location.id)
    found = checkpoint_query_id(str(query_or_location))
    if found is None:
        raise ValueError(f"no query id in the checkpoint at {str(query_or_location)!r} (not a "
                         "local folder, or the query never started): pass query_id=, the "
                         "StreamingQuery's id")
    return found


def read_ledger(
    url: str | IggyUrl,
    query_or_location: StreamingQuery | str | Path | None = None,
    *,
    query_id: str | None = None,
    state_stream: str = RoutedOptions.state_stream,
) -> Ledger:
    """The query's newest ledger, read from its control topic in Iggy.

    ``url`` is the sink's ``url`` option (its user needs to poll the state stream).
    ``query_or_location`` is a ``StreamingQuery`` or its checkpoint location: a local folder's
    ``metadata`` names the query; for a remote checkpoint (``s3a://``...) pass ``query_id``.
    An empty ledger when the query has not committed a batch yet.
    """
    iggy = url if isinstance(url, IggyUrl) else IggyUrl.parse(url)
    view = ControlTopic.of_query(IggyConnection.shared(iggy), state_stream,
                                 _query_id(query_or_location, query_id),
                                 timeout=_READ_TIMEOUT).read()
    return Ledger(None if view is None else view.ledger)


def destinations(
    query_or_location: StreamingQuery | str | Path,
    spark: SparkSession | None = None,
    *,
    url: str | IggyUrl,
    query_id: str | None = None,
    state_stream: str = RoutedOptions.state_stream,
) -> DataFrame:
    """One row per destination the query has sent to or admitted, with counts and breaker state.

    Arguments as for :func:`read_ledger`. The ledger is appended after every committed
    micro-batch, so calling this again shows the latest state.
    """
    from pyspark.sql import SparkSession

    session = spark or SparkSession.builder.getOrCreate()
    rows: list[dict[str, Any]] = read_ledger(url, query_or_location, query_id=query_id,
                                             state_stream=state_stream).rows()
    fields = [f.split()[0] for f in DESTINATIONS_SCHEMA.split(", ")]
    return session.createDataFrame([tuple(r.get(f) for f in fields) for r in rows],
                                   DESTINATIONS_SCHEMA)
