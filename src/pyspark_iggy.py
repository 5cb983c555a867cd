"""Register-free entry point: Spark imports ``pyspark_*`` modules, registers ``DefaultSource``."""

from iggy_spark.source.datasource import IggyDataSource as DefaultSource

__all__ = ["DefaultSource"]
