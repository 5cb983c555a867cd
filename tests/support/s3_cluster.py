"""The remote-checkpoint scenario shared by tests/test_remote_checkpoint.py (one kill) and
bench/bench_remote_checkpoint.py (several): ``pg-to-iggy`` on a standalone cluster whose workers
share no disk with the driver, its checkpoint on ``s3a://``, the driver killed with ``kill -9``
while a batch is being sent, restarted, and drained.

A kill lands mid-send because the broker refuses sends to the busiest table's topic once it
holds a set number of messages (``LocalIggy.refuse_sends``): the batch is planned, some of its
messages are in Iggy, and its sink tasks are retrying the rest when the driver dies. Between
kills the workload commits more changes, so each restart has new data as well as the
interrupted batch to replay.

The sink's destination cap is set to the workload's three tables; once everything is delivered,
:data:`OVER_CAP` rows of a fourth captured table (``extra``) come in a batch of their own. A cap
that held per batch or per task would admit that topic (it is the batch's only destination);
the query-wide cap refuses it, and ``on_admission_failure=drop`` counts the rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from iggy_local import LocalIggy
from iggy_spark_testing.chaos import flush_lsn, offsets_end, prepare_capture, wait_until
from iggy_spark_testing.job import PipelineJob
from iggy_spark_testing.oracle import read_back
from iggy_spark_testing.readback import messages_in
from iggy_spark_testing.s3 import SeaweedS3
from iggy_spark_testing.workload import Workload
from support.spark_deployments import standalone_cluster

__all__ = ["HELD", "OVER_CAP", "Outcome", "batches", "killed_mid_send"]

HELD = 150
"""Messages of the held topic that land, per kill, before the broker refuses its sends."""
OVER_CAP = 50
"""Rows of the fourth table, refused by the cap."""


@dataclass(frozen=True)
class Outcome:
    work: Workload
    query_id: str
    checkpoint: str
    """The checkpoint's ``s3a://`` URI."""
    kills: int
    seconds: float
    log: Path


def batches(s3: SeaweedS3, checkpoint: str, log: str) -> set[int]:
    """The batch ids in the checkpoint's ``offsets/`` or ``commits/`` log, read from S3."""
    from pyarrow import fs

    selector = fs.FileSelector(f"{s3.bucket}/{checkpoint}/{log}", allow_not_found=True)
    infos = s3.filesystem().get_file_info(selector)  # type: ignore[attr-defined]
    return {int(i.base_name) for i in infos if i.base_name.isdigit()}


def _committed_end(s3: SeaweedS3, checkpoint: str) -> int | None:
    """The end LSN of the checkpoint's last committed batch, read from S3."""
    committed = batches(s3, checkpoint, "commits")
    if not committed:
        return None
    with s3.filesystem().open_input_stream(  # type: ignore[attr-defined]
            f"{s3.bucket}/{checkpoint}/offsets/{max(committed)}") as f:
        return offsets_end(f.read().decode())


def _caught_up(s3: SeaweedS3, checkpoint: str, url: str, stream: str, changes: int) -> bool:
    """Every change landed and every planned batch committed (the sink's figures are those of
    committed batches)."""
    return (batches(s3, checkpoint, "offsets") <= batches(s3, checkpoint, "commits")
            and len({m.id for m in read_back(url, [stream])}) >= changes)


def _query_id(s3: SeaweedS3, checkpoint: str) -> str:
    """Spark's query id, from the checkpoint's ``metadata`` on S3."""
    with s3.filesystem().open_input_stream(  # type: ignore[attr-defined]
            f"{s3.bucket}/{checkpoint}/metadata") as f:
        return str(json.loads(f.read().decode().splitlines()[0])["id"])


def killed_mid_send(
    dsn: str, broker: LocalIggy, s3: SeaweedS3, name: str, tmp: Path, *, kills: int,
    changes: int, seed: int,
) -> Outcome:
    """Run the scenario with ``kills`` kills, ``changes`` committed before each; returns
    when everything is delivered, every batch committed and the job stopped."""
    started = time.monotonic()
    work, source = prepare_capture(dsn, name, seed=seed)
    source["min_partitions"] = "2"  # each batch: two sink tasks at once, one per worker
    extra = sql.Identifier(name, "extra")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(extra))
    checkpoint = f"{name}/checkpoint"
    log = tmp / "job.log"
    with standalone_cluster(tmp / "cluster", private_disks=True) as master:
        job = PipelineJob(
            dsn=dsn, slot=name, url=broker.url, checkpoint=s3.uri(checkpoint), log_path=log,
            source=source, master=master, spark_conf=s3.spark_conf(),
            sink={"topic_defaults.partitions_count": "3",
                  "circuit_breaker.failure_threshold": "1000",
                  "admission.max_destinations": str(len(work.tables)),
                  "on_admission_failure": "drop"},
        )
        work.run(changes=changes)
        held = max(work.tables, key=lambda t: sum(
            1 for txn in work.transactions for c in txn.changes if c.table == t))
        try:
            for kill in range(kills):
                if kill:
                    work.run(changes=changes)
                stop_at = messages_in(broker.url, name, held) + HELD
                broker.refuse_sends(name, held, after=stop_at)
                job.start()

                def stalled(at: int = stop_at) -> bool:
                    return (messages_in(broker.url, name, held) >= at
                            and _in_flight(s3, checkpoint))

                wait_until(stalled, 300, "the first sends of a batch", alive=lambda: job.running)
                job.kill()
                planned = batches(s3, checkpoint, "offsets")
                assert planned and max(planned) not in batches(s3, checkpoint, "commits"), (
                    "the kill missed the batch")
                broker.refuse_sends(name, held, refuse=False)
            job.start()
            wait_until(lambda: _caught_up(s3, checkpoint, broker.url, name, work.changes), 300,
                       "the replay", every=2, alive=lambda: job.running)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(1, %s)").format(
                    extra), (OVER_CAP,))
            # a batch committed past the insert: one planned before it (the WAL moves without
            # changes too) can commit after it and must not end the wait
            target = flush_lsn(dsn)
            wait_until(lambda: (_committed_end(s3, checkpoint) or 0) >= target
                       and _caught_up(s3, checkpoint, broker.url, name, work.changes), 300,
                       "the batch over the cap", every=2, alive=lambda: job.running)
            assert job.stop() == 0, job.log_tail()
        except (RuntimeError, TimeoutError) as exc:  # a wait gave up: say what the job said
            raise AssertionError(f"{exc}\n--- the job's log ---\n{job.log_tail(80)}") from exc
        finally:
            broker.refuse_sends(name, held, refuse=False)
            if job.running:
                job.kill()
    return Outcome(work, _query_id(s3, checkpoint), s3.uri(checkpoint), kills,
                   time.monotonic() - started, log)


def _in_flight(s3: SeaweedS3, checkpoint: str) -> bool:
    """Whether the checkpoint's last planned batch is not committed: the batch whose sends of
    the held topic the broker refuses, so it cannot commit until the kill."""
    planned = batches(s3, checkpoint, "offsets")
    return bool(planned) and max(planned) not in batches(s3, checkpoint, "commits")
