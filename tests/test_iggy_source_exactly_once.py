"""Exactly once into Spark: a streaming query from Iggy into the parquet sink, its driver
SIGKILLed mid-batch, finished by a fresh run on the same checkpoint; every message lands
once.

The job runs in a process group of its own (driver, JVM, Python workers) so the kill takes it
all, as a crashed machine would. The replayed batch must read the same offsets, so the file
sink's own exactly-once commit (``_spark_metadata``) leaves no duplicate and no gap.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.iggy_source_support import payload, seed
from support.streaming import available_now, freeze_mid_batch, logged

pytestmark = [pytest.mark.e2e, pytest.mark.iggy_line]

JOB = Path(__file__).parent / "support" / "iggy_source_job.py"


@pytest.mark.oldest_spark
def test_a_killed_driver_loses_and_repeats_nothing(
    spark: Any, broker: Any, name: str, tmp_path: Path
) -> None:
    per_partition = 600
    seed(broker.address, name, ["a"], partitions=2, per_partition=per_partition)
    checkpoint, out = tmp_path / "cp", tmp_path / "out"
    log = (tmp_path / "job.log").open("wb")
    job = subprocess.Popen(
        [sys.executable, str(JOB), broker.url, name, "a", str(checkpoint), str(out), "100"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"})
    try:
        # mid-batch: a few batches done, the next one planned (offsets/N) but not committed
        freeze_mid_batch(job.pid, checkpoint, 180, after=2, alive=lambda: job.poll() is None)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        log.close()
    planned, committed = logged(checkpoint, "offsets"), logged(checkpoint, "commits")
    assert committed < planned, "the kill was meant to land mid-batch"

    seed(broker.address, name, ["a"], partitions=2, per_partition=100, create=False,
         first=per_partition)  # more arrives while the job is down
    available_now(lambda: (
        spark.readStream.format("iggy").option("url", broker.url).option("stream", name)
        .option("topics", "a").option("max_messages_per_trigger", "1000").load()
        .writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start(str(out))))

    rows = spark.read.parquet(str(out)).select("partition", "offset", "payload").collect()
    total = 2 * (per_partition + 100)
    assert len(rows) == total  # nothing twice ...
    assert sorted((r.partition, r.offset) for r in rows) == [  # ... and nothing missing
        (p, o) for p in range(2) for o in range(per_partition + 100)]
    assert all(r.payload == payload("a", r.partition, r.offset) for r in rows)
