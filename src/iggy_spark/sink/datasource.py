"""The ``iggy_routed`` data source: options checked at query start, one writer per batch."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter
from pyspark.sql.types import StructType

from connector_common.dependencies import require

__all__ = ["IggyRoutedDataSource"]


class IggyRoutedDataSource(DataSource):
    """``df.writeStream.format("iggy_routed")``: each row says which Iggy stream/topic it goes to.

    Spark builds a writer per micro-batch on the driver; options are parsed there, before any
    task runs, so a bad option fails the query at start naming the option. The query's state
    (admitted destinations, breakers, which batches started and landed) lives in a control
    topic in Iggy (:mod:`iggy_spark.sink.state`) that every task reads itself, so the checkpoint may
    be anywhere and need not be passed as an option.
    """

    @classmethod
    def name(cls) -> str:
        return "iggy_routed"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # Imported here, not at module level: Spark imports this module to discover formats,
        # and must not fail there where the sink's client libraries are not installed.
        require("iggy_routed", "iggy", "apache_iggy", "xxhash")
        from iggy_spark.sink.columns import check_columns
        from iggy_spark.sink.migration import migrate_once
        from iggy_spark.sink.options import RoutedOptions
        from iggy_spark.sink.writer import IggyRoutedStreamWriter, prewarm_once

        options = RoutedOptions.from_options(self.options)
        check_columns(schema, options)
        migrate_once(options, self.options.get("checkpointlocation"))
        prewarm_once(options)
        return IggyRoutedStreamWriter(options)
