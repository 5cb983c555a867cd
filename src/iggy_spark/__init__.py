"""Apache Iggy for Spark: the ``iggy_routed`` sink (:mod:`iggy_spark.sink`) and the ``iggy``
source (:mod:`iggy_spark.source`).

``df.writeStream.format("iggy_routed")`` works without registration once the package is
installed; :func:`register` does it explicitly. :func:`destinations` shows a query's live
destinations table, :func:`read_ledger` the ledger it is drawn from, and :func:`route` fills
destination columns from a JSON payload. Prometheus metrics of every streaming query are served
by :func:`pg_to_iggy.serve_metrics`.

The names in ``__all__`` (and those of :mod:`iggy_spark.source` and
:mod:`iggy_spark.monitoring`, what monitoring tools read of running queries) are the public API:
the functions above and the exceptions to catch, :class:`IggySparkError` over all of them. Every
other module is internal and may move between versions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from connector_common.dependencies import MissingDependencyError
from connector_common.errors import ConnectorError
from iggy_spark.errors import (
    AdmissionError,
    ConfigError,
    DestinationError,
    EncodingError,
    IggySparkError,
    IncompatibleServer,
    PayloadTooLarge,
    SendError,
    ServerError,
    StateError,
    UnknownDestination,
    UnsupportedSdk,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from iggy_spark.sink.json_route import route
    from iggy_spark.sink.monitoring import destinations, read_ledger

__all__ = [
    "AdmissionError",
    "ConfigError",
    "ConnectorError",
    "DestinationError",
    "EncodingError",
    "IggySparkError",
    "IncompatibleServer",
    "MissingDependencyError",
    "PayloadTooLarge",
    "SendError",
    "ServerError",
    "StateError",
    "UnknownDestination",
    "UnsupportedSdk",
    "destinations",
    "read_ledger",
    "register",
    "route",
]

# The sink's helpers, imported on first use: the ``iggy`` source imports this package too, and
# loads none of the sink.
_SINK_HELPERS = {
    "route": "iggy_spark.sink.json_route",
    "destinations": "iggy_spark.sink.monitoring",
    "read_ledger": "iggy_spark.sink.monitoring",
}


def __getattr__(name: str) -> Any:
    if name not in _SINK_HELPERS:
        raise AttributeError(f"module 'iggy_spark' has no attribute {name!r}")
    return getattr(importlib.import_module(_SINK_HELPERS[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SINK_HELPERS))


def register(spark: SparkSession) -> None:
    """Register the ``iggy_routed`` format on ``spark`` (classic or Spark Connect)."""
    from iggy_spark.sink.datasource import IggyRoutedDataSource

    spark.dataSource.register(IggyRoutedDataSource)
