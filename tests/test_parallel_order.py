"""Per-key order through Spark and Iggy with four partitions per batch, through faults.

``start_pipeline`` with ``min_partitions=4``: every batch is decoded by four tasks, each from a
temporary copy of the slot, then shuffled by destination and sorted by commit order
(:func:`pg_to_iggy.ordering.in_key_order`). Postgres is restarted and Spark's Python workers are
SIGKILLed mid-read; the oracle then checks every message that arrived (nothing lost, nothing
invented, each row's changes in commit order in its partition), and no temporary copy is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from test_reliability import SINK, judge

from iggy_local import LocalIggy
from iggy_spark_testing.chaos import SlotWatch, prepare_capture, wait_until
from iggy_spark_testing.harness import LocalPostgres
from pg_to_iggy.pipeline import start_pipeline

pytestmark = pytest.mark.e2e


def _copies(dsn: str, slot: str) -> list[str]:
    import psycopg

    with contextlib.suppress(psycopg.OperationalError), psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE temporary AND slot_name LIKE %s",
            (f"{slot}_part_%",))]
    return ["(server restarting)"]


def _kill_python_workers() -> float:
    """SIGKILL the Python workers Spark forked for this session's tasks (not the daemon that
    forks them): what an executor's Python process dying mid-task looks like."""
    killed_at = time.time()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            parent = proc.parent()
            if parent is not None and "pyspark.daemon" in " ".join(parent.cmdline()):
                os.kill(proc.pid, signal.SIGKILL)
    return killed_at


def _finish(query: StreamingQuery, restart: object) -> StreamingQuery:
    """Process everything, restarting the query (at most twice) if a fault failed it."""
    for _ in range(3):
        try:
            query.processAllAvailable()
            return query
        except StreamingQueryException:
            query = restart()  # type: ignore[operator]
    raise AssertionError("the query kept failing")


def test_per_key_order_holds_with_four_partitions_through_faults(
    spark: SparkSession, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    checkpoint = str(tmp_path / "checkpoint")
    with LocalPostgres() as server:  # its own: the restart must not hit other tests' servers
        work, source = prepare_capture(server.dsn, name, seed=15)
        source = {**source, "min_partitions": "4", "min_bytes_per_partition": "2KB"}

        def start() -> StreamingQuery:
            return start_pipeline(spark, dsn=server.dsn, slot=name, url=broker.url,
                                  checkpoint=checkpoint, source=source, sink=SINK)

        query = start()
        faults: list[float | tuple[float, float]] = []
        with SlotWatch(server.dsn, name, checkpoint) as watch:
            run = work.start(changes=3_000, rate=1_500)
            wait_until(lambda: bool(_copies(server.dsn, name)), 60, "a parallel read",
                       every=0.02)
            faults.append(_kill_python_workers())
            wait_until(lambda: work.changes >= 2_000, 60, "the workload to go on")
            began = time.time()
            server.restart("fast")
            faults.append((began, time.time()))
            run.join(90)
            query = _finish(query, start)
            query.stop()
            assert _copies(server.dsn, name) == []
        judge(broker.url, work, watch, faults)
