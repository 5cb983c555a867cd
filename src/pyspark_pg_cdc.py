"""Register-free entry point: Spark imports ``pyspark_*`` modules, registers ``DefaultSource``."""

from postgres_cdc_source.source import PgCdcDataSource as DefaultSource

__all__ = ["DefaultSource"]
