"""Register-free entry point: Spark imports ``pyspark_*`` modules, registers ``DefaultSource``."""

from iggy_spark.sink.datasource import IggyRoutedDataSource as DefaultSource

__all__ = ["DefaultSource"]
