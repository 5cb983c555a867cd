"""The CDC pipeline as a library call and as a ``spark-submit`` job: ``pg_cdc`` → ``iggy_routed``.

From Python (a notebook, a test, the demo)::

    query = start_pipeline(spark, dsn=..., slot="orders", url="iggy://iggy:iggy@host:8090",
                           checkpoint="/chk/orders",
                           source={"topic_from": "table", "default_stream": "cdc"})

As a job (any ``pg_cdc``/``iggy_routed`` option with ``--source``/``--sink``)::

    spark-submit --master spark://master:7077 \\
        "$(python -c 'import pg_to_iggy.pipeline as p; print(p.__file__)')" \\
        --dsn "host=db dbname=app" --slot orders --url iggy://iggy:iggy@iggy:8090 \\
        --checkpoint /chk/orders --source topic_from=table --source default_stream=cdc

or ``pg-to-iggy ...`` (``python -m pg_to_iggy``) with pyspark installed. ``--dsn`` and ``--url``
default to ``$PG_CDC_DSN`` and ``$IGGY_URL``: prefer those (or ``PGPASSWORD``/``.pgpass``) to
passwords on the command line, which every local user can read in the process list. The job
runs until stopped (SIGTERM stops the query between batches), or with ``--available-now`` until
it has caught up.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from connector_common.change_rows import DERIVED_COLUMNS, JSON_TEXT_COLUMNS
from connector_common.options import option_pair
from pg_to_iggy.ordering import in_key_order

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["JSON_COLUMNS", "main", "start_pipeline"]

DSN_ENV, URL_ENV = "PG_CDC_DSN", "IGGY_URL"
JSON_COLUMNS = ",".join(JSON_TEXT_COLUMNS)
"""pg_cdc's columns that hold JSON text: embedded as JSON in the Iggy payload, not as strings."""


def start_pipeline(
    spark: SparkSession,
    *,
    dsn: str,
    slot: str,
    url: str,
    checkpoint: str,
    source: Mapping[str, str] | None = None,
    sink: Mapping[str, str] | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
) -> StreamingQuery:
    """Start the streaming query ``pg_cdc`` → ``iggy_routed`` and return it.

    ``trigger`` is passed to ``DataStreamWriter.trigger`` (e.g. ``{"processingTime": "1
    second"}`` or ``{"availableNow": True}``); by default batches run back to back.

    With ``min_partitions`` above 1 in ``source`` (batches decoded by several tasks),
    :func:`pg_to_iggy.in_key_order` keeps each key's changes in commit order on their
    way to Iggy. It stays 1 unless asked for: on few cores more tasks do not pay for the
    copies and the order step (bench/results/source_partitions.json), and the order step holds
    each sink task's share of a batch in memory where one task streams it.

    The payloads are the JSON mode's: with ``row_format=struct`` in ``source`` (typed rows,
    whose structs are fixed when the query starts and stop it when a table's columns change),
    ``key``/``before``/``after`` are turned back into the JSON mode's text before the sink,
    byte for byte (:func:`postgres_cdc_source.json_rows`). ``row_format=variant``
    is refused (``ConfigError``): a variant object sorts its keys and keeps no Postgres type,
    so its JSON is not the JSON mode's byte for byte (column order, ``json`` text, numbers
    beyond 38 digits).
    """
    options = {key.lower(): value for key, value in (source or {}).items()}
    row_format = options.get("row_format", "json")
    if row_format not in ("json", "struct"):
        from postgres_cdc_source import ConfigError

        raise ConfigError("row_format", f"{row_format!r}: the pipeline routes pg_cdc's rows "
                          "into Iggy as the JSON mode's payloads byte for byte, which variant "
                          "rows cannot give (their objects sort the columns' keys); use "
                          "row_format=json or struct")
    reader = spark.readStream.format("pg_cdc").option("dsn", dsn).option("slot", slot)
    for key, value in options.items():
        reader = reader.option(key, value)
    changes = reader.load()  # validates the options, min_partitions included
    if row_format == "struct":
        from postgres_cdc_source import json_rows

        changes = json_rows(changes)
    if int(options.get("min_partitions", "1")) > 1:  # a valid number: load() checked it
        changes = in_key_order(changes)
    writer = (
        changes.drop(*DERIVED_COLUMNS).writeStream.format("iggy_routed")
        .option("url", url)
        .option("checkpointLocation", checkpoint)
        .option("json_columns", JSON_COLUMNS)
    )
    for key, value in (sink or {}).items():
        writer = writer.option(key, value)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


def _parallelism(spark: SparkSession) -> int:
    """The executor cores Spark schedules tasks on (1 where it cannot say, as on Spark
    Connect, which has no SparkContext: pass ``min_partitions`` there)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect raises its own error types here
        return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pg-to-iggy", description=__doc__.split("\n")[0])
    # Credentials may come from the environment, so they need not show in the process list.
    dsn, url = os.environ.get(DSN_ENV), os.environ.get(URL_ENV)
    p.add_argument("--dsn", default=dsn, required=dsn is None,
                   help=f"Postgres conninfo or URI (default: ${DSN_ENV}; libpq also reads "
                        "PGPASSWORD and ~/.pgpass)")
    p.add_argument("--slot", required=True, help="logical replication slot")
    p.add_argument("--url", default=url, required=url is None,
                   help=f"iggy://user:password@host:port (default: ${URL_ENV})")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint location")
    p.add_argument("--source", action="append", default=[], type=option_pair,
                   metavar="OPTION=VALUE", help="pg_cdc option")
    p.add_argument("--sink", action="append", default=[], type=option_pair,
                   metavar="OPTION=VALUE", help="iggy_routed option")
    p.add_argument("--trigger-interval", help="processingTime trigger, e.g. '1 second'")
    p.add_argument("--available-now", action="store_true", help="catch up, then exit")
    p.add_argument("--master", default=None, help="Spark master when run with plain python")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Installed first, so a SIGTERM while the JVM starts also stops cleanly. The handler only
    # raises a flag: calling query.stop() inside it would re-enter the py4j connection the main
    # thread is blocked on in awaitTermination and break both calls.
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession

    # Spark's Python workers must run this interpreter (where the connectors are installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(f"iggy-spark-pipeline-{args.slot}")
    if args.master:
        builder = builder.master(args.master)
    spark = builder.getOrCreate()
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        # in_key_order's shuffle: one sink task per core rather than Spark's default of 200
        # (a new checkpoint records the value; a restarted query keeps the one it started with)
        spark.conf.set("spark.sql.shuffle.partitions", str(_parallelism(spark)))
    trigger: dict[str, Any] | None = None
    if args.available_now:
        trigger = {"availableNow": True}
    elif args.trigger_interval:
        trigger = {"processingTime": args.trigger_interval}
    query = start_pipeline(
        spark, dsn=args.dsn, slot=args.slot, url=args.url, checkpoint=args.checkpoint,
        source=dict(args.source), sink=dict(args.sink),
        trigger=trigger,
    )
    # What a supervisor can wait for: from here on a SIGTERM stops the query cleanly.
    print(f"pg-to-iggy: query {query.id} started (slot {args.slot})", file=sys.stderr,
          flush=True)
    with contextlib.suppress(StreamingQueryException):  # a failed query is reported below
        while not stopping.is_set() and not query.awaitTermination(1):
            pass
    query.stop()
    error = query.exception()
    if error is not None:
        print(f"pipeline failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
