"""The full loop with Spark alone: ``pg_cdc`` → ``iggy_routed`` → ``iggy`` (streaming) → a
parquet table, the pipeline's driver SIGKILLed mid-batch, restarted, and stopped with SIGTERM
once it caught up (it must exit 0). The slot is sampled all along: its ``confirmed_flush_lsn``
is never beyond the end of the last batch in ``commits/``. Repeated kills of every kind, in one
long run, are bench/bench_reliability.py's campaign.

What lands in the table is judged by the same consistency oracle as the reliability tests
(:func:`iggy_spark_testing.oracle.check`), fed with the rows the ``iggy`` source read instead
of an SDK loop: every committed change once, with its stable id, nothing invented, each row's
changes in commit order within one partition, and the replayed changes equal to the source
tables. The sink's ledger, read back from the query's control topic, ends at the last
committed batch and counts every change once. The same topics read with
``payload_format=pg_cdc`` give back the change rows themselves.

The 4.1.4 version tier runs it on the Iggy 0.10 line too: the end-to-end test of that line's
routed delivery, effectively-once across a kill, control topic and ``iggy`` source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from support.streaming import available_now, freeze_mid_batch, logged

from connector_common.change_rows import JSON_TEXT_COLUMNS, SPARK_SCHEMA
from iggy_spark import read_ledger
from iggy_spark_testing.chaos import (
    SlotWatch,
    committed_end,
    flush_lsn,
    prepare_capture,
    read_checkpoint,
    wait_until,
)
from iggy_spark_testing.job import PipelineJob
from iggy_spark_testing.oracle import ChangeMessage, check, read_tables

pytestmark = [pytest.mark.e2e, pytest.mark.iggy_line]


@pytest.mark.spark_tier
def test_pg_cdc_to_iggy_and_back_through_spark_with_a_killed_driver(
    spark: Any, pg: Any, broker: Any, name: str, tmp_path: Path
) -> None:
    work, source = prepare_capture(pg.dsn, name, seed=7)
    checkpoint = tmp_path / "pipeline"
    job = PipelineJob(dsn=pg.dsn, slot=name, url=broker.url, checkpoint=checkpoint,
                      log_path=tmp_path / "job.log", source=source,
                      sink={"topic_defaults.partitions_count": "2"})
    with SlotWatch(pg.dsn, name, checkpoint) as watch:
        try:
            job.start()
            wait_until(lambda: "pg-to-iggy: query" in job.log_tail(400), 120,
                       "the pipeline's query to start", alive=lambda: job.running)
            run = work.start(changes=1_500, rate=300)
            # mid-batch: a batch planned (its offsets written) and not yet committed
            assert job.pid is not None
            freeze_mid_batch(job.pid, checkpoint, 60, after=1, alive=lambda: job.running)
            job.kill()
            assert logged(checkpoint, "commits") < logged(checkpoint, "offsets")
            job.start()
            run.join(120)
            target = flush_lsn(pg.dsn)
            wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 120,
                       "the pipeline to catch up", alive=lambda: job.running)
            assert job.stop() == 0, job.log_tail()
        finally:
            if job.running:
                job.kill()
    assert watch.samples, "the slot was never sampled"
    assert not watch.violations, watch.describe(watch.violations[0])
    ledger = read_ledger(broker.url, checkpoint)
    batches = read_checkpoint(checkpoint)
    committed = max(b.id for b in batches if b.committed_at)
    # The SIGTERM may land after the sink recorded a batch and before Spark logged its commit:
    # the ledger is then at the batch planned after the last commit, which a restart skips.
    assert ledger.last_batch in (committed, batches[-1].id)
    assert batches[-1].id <= committed + 1
    assert sum(d["messages"] for d in ledger.rows()) == work.changes

    out = tmp_path / "table"
    available_now(lambda: (
        spark.readStream.format("iggy").option("url", broker.url).option("stream", name)
        .option("topic_pattern", ".*").option("max_messages_per_trigger", "700").load()
        .writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True).start(str(out))))
    rows = spark.read.parquet(str(out)).collect()
    delivered = [ChangeMessage(r.stream, r.topic, r.partition, r.offset, int(r.id),
                               orjson.loads(r.payload)) for r in rows]
    payloads = {(m.change["commit_lsn"], m.change["seq"]): bytes(r.payload)
                for m, r in zip(delivered, rows, strict=True) if m.change is not None}
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
        for column in JSON_TEXT_COLUMNS:  # the payload's own text of the field, as written
            text = getattr(row, column)
            if sent.get(column) is None:
                assert text is None, column
            else:
                assert orjson.loads(text) == sent[column], column
                assert f'"{column}":{text}'.encode() in payloads[sent["commit_lsn"], sent["seq"]]
