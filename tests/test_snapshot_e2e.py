"""``snapshot=initial`` end to end: real Spark, the real Postgres, the broker over TCP.

A workload writes to the tables while the snapshot is taken and read, in several micro-batches
of several chunks; everything goes through ``iggy_routed`` to one topic per table, partitioned
by row, and is read back over the SDK as a consumer would. The consumer rebuilds the tables
from the messages (:func:`support.snapshot_support.replay`) and they must equal the source tables:
strictly (no change applied against the snapshot twice) for an undisturbed run, and as final
state per key after a driver ``kill -9`` in the middle of the snapshot (docs/pg_cdc.md, "After a
crash during the snapshot": what a consumer sees).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql
from pyspark.sql import SparkSession
from support.snapshot_support import replay

from connector_common.lsn import parse_lsn
from iggy_local import LocalIggy
from iggy_spark_testing.chaos import (
    committed_end,
    flush_lsn,
    read_checkpoint,
    slot_exists,
    snapshot_finished,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.job import PipelineJob
from iggy_spark_testing.oracle import read_back, read_tables
from iggy_spark_testing.readback import messages_in
from iggy_spark_testing.workload import Workload
from pg_to_iggy.pipeline import start_pipeline

pytestmark = pytest.mark.e2e

SINK = {"topic_defaults.partitions_count": "3"}


def _source(name: str, **extra: str) -> dict[str, str]:
    return {
        "snapshot": "initial", "include_tables": f"{name}\\..*", "topic_from": "table",
        "partition_key_from": "id", "default_stream": name, **extra,
    }


def _messages(url: str, name: str) -> list[dict[str, Any]]:
    """Everything in the stream, partition by partition in offset order, with its message id."""
    return [dict(m.change or {}, id=m.id) for m in read_back(url, [name])]


@pytest.mark.oldest_spark
@pytest.mark.pg_versions(18)  # the snapshot's other end-to-end tests run on 15
def test_snapshot_then_stream_through_spark_and_iggy(
    spark: SparkSession, pg: LocalPostgres, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    work = Workload(pg.dsn, name, seed=21)
    work.setup()
    work.run(changes=300)
    checkpoint = tmp_path / "chk"
    query = start_pipeline(
        spark, dsn=pg.dsn, slot=name, url=broker.url, checkpoint=str(checkpoint),
        source=_source(name, snapshot_chunk_rows="20", snapshot_max_rows_per_trigger="60"),
        sink=SINK,
    )
    stop = threading.Event()
    try:
        wait_until(lambda: slot_exists(pg.dsn, name), 120, "the slot")
        run = work.start(stop=stop, rate=30)  # writes while the snapshot is read
        wait_until(lambda: snapshot_finished(checkpoint), 120, "the snapshot to finish")
        stop.set()
        run.join(60)
        target = flush_lsn(pg.dsn)
        wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 120,
                   "the query to catch up")
    finally:
        stop.set()
        query.stop()
        work.close()
    messages = _messages(broker.url, name)
    reads = [m for m in messages if m["op"] == "read"]
    assert reads and len({m["id"] for m in reads}) == len(reads)
    assert any(m["op"] != "read" for m in messages)
    batches = read_checkpoint(checkpoint)
    # more rows than a batch of snapshot_max_rows_per_trigger=60 takes: several snapshot
    # batches (how many depends on how the chunks fall across the tables' estimated sizes)
    assert len(reads) > 60 and sum(1 for b in batches if b.end == batches[0].end) >= 2
    model, problems = replay(messages, work.tables, strict=True)
    assert not problems, problems[:5]
    assert model == read_tables(pg.dsn, name, work.tables.values())


def test_a_snapshot_batch_killed_mid_send_and_replayed_over_changed_rows_loses_nothing(
    pg: LocalPostgres, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    """Issue 21: the driver is killed (its exported snapshot dies with it) while the second
    snapshot batch is being sent, after the first committed (the broker stops taking sends
    once 3,000 of the table's 4,000 rows landed); before the restart, rows of the batch that
    landed are deleted and rows are inserted on both sides of where the sending stopped. The
    restarted job goes on from the committed batch, the replayed batch reads the table as it
    is then, and the sink skips what landed by id: every row of the table arrives, no snapshot
    row twice, every one at the snapshot's position."""
    table = sql.Identifier(name, "t")
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g * 2, repeat('x', 2000) "
                             "FROM generate_series(1, 4000) g").format(table))
    checkpoint = tmp_path / "chk"
    job = PipelineJob(
        dsn=pg.dsn, slot=name, url=broker.url, checkpoint=checkpoint,
        log_path=tmp_path / "job.log",
        sink={"topic_defaults.partitions_count": "1", "max_batch_bytes": "256KB",
              "circuit_breaker.failure_threshold": "1000"},
        source=_source(name, snapshot_chunk_rows="2000", snapshot_max_rows_per_trigger="2000"),
    )
    broker.refuse_sends(name, "t", after=3000)
    try:
        job.start()
        # 3,000 is inside the second batch (rows 2,001 to 4,000, sent 256KB at a time), so
        # once that many landed it holds sends the broker refuses and cannot commit
        wait_until(lambda: messages_in(broker.url, name, "t") >= 3000
                   and [(b.id, b.committed_at) for b in read_checkpoint(checkpoint)][-1:]
                   == [(1, None)], 180,
                   "the first sends of the second snapshot batch", alive=lambda: job.running)
        job.kill()
        assert messages_in(broker.url, name, "t") < 4000
        last = read_checkpoint(checkpoint)[-1]
        offset = orjson.loads((checkpoint / "offsets" / str(last.id)).read_text()
                              .splitlines()[-1])
        # a snapshot batch pins its chunks (this one, the last, ends the snapshot)
        assert last.committed_at is None and offset["planned"], "the kill missed the batch"
        assert last.id == 1 and read_checkpoint(checkpoint)[0].committed_at is not None
        lo = int(offset["planned"][0][2][0]) if offset["planned"][0][2] else 0
        broker.refuse_sends(name, "t", refuse=False)
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DELETE FROM {} WHERE id > %s AND id <= %s").format(table),
                         (lo, lo + 1000))
            conn.execute(sql.SQL("INSERT INTO {} SELECT g * 2 + 1, 'new' "
                                 "FROM generate_series(%s, 4000, 7) g").format(table), (lo // 2,))
        target = flush_lsn(pg.dsn)
        job.start()
        wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 180,
                   "the job to catch up", alive=lambda: job.running)
        assert job.stop() == 0, job.log_tail()
    finally:
        broker.refuse_sends(name, "t", refuse=False)
        if job.running:
            job.kill()
    rows: dict[int, Any] = {}
    reads: list[dict[str, Any]] = []
    for m in _messages(broker.url, name):
        key = m["key"]["id"]
        if m["op"] == "delete":
            rows.pop(key, None)
        else:
            rows[key] = m["after"]
        if m["op"] == "read":
            reads.append(m)
    with psycopg.connect(pg.dsn) as conn:
        table_ids = {r[0] for r in conn.execute(sql.SQL("SELECT id FROM {}").format(table))}
    missing = table_ids - rows.keys()
    assert not missing, f"{len(missing)} rows missing, e.g. {sorted(missing)[:5]}"
    assert rows.keys() == table_ids
    assert len({m["id"] for m in reads}) == len(reads), "a snapshot row was sent twice"
    assert {parse_lsn(m["commit_lsn"]) for m in reads} == {last.end}
    resumed = [int(n) for n in re.findall(r"found landed by a replay (\d+)",
                                          job.log_path.read_text(errors="replace"))]
    assert sum(resumed) > 0  # what landed of the rows still there was skipped
