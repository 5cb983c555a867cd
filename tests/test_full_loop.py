"""The full loop with Spark alone: ``pg_cdc`` → ``iggy_routed`` → ``iggy`` (streaming) → a
parquet table. (The pipeline's driver SIGKILLed mid-batch, and what Iggy then holds, is
test_reliability.py's; the ``iggy`` source's query killed mid-batch is
test_iggy_source_exactly_once.py's.)

What lands in the table is judged by the same consistency oracle as the reliability tests
(:func:`iggy_spark_testing.oracle.check`), fed with the rows the ``iggy`` source read instead
of an SDK loop: every committed change once, with its stable id, nothing invented, each row's
changes in commit order within one partition, and the replayed changes equal to the source
tables. The same topics read with ``payload_format=pg_cdc`` give back the change rows
themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from connector_common.change_rows import JSON_TEXT_COLUMNS, SPARK_SCHEMA
from iggy_spark_testing.chaos import prepare_capture
from iggy_spark_testing.oracle import ChangeMessage, check, read_tables
from pg_to_iggy.pipeline import start_pipeline

pytestmark = pytest.mark.e2e


@pytest.mark.spark_tier
def test_pg_cdc_to_iggy_and_back_through_spark(
    spark: Any, pg: Any, broker: Any, name: str, tmp_path: Path
) -> None:
    work, source = prepare_capture(pg.dsn, name, seed=7)
    work.run(changes=1_500)
    pipeline = start_pipeline(spark, dsn=pg.dsn, slot=name, url=broker.url,
                              checkpoint=str(tmp_path / "pipeline"), source=source,
                              sink={"topic_defaults.partitions_count": "2"},
                              trigger={"availableNow": True})
    pipeline.awaitTermination(300)
    assert pipeline.exception() is None

    out = tmp_path / "table"
    query = (spark.readStream.format("iggy").option("url", broker.url).option("stream", name)
             .option("topic_pattern", ".*").option("max_messages_per_trigger", "700").load()
             .writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start(str(out)))
    query.awaitTermination(300)
    rows = spark.read.parquet(str(out)).collect()
    delivered = [ChangeMessage(r.stream, r.topic, r.partition, r.offset, int(r.id),
                               orjson.loads(r.payload)) for r in rows]
    tables = list(work.tables.values())
    report = check(delivered, work.transactions, tables,
                   source=read_tables(work.dsn, work.schema, tables))
    assert report.ok, str(report)
    assert report.duplicates == 0
    assert report.delivered == report.changes == work.changes == len(rows)

    changes = (spark.read.format("iggy").option("url", broker.url).option("stream", name)
               .option("topic_pattern", ".*").option("payload_format", "pg_cdc").load())
    assert changes.schema == SPARK_SCHEMA
    by_position = {(r.commit_lsn, r.seq): r for r in changes.collect()}
    assert len(by_position) == len(delivered)
    for message in delivered:
        sent = message.change
        assert sent is not None
        row = by_position[sent["commit_lsn"], sent["seq"]]
        assert row.id == f"{sent['commit_lsn']}:{sent['seq']}"
        assert (row.stream, row.topic, row.partition_key) == (message.stream, message.topic, None)
        for column in ("lsn", "xid", "schema", "table", "op", "unchanged"):
            assert getattr(row, column) == sent[column], column
        for column in JSON_TEXT_COLUMNS:
            text = None if sent.get(column) is None else orjson.dumps(sent[column]).decode()
            assert getattr(row, column) == text, column
