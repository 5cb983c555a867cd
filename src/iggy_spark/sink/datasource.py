"""The ``iggy_routed`` data source: options checked at query start, one writer per batch."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter
from pyspark.sql.types import StructType

from connector_common.dependencies import require
from iggy_spark.sdk import INSTALL_ANY

__all__ = ["IggyRoutedDataSource", "session_checkpoint_warning"]

SESSION_CHECKPOINT_WARNING = (
    "iggy_routed: this query has no checkpointLocation option, so Spark keeps its checkpoint "
    "under the session-wide spark.sql.streaming.checkpointLocation. Give the query a name "
    "(.queryName(...)): an unnamed query gets a fresh random folder there at every start, so a "
    "restart is a new query (a new sink state: a batch in flight at the stop is sent again in "
    "full)"
)

_warned_session_checkpoint = False


def session_checkpoint_warning(options: Mapping[str, str]) -> str | None:
    """The warning for a query on the session-wide checkpoint, or ``None``.

    Spark refuses a streaming query with neither a ``checkpointLocation`` option nor the
    session-wide setting, so a sink without the option runs on the session-wide one. Whether the
    query has a name does not reach a data source: the warning says what a name changes.
    """
    return None if "checkpointlocation" in options else SESSION_CHECKPOINT_WARNING


class IggyRoutedDataSource(DataSource):
    """``df.writeStream.format("iggy_routed")``: each row says which Iggy stream/topic it goes to.

    Spark builds a writer per micro-batch on the driver; options are parsed there, before any
    task runs, so a bad option fails the query at start naming the option. The query's state
    (admitted destinations, breakers, which batches started and landed) lives in a control
    topic in Iggy (:mod:`iggy_spark.sink.control_topic`) that every task reads itself, so the
    checkpoint may be anywhere and need not be passed as an option.
    """

    @classmethod
    def name(cls) -> str:
        return "iggy_routed"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # Imported here, not at module level: Spark imports this module to discover formats,
        # and must not fail there where the sink's client libraries are not installed.
        require("iggy_routed", "iggy", "apache_iggy", "xxhash", install=INSTALL_ANY)
        from iggy_spark.sink.columns import check_columns
        from iggy_spark.sink.logs import warn
        from iggy_spark.sink.migration import migrate_once
        from iggy_spark.sink.options import RoutedOptions
        from iggy_spark.sink.writer import IggyRoutedStreamWriter, prewarm_once

        options = RoutedOptions.from_options(self.options)
        check_columns(schema, options)
        migrate_once(options, self.options.get("checkpointlocation"))
        # Spark builds a writer for every micro-batch: warn once per driver process, not per batch
        global _warned_session_checkpoint
        line = session_checkpoint_warning(self.options)
        if line is not None and not _warned_session_checkpoint:
            _warned_session_checkpoint = True
            warn(line)
        prewarm_once(options)
        return IggyRoutedStreamWriter(options, schema)
