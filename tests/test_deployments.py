"""pg_cdc → iggy_routed over Spark Connect, where users run Spark that way: the client only
describes the query; the formats are discovered, options validated and the data moved by the
server's Python workers.

The ``pg-to-iggy`` job on a standalone cluster (reading and sending in executor JVMs and their
Python workers, never in the driver) is tests/test_remote_checkpoint.py, whose workers share no
disk with the driver and whose delivery the consistency oracle checks.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.spark_deployments import connect_server

from iggy_spark_testing.readback import read_topic
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication.lifecycle import ensure_slot

pytestmark = pytest.mark.e2e

KINDS = ("created", "paid", "shipped")


def _write(pg: Any, table: str) -> None:
    with pg.connect() as conn:
        for start in range(0, 300, 50):  # several transactions, so several batches
            with conn.transaction():
                for i in range(start, start + 50):
                    conn.execute(
                        f"INSERT INTO {table} VALUES (%s, %s, %s)", (i, KINDS[i % 3], f"v{i}")
                    )
        conn.execute(f"UPDATE {table} SET v = v || '!' WHERE id % 7 = 0")
        conn.execute(f"DELETE FROM {table} WHERE id % 11 = 0")


def _delivered(url: str, stream: str) -> dict[str, list[tuple[int, int, bytes]]]:
    return {
        topic: [(m.partition, m.id, m.payload) for m in read_topic(url, stream, topic)]
        for topic in KINDS
    }


def _options(table: str) -> dict[str, str]:
    return {"include_tables": f"public\\.{table}", "topic_from": "kind",
            "default_topic": "created", "partition_key_from": "id",
            "max_bytes_per_trigger": "16KB"}


_CONNECT_CLIENT = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    remote, dsn, slot, table, url, checkpoint = sys.argv[1:]
    spark = SparkSession.builder.remote(remote).getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    changes = (
        spark.readStream.format("pg_cdc").option("dsn", dsn).option("slot", slot)
        .option("include_tables", "public\\\\." + table).option("topic_from", "kind")
        .option("default_topic", "created").load()
    )
    query = (
        changes.writeStream.format("iggy_routed").option("url", url)
        .option("default_stream", slot).option("default_topic", "created")
        .option("json_columns", "key,before,after")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    try:
        from pg_to_iggy import serve_metrics
        serve_metrics(spark, port=0)
    except RuntimeError as exc:
        print("metrics:", exc)
    print("done")
""")


@pytest.mark.spark_tier
def test_spark_connect_runs_pg_cdc_into_iggy_routed(
    pg: Any, broker: Any, name: str, tmp_path: Path
) -> None:
    table = name
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, kind text, v text)")
    source = _options(table)
    ensure_slot(CdcOptions.from_options({"dsn": pg.dsn, "slot": name, **source}))
    _write(pg, table)
    with connect_server(tmp_path / "connect") as remote:
        client = subprocess.run(
            [sys.executable, "-c", _CONNECT_CLIENT, remote, pg.dsn, name, table, broker.url,
             str(tmp_path / "chk")],
            capture_output=True, text=True, timeout=400,
        )
    assert client.returncode == 0, client.stderr[-4000:]
    assert client.stdout.splitlines()[-1] == "done"
    assert "serve_metrics" in client.stdout and "Spark Connect" in client.stdout
    delivered = _delivered(broker.url, name)
    assert sum(map(len, delivered.values())) == 300 + 43 + 28
    ids = {m[1] for messages in delivered.values() for m in messages}
    assert len(ids) == 300 + 43 + 28  # every change once, none invented by a replay
