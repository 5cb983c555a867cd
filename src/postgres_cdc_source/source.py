"""The ``pg_cdc`` data source: option validation at ``load()``, the schema, the reader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from connector_common.change_rows import SPARK_SCHEMA
from connector_common.dependencies import require
from postgres_cdc_source.errors import ConfigError

if TYPE_CHECKING:
    from postgres_cdc_source.options import CdcOptions
    from postgres_cdc_source.struct_types import StructRows
    from postgres_cdc_source.variant_types import VariantRows

__all__ = ["PgCdcDataSource"]


def _typed(options: CdcOptions) -> StructRows | VariantRows | None:
    """``row_format=struct``'s structs, from the catalog now, evolved from those kept in
    ``schema_location`` when set (the union over time); ``variant``'s rows; ``None`` for
    ``json``."""
    if options.row_format == "variant":
        from postgres_cdc_source.variant_types import VARIANT_ROWS

        return VARIANT_ROWS
    if options.row_format != "struct":
        return None
    from postgres_cdc_source.connections import connect_with_retry
    from postgres_cdc_source.struct_history import evolve_kept
    from postgres_cdc_source.struct_types import struct_rows

    with connect_with_retry(options, autocommit=True) as conn:
        typed = struct_rows(conn, options.keeps, options.schema_evolution,
                            generated=options.delivers_generated)
    return typed if options.schema_location is None else evolve_kept(options, typed)


class PgCdcDataSource(DataSource):
    """``spark.readStream.format("pg_cdc")``: Postgres logical-decoding changes as a stream.

    Options are validated when Spark asks for the schema, which happens at ``load()`` on the
    driver, so a bad option fails before the query starts; with ``mode=polling`` that includes
    the table and columns the options name (one catalog lookup). With ``row_format=struct``
    the schema's ``before``/``after``/``key`` are the captured tables' structs, read from the
    catalog there and again when the reader is made (they must agree); with
    ``schema_location``, evolved from the structs kept there, since Spark fixes the schema
    here, before the query reads its checkpoint (:mod:`postgres_cdc_source.struct_history`);
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
        typed = _typed(options)
        return SPARK_SCHEMA if typed is None else typed.schemas()[0]

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require("pg_cdc", "cdc", "psycopg")
        from postgres_cdc_source.options import CdcOptions
        from postgres_cdc_source.polling.reader import PgPollingStreamReader
        from postgres_cdc_source.stream.reader import PgCdcStreamReader

        options = CdcOptions.from_options(self.options)
        typed = _typed(options)
        expected = SPARK_SCHEMA if typed is None else typed.schemas()[0]
        if schema.simpleString() != expected.simpleString():
            raise ConfigError(
                "schema",
                "pg_cdc's schema follows its options (and with row_format=struct the tables' "
                "columns, which changed since load()); do not pass .schema(...) "
                f"(expected {expected.simpleString()})",
            )
        if options.polling is not None:
            return PgPollingStreamReader(options)
        return PgCdcStreamReader(options, typed)
