"""``iggy_routed``: a Spark streaming sink that sends each row to the Iggy destination it names.

``df.writeStream.format("iggy_routed")`` works without registration once the package is
installed; :func:`register` does it explicitly. :func:`destinations` shows a query's live
destinations table and :func:`route` fills destination columns from a JSON payload. Prometheus
metrics of every streaming query are served by :func:`pg_to_iggy.serve_metrics`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iggy_spark.sink.json_route import route
from iggy_spark.sink.monitoring import destinations

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "destinations", "route"]


def register(spark: SparkSession) -> None:
    """Register the ``iggy_routed`` format on ``spark`` (classic or Spark Connect)."""
    from iggy_spark.sink.datasource import IggyRoutedDataSource

    spark.dataSource.register(IggyRoutedDataSource)
