"""Every change of the captured tables, routed to one Iggy topic per table.

The flow's source is ``pg_cdc`` (logical decoding through the slot ``$PG_CDC_SLOT``) and its
target the ``iggy_routed`` sink, declared with ``create_sink``: SDP starts, checkpoints and
restarts the streaming query, the connectors work as in any other query. Connection settings
come from the environment (``PG_CDC_DSN``, ``IGGY_URL``, as for the ``pg-to-iggy`` job), so no
secret sits in the pipeline's files.
"""

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

SLOT = os.environ.get("PG_CDC_SLOT", "pg_to_iggy")

dp.create_sink(
    "iggy",
    format="iggy_routed",
    options={
        "url": os.environ["IGGY_URL"],
        "json_columns": "key,before,after",
        "topic_defaults.partitions_count": "3",
    },
)


@dp.append_flow(target="iggy")
def changes() -> DataFrame:
    """Each change, with its destination: stream ``$IGGY_STREAM`` (the slot's name by default),
    the table's topic, a partition chosen by the row's ``id``; ``position`` stays out of the
    payload, as the ``pg-to-iggy`` job leaves it (it is made of ``commit_lsn`` and ``seq``)."""
    spark = SparkSession.active()
    return (
        spark.readStream.format("pg_cdc")
        .option("dsn", os.environ["PG_CDC_DSN"])
        .option("slot", SLOT)
        .option("include_tables", os.environ.get("PG_CDC_TABLES", r"public\..*"))
        .option("topic_from", "table")
        .option("partition_key_from", "id")
        .option("default_stream", os.environ.get("IGGY_STREAM", SLOT))
        .load()
        .drop("position")
    )
