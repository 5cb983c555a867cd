"""The ``iggy`` data source: options checked when the query plans, one reader per read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from connector_common.dependencies import require
from iggy_spark.sdk import INSTALL_ANY

if TYPE_CHECKING:
    import pyarrow as pa

    from iggy_spark.source.options import SourceOptions

__all__ = ["IggyDataSource"]


class IggyDataSource(DataSource):
    """``spark.read.format("iggy")`` and ``spark.readStream.format("iggy")``: the messages of
    Iggy topics as rows (see :mod:`iggy_spark.source.schema` for the columns), or their JSON
    payloads parsed (``payload_format``, :mod:`iggy_spark.source.payloads`)."""

    @classmethod
    def name(cls) -> str:
        return "iggy"

    def schema(self) -> StructType:
        """Called only when the user gave no ``.schema(...)``."""
        from connector_common.change_rows import SPARK_SCHEMA
        from iggy_spark.errors import ConfigError
        from iggy_spark.source.options import SourceOptions
        from iggy_spark.source.schema import SCHEMA

        form = SourceOptions.from_options(self.options).payload_format
        if form == "json":
            raise ConfigError("payload_format", "json needs the rows' schema: "
                              "spark.read.format('iggy').schema('order_id long, ...')")
        return SPARK_SCHEMA if form == "pg_cdc" else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        # Imported here, not at module level: Spark imports this module to discover formats,
        # and must not fail there where the client library is not installed.
        require("iggy", "iggy", "apache_iggy", install=INSTALL_ANY)
        from iggy_spark.source.reader import IggyBatchReader

        return IggyBatchReader(*self._plan(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require("iggy", "iggy", "apache_iggy", install=INSTALL_ANY)
        from iggy_spark.errors import ConfigError
        from iggy_spark.source.reader import IggyStreamReader

        for key in self.options:
            if key.strip().lower() in ("ending_offsets", "ending_timestamp"):
                raise ConfigError(key.strip().lower(),
                                  "only applies to batch reads (spark.read)")
        return IggyStreamReader(*self._plan(schema))

    def _plan(self, schema: StructType) -> tuple[SourceOptions, pa.Schema | None]:
        """The parsed options and the Arrow schema payloads are parsed into (``None``: the
        message columns), checked against ``payload_format``."""
        from connector_common.change_rows import SPARK_SCHEMA
        from connector_common.spark_versions import arrow_schema
        from iggy_spark.errors import ConfigError
        from iggy_spark.source.options import SourceOptions
        from iggy_spark.source.schema import SCHEMA

        options = SourceOptions.from_options(self.options)
        form = options.payload_format
        fixed = {"binary": SCHEMA, "pg_cdc": SPARK_SCHEMA}.get(form)
        if fixed is not None and schema != fixed:
            raise ConfigError("payload_format", f"{form} has its own columns; a schema given "
                              "with .schema(...) needs payload_format=json")
        if form == "binary":
            return options, None
        try:
            return options, arrow_schema(schema)
        except Exception as exc:  # pyspark raises its own types per Spark type
            raise ConfigError("payload_format", f"json cannot fill the schema "
                              f"{schema.simpleString()}: {exc}") from exc
