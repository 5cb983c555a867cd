"""Register-free entry point: Spark imports ``pyspark_*`` modules and registers ``DefaultSource``."""

from iggy_spark.sink import IggyRoutedDataSource as DefaultSource

__all__ = ["DefaultSource"]
