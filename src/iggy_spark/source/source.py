"""The ``iggy`` data source: options checked when the query plans, one reader per read."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from connector_common.dependencies import require

__all__ = ["IggyDataSource"]


class IggyDataSource(DataSource):
    """``spark.read.format("iggy")`` and ``spark.readStream.format("iggy")``: the messages of
    Iggy topics as rows (see :mod:`iggy_spark.source.schema` for the columns)."""

    @classmethod
    def name(cls) -> str:
        return "iggy"

    def schema(self) -> StructType:
        from iggy_spark.source.schema import SCHEMA

        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        # Imported here, not at module level: Spark imports this module to discover formats,
        # and must not fail there where the client library is not installed.
        require("iggy", "iggy", "apache_iggy")
        from iggy_spark.source.options import SourceOptions
        from iggy_spark.source.reader import IggyBatchReader

        return IggyBatchReader(SourceOptions.from_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require("iggy", "iggy", "apache_iggy")
        from iggy_spark.errors import ConfigError
        from iggy_spark.source.options import SourceOptions
        from iggy_spark.source.reader import IggyStreamReader

        options = SourceOptions.from_options(self.options)
        if any(key.strip().lower() == "ending_offsets" for key in self.options):
            raise ConfigError("ending_offsets", "only applies to batch reads (spark.read)")
        return IggyStreamReader(options)
