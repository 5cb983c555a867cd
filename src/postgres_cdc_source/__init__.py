"""``pg_cdc``: Postgres logical-decoding changes as a Spark structured stream.

``spark.readStream.format("pg_cdc")`` works without registration once the package is installed;
:func:`register` does it explicitly (for sessions started before installation, or Spark Connect).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register the ``pg_cdc`` format on ``spark``."""
    from postgres_cdc_source.source import PgCdcDataSource

    spark.dataSource.register(PgCdcDataSource)
