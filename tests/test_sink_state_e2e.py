"""The sink's state in Iggy, end to end: real Spark, the real Postgres, the broker over TCP.

The checkpoint is the session-wide ``spark.sql.streaming.checkpointLocation``, never passed to
the sink (``session_checkpoint_job.py``), so the sink finds its query and its state from
Spark's task properties and its control topic alone. The driver is ``kill -9``-ed while a batch
is being sent (the broker stops taking sends part way through it); the restart finds no control
topic (the local broker has no ``delete_topic``, so the query is pointed at an empty
``state_stream``: to the sink that is exactly a deleted topic), and its replay must still find
what landed. Every row must land exactly once. (A replay that finds its state is every other kill
test's.)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from iggy_local import LocalIggy
from iggy_spark import read_ledger
from iggy_spark_testing.chaos import (
    committed_end,
    flush_lsn,
    read_checkpoint,
    snapshot_finished,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.job import PipelineJob
from iggy_spark_testing.oracle import read_back

pytestmark = pytest.mark.e2e

ROWS, PER_BATCH = 1200, 400
SINK = {"max_batch_bytes": "16KB", "circuit_breaker.failure_threshold": "1000"}


class SessionCheckpointJob(PipelineJob):
    """:class:`PipelineJob`'s process handling around ``session_checkpoint_job.py``."""

    def __init__(self, *, pg: LocalPostgres, slot: str, url: str, root: Path, log_path: Path,
                 source: dict[str, str], sink: dict[str, str]) -> None:
        super().__init__(dsn=pg.dsn, slot=slot, url=url, checkpoint=root / slot,
                         log_path=log_path)
        job = Path(__file__).parent / "support" / "session_checkpoint_job.py"
        self.command = [sys.executable, str(job),
                        pg.dsn, slot, url, str(root), slot, json.dumps(source), json.dumps(sink)]


def test_a_kill_and_a_deleted_control_topic_with_a_session_wide_checkpoint_lose_nothing(
    pg: LocalPostgres, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    table = sql.Identifier(name, "t")
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, repeat('x', 200) "
                             "FROM generate_series(1, %s) g").format(table), (ROWS,))
    job = SessionCheckpointJob(
        pg=pg, slot=name, url=broker.url, root=tmp_path / "checkpoints",
        log_path=tmp_path / "job.log",
        source={"snapshot": "initial", "include_tables": f"{name}\\..*", "topic_from": "table",
                "default_stream": name, "snapshot_chunk_rows": str(PER_BATCH),
                "snapshot_max_rows_per_trigger": str(PER_BATCH)},
        sink=SINK,
    )
    checkpoint = job.checkpoint

    def sending() -> bool:
        """Whether the checkpoint's last batch is a planned one after the first, uncommitted."""
        batches = read_checkpoint(checkpoint)
        return bool(batches) and batches[-1].id > 0 and batches[-1].committed_at is None

    def kill_while_sending(landed: int) -> int:
        """Start, let the sends stall once ``landed`` messages are in, kill -9 the driver;
        how many of the interrupted batch's messages had landed.

        ``landed`` falls inside batch 1 (messages 401 to 800, sent in groups of at most 16KB), so
        once that many are in, the batch holds sends the broker refuses: it cannot commit, and
        the kill lands mid-send as soon as the checkpoint shows it planned."""
        broker.refuse_sends(name, "t", after=landed)
        mark = broker.accepted()
        job.start()
        wait_until(lambda: broker.messages(name, "t") >= landed and sending(), 180,
                   f"{landed} messages, their batch in flight", alive=lambda: job.running)
        job.kill()
        # the frames the job had sent are read before the fault heals, so none lands after
        wait_until(lambda: broker.open_since(mark) == 0, 30,
                   "the killed job's connections to close")
        broker.refuse_sends(name, "t", refuse=False)
        last = read_checkpoint(checkpoint)[-1]
        assert last.committed_at is None and last.id > 0, "the kill missed the batch"
        return broker.messages(name, "t") - last.id * PER_BATCH

    try:
        halves = kill_while_sending(600)  # batch 1, half sent; then its state is lost
        query_id = json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
        lost = f"{name}-state"  # the query's control topic is not there
        job.command[-1] = json.dumps({**SINK, "state_stream": lost})
        target = flush_lsn(pg.dsn)
        job.start()
        # the snapshot's batches end at its consistent point, which the server's flush position
        # may still be at (nothing written since): done means the snapshot finished too
        wait_until(lambda: snapshot_finished(checkpoint)
                   and (committed_end(checkpoint) or 0) >= target, 180,
                   "the job to catch up", alive=lambda: job.running)
    finally:
        broker.refuse_sends(name, "t", refuse=False)
        if job.running:
            job.kill()
    reads = [m.change["key"]["id"] for m in read_back(broker.url, [name])
             if m.change and m.change["op"] == "read"]
    assert len(reads) == len(set(reads)), f"{len(reads) - len(set(reads))} rows sent twice"
    assert sorted(reads) == list(range(1, ROWS + 1))
    log = job.log_path.read_text(errors="replace")
    resumed = [int(n) for n in re.findall(r"found landed by a replay (\d+)", log)]
    assert halves > 0 and sum(resumed) == halves, log[-3000:]  # each found what had landed
    assert f"{lost}/query-{query_id}" in log and "holds no ledger" in log
    assert read_ledger(broker.url, query_id=query_id, state_stream=lost).data["delivery"][
        "state_lost"] >= 1
