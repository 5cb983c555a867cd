"""A streaming job for the kill tests: ``iggy`` topics into a parquet table until killed.

Run as ``python iggy_source_job.py URL STREAM TOPICS CHECKPOINT OUT MAX_PER_TRIGGER``: the
simplest query that pairs the source with an exactly-once sink (Spark's file sink), so a test
can SIGKILL it mid-batch and count what landed.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession


def main(url: str, stream: str, topics: str, checkpoint: str, out: str, cap: str) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("iggy-source-kill")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    (spark.readStream.format("iggy").option("url", url).option("stream", stream)
     .option("topics", topics).option("max_messages_per_trigger", cap).load()
     .writeStream.format("parquet").option("checkpointLocation", checkpoint)
     .start(out).awaitTermination())


if __name__ == "__main__":
    main(*sys.argv[1:7])
