"""A killable pipeline job for the fault-injection tests and benchmarks.

:class:`PipelineJob` runs ``python -m pg_to_iggy.pipeline`` as its own process group, so
:meth:`PipelineJob.kill` SIGKILLs the Python driver, the JVM and Spark's Python workers at once:
the crash a real deployment sees when its machine or container dies. :func:`catch_up_and_stop`
ends a run cleanly, :func:`abandon` whatever happened. The job's checkpoint is read with
:mod:`iggy_spark_testing.chaos`, which knows nothing of the job.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from iggy_spark_testing.chaos import (
    Batch,
    committed_end,
    flush_lsn,
    read_checkpoint,
    wait_until,
)
from iggy_spark_testing.workload import BackgroundRun, Workload

__all__ = ["PipelineJob", "abandon", "catch_up_and_stop"]


class PipelineJob:
    """``python -m pg_to_iggy.pipeline`` as a child process group that can be SIGKILLed whole.

    Output goes to ``log_path`` (appended across restarts). Spark's web UI is off, so several
    jobs and a test session can run side by side. ``spark_conf`` adds ``--conf`` settings (a
    remote checkpoint's filesystem, e.g. :meth:`~iggy_spark_testing.s3.SeaweedS3.spark_conf`).
    """

    def __init__(
        self,
        *,
        dsn: str,
        slot: str,
        url: str,
        checkpoint: str | os.PathLike[str],
        log_path: str | os.PathLike[str],
        source: Mapping[str, str] | None = None,
        sink: Mapping[str, str] | None = None,
        trigger_interval: str | None = None,
        master: str = "local[2]",
        driver_memory: str = "1g",
        spark_conf: Mapping[str, str] | None = None,
    ) -> None:
        self.checkpoint = Path(checkpoint)
        self.log_path = Path(log_path)
        self.command = [
            sys.executable, "-m", "pg_to_iggy", "--master", master, "--dsn", dsn,
            "--slot", slot, "--url", url, "--checkpoint", str(checkpoint),
        ]
        for flag, options in (("--source", source), ("--sink", sink)):
            for key, value in (options or {}).items():
                self.command += [flag, f"{key}={value}"]
        if trigger_interval:
            self.command += ["--trigger-interval", trigger_interval]
        self.env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYSPARK_SUBMIT_ARGS": shlex.join([
                "--driver-memory", driver_memory,
                *(arg for key, value in {"spark.ui.enabled": "false",
                                         "spark.sql.shuffle.partitions": "2",
                                         **(spark_conf or {})}.items()
                  for arg in ("--conf", f"{key}={value}")),
                "pyspark-shell"]),
        }
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.started_at: float | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.running:
            raise RuntimeError("the pipeline job is already running")
        self._log = self.log_path.open("ab")
        self._log.write(f"\n=== start at {time.time():.3f}\n".encode())
        self._log.flush()
        self._process = subprocess.Popen(
            self.command, env=self.env, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.started_at = time.time()

    def kill(self) -> float:
        """SIGKILL the whole group (driver, JVM, Python workers); returns when it is gone."""
        process = self._require()
        killed_at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        self._reap(process)
        return killed_at

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM the driver (the job stops its query between batches); its exit status."""
        process = self._require()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            code = -signal.SIGKILL
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever the driver left behind
        self._reap(process)
        return code

    def wait_for_batch_after(self, moment: float, timeout: float, *, committed: bool) -> float:
        """Wait until a batch is planned (or, with ``committed``, committed) after ``moment``;
        returns when that happened (``time.time()``)."""

        def when(batch: Batch) -> float:
            return (batch.committed_at or 0.0) if committed else batch.planned_at

        def times() -> list[float]:
            return [t for t in map(when, read_checkpoint(self.checkpoint)) if t > moment]

        what = "a committed batch" if committed else "a planned batch"
        wait_until(lambda: bool(times()), timeout, what, alive=lambda: self.running)
        return min(times())

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _require(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError("the pipeline job was never started")
        return self._process

    def _reap(self, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        wait_until(lambda: not _group_alive(process.pid), 30, "the job's processes to exit")
        if self._log is not None:
            self._log.close()
            self._log = None


def catch_up_and_stop(
    job: PipelineJob, dsn: str, checkpoint: str | os.PathLike[str], workload: BackgroundRun,
    stop: threading.Event, timeout: float = 120.0,
) -> None:
    """Stop the background ``workload`` (``stop`` set), wait until ``job`` has committed
    everything written, then stop the job; an exit code other than 0 fails with its log's tail.
    """
    stop.set()
    workload.join(60)
    target = flush_lsn(dsn)
    wait_until(lambda: (committed_end(checkpoint) or 0) >= target, timeout,
               "the job to catch up", alive=lambda: job.running)
    code = job.stop()
    if code != 0:
        raise AssertionError(f"the job exited with {code}:\n{job.log_tail()}")


def abandon(job: PipelineJob, stop: threading.Event, work: Workload) -> None:
    """What a test leaves behind, whatever happened: the workload stopped and closed, the job
    killed if it still runs."""
    stop.set()
    if job.running:
        job.kill()
    work.close()


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. Zombies do not count: orphans of a killed
    job are re-parented to PID 1, which in containers may never reap them."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # exited while we looked
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
