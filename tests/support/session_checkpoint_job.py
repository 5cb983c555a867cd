"""A ``pg_cdc`` → ``iggy_routed`` job whose checkpoint is NOT passed to the sink as an option.

Run as ``python session_checkpoint_job.py DSN SLOT URL ROOT NAME SOURCE_JSON SINK_JSON``: the
checkpoint is the session-wide ``spark.sql.streaming.checkpointLocation`` (``ROOT``, Spark puts
the query's under ``ROOT/NAME``), as with ``toTable`` or Spark Declarative Pipelines, so the sink
must find its query's identity and state without it. Runs until killed.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from pg_to_iggy.pipeline import JSON_COLUMNS


def main(dsn: str, slot: str, url: str, root: str, name: str, source: str, sink: str) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("session-checkpoint")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.checkpointLocation", root).getOrCreate())
    changes = (spark.readStream.format("pg_cdc").option("dsn", dsn).option("slot", slot)
               .options(**json.loads(source)).load())
    query = (changes.writeStream.format("iggy_routed").queryName(name).option("url", url)
             .option("json_columns", JSON_COLUMNS).options(**json.loads(sink)).start())
    print(f"session-checkpoint: query {query.id} started", file=sys.stderr, flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:8])
