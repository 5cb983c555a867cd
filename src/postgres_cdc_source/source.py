"""The ``pg_cdc`` data source: option validation at ``load()``, the schema, the reader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from connector_common.dependencies import require
from postgres_cdc_source.errors import ConfigError

if TYPE_CHECKING:
    from postgres_cdc_source.options import CdcOptions
    from postgres_cdc_source.rows import RowFormat

__all__ = ["PgCdcDataSource"]


def _rows(options: CdcOptions) -> RowFormat:
    """The query's row format (:func:`postgres_cdc_source.rows.registry.rows_for`)."""
    from postgres_cdc_source.rows.registry import rows_for

    return rows_for(options)


class PgCdcDataSource(DataSource):
    """``spark.readStream.format("pg_cdc")``: Postgres logical-decoding changes as a stream.

    Options are validated when Spark asks for the schema, which happens at ``load()`` on the
    driver, so a bad option fails before the query starts; with ``mode=polling`` that includes
    the table and columns the options name (one catalog lookup). With ``row_format=struct``
    the schema's ``before``/``after``/``key`` are the captured tables' structs, read from the
    catalog there and again when the reader is made (they must agree); with
    ``schema_location``, evolved from the structs kept there, since Spark fixes the schema
    here, before the query reads its checkpoint (:mod:`postgres_cdc_source.rows.struct.history`);
    with ``variant`` they are VARIANT columns.
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
        return _rows(options).schemas()[0]

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require("pg_cdc", "cdc", "psycopg")
        from postgres_cdc_source.options import CdcOptions
        from postgres_cdc_source.polling.reader import PgPollingStreamReader
        from postgres_cdc_source.stream.reader import PgCdcStreamReader

        options = CdcOptions.from_options(self.options)
        rows = _rows(options)
        expected = rows.schemas()[0]
        if schema.simpleString() != expected.simpleString():
            raise ConfigError(
                "schema",
                "pg_cdc's schema follows its options (and with row_format=struct the tables' "
                "columns, which changed since load()); do not pass .schema(...) "
                f"(expected {expected.simpleString()})",
            )
        if options.polling is not None:
            return PgPollingStreamReader(options)
        return PgCdcStreamReader(options, rows)
