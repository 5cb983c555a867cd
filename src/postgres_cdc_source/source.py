"""The ``pg_cdc`` data source: option validation at ``load()``, the fixed schema, the reader."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from connector_common.change_rows import SPARK_SCHEMA
from connector_common.dependencies import require
from postgres_cdc_source.errors import ConfigError

__all__ = ["PgCdcDataSource"]


class PgCdcDataSource(DataSource):
    """``spark.readStream.format("pg_cdc")``: Postgres logical-decoding changes as a stream.

    Options are validated when Spark asks for the schema, which happens at ``load()`` on the
    driver, so a bad option fails before the query starts; with ``mode=polling`` that includes
    the table and columns the options name (one catalog lookup).
    """

    @classmethod
    def name(cls) -> str:
        return "pg_cdc"

    def schema(self) -> StructType:
        # Spark imports this module to discover formats: psycopg is needed only from here on.
        require("pg_cdc", "cdc", "psycopg")
        from postgres_cdc_source.options import CdcOptions
        from postgres_cdc_source.polling.reader import check_table

        options = CdcOptions.from_options(self.options)
        if options.polling is not None:
            check_table(options)
        return SPARK_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        expected = SPARK_SCHEMA
        if schema.simpleString() != expected.simpleString():
            raise ConfigError(
                "schema",
                "pg_cdc has a fixed schema; do not pass .schema(...) "
                f"(expected {expected.simpleString()})",
            )
        require("pg_cdc", "cdc", "psycopg")
        from postgres_cdc_source.options import CdcOptions
        from postgres_cdc_source.polling.reader import PgPollingStreamReader
        from postgres_cdc_source.stream.reader import PgCdcStreamReader

        options = CdcOptions.from_options(self.options)
        if options.polling is not None:
            return PgPollingStreamReader(options)
        return PgCdcStreamReader(options)
