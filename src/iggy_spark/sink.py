"""The ``iggy_routed`` data source: options checked at query start, one writer per batch."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter
from pyspark.sql.types import StructType

from connector_common.dependencies import require

__all__ = ["IggyRoutedDataSource"]


class IggyRoutedDataSource(DataSource):
    """``df.writeStream.format("iggy_routed")``: each row says which Iggy stream/topic it goes to.

    Spark builds a writer per micro-batch on the driver; options are parsed there, before any
    task runs, so a bad option fails the query at start naming the option. The destinations
    this query has already admitted, and its circuit breakers, are read from the ledger next to
    the checkpoint and handed to every task, which keeps ``admission.max_destinations`` a
    per-query cap and makes a breaker opened in one batch refuse at once in the next.
    """

    @classmethod
    def name(cls) -> str:
        return "iggy_routed"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # Imported here, not at module level: Spark imports this module to discover formats,
        # and must not fail there where the sink's client libraries are not installed.
        require("iggy_routed", "iggy", "apache_iggy", "xxhash")
        from iggy_spark.columns import check_columns
        from iggy_spark.delivery import plan_batch
        from iggy_spark.options import DeliveryGuarantee, RoutedOptions
        from iggy_spark.report import Ledger, ledger_path
        from iggy_spark.writer import IggyRoutedStreamWriter, prewarm_once

        options = RoutedOptions.from_options(self.options)
        check_columns(schema, options)
        path = ledger_path(self.options.get("checkpointlocation"))
        ledger = Ledger(path)
        prewarm_once(options)
        plan = None
        if options.delivery is DeliveryGuarantee.EFFECTIVELY_ONCE:
            plan = plan_batch(None if path is None else path.parent.parent,
                              None if path is None else path.parent,
                              ledger.data["last_batch"], options.delivery_scan_messages)
        return IggyRoutedStreamWriter(options, ledger.admitted, path, ledger.breakers,
                                      plan=plan)
