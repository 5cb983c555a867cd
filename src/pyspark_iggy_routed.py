"""Register-free entry point: Spark imports ``pyspark_*`` modules, registers ``DefaultSource``."""

from iggy_spark.sink import IggyRoutedDataSource as DefaultSource

__all__ = ["DefaultSource"]
