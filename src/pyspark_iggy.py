"""Register-free entry point: Spark imports ``pyspark_*`` modules, registers ``DefaultSource``."""

from iggy_spark.source.source import IggyDataSource as DefaultSource

__all__ = ["DefaultSource"]
