"""Spark as users deploy it, from the pip package: a standalone cluster and a Spark Connect server.

Both run as child process groups (their own JVMs) and are killed whole on exit, so a failed test
leaves nothing behind. Readiness is a TCP connect to the service's port, not a sleep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark

from iggy_spark_testing.harness import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]
"""The checkout: workers on a disk of their own still see it (its venv and sources)."""


def _env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(tmp / "logs"),
        "SPARK_PID_DIR": str(tmp / "pids"),
        "SPARK_WORKER_DIR": str(tmp / "work"),
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_CONNECT_MODE": "0",  # spark-submit starts a classic JVM, not a Connect client
    }


def _wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text()[-3000:]
            raise RuntimeError(f"{what} exited with {process.returncode}: {tail}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen on {port} within 120 s: {log.read_text()[-3000:]}")


@contextlib.contextmanager
def _processes(tmp: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def _spawn(args: list[str], tmp: Path, log_name: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / log_name
    out = log.open("wb")
    process = subprocess.Popen(
        args, env=_env(tmp), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    return process, log


def _on_own_disk(command: list[str], work_dir: Path) -> list[str]:
    """``command`` in its own mount namespace with an empty tmpfs over ``/tmp`` (and so over
    the test's files, the driver's local checkpoint and scratch) and its work dir created
    there: a host that shares no disk with the driver, only the network and the installed
    software. The software stays: a checkout or venv that lives under ``/tmp`` (a CI clone) is
    bound back into the empty ``/tmp``, nothing else of it."""
    keep = sorted({str(p) for p in (ROOT, Path(sys.prefix)) if p.is_relative_to("/tmp")})
    script = (
        'mount --bind /tmp /mnt && mount -t tmpfs tmpfs /tmp && IFS=: && '
        'for d in $KEEP; do mkdir -p "$d" && mount --bind "/mnt${d#/tmp}" "$d"; done && '
        'umount -l /mnt && mkdir -p "$0" && exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "env", f"KEEP={':'.join(keep)}",
            "sh", "-c", script, str(work_dir), *command]


@contextlib.contextmanager
def standalone_cluster(
    tmp: Path, *, workers: int = 2, private_disks: bool = False
) -> Iterator[str]:
    """A Spark standalone master and ``workers`` workers (one core, 1 GiB each): its URL.

    ``private_disks`` runs each worker (and so its executors and their Python workers) as if
    on its own host: its own loopback address, and see :func:`_on_own_disk` (root only;
    ``tmp`` must be under ``/tmp``).
    """
    tmp.mkdir(parents=True, exist_ok=True)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = free_port()
    with _processes(tmp) as started:
        master, log = _spawn(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(free_port())],
            tmp, "master.log",
        )
        started.append(master)
        _wait_for_port(port, master, "the Spark master", log)
        url = f"spark://127.0.0.1:{port}"
        logs = []
        for index in range(workers):
            work_dir = tmp / f"work{index}"
            # Spark reads a same-host executor's shuffle files straight from its disk: a worker
            # with a disk of its own needs an address of its own too (any of 127/8 is local).
            host = f"127.0.0.{index + 2}" if private_disks else "127.0.0.1"
            command = [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host",
                       host, "--cores", "1", "--memory", "1g", "--webui-port",
                       str(free_port()), "--work-dir", str(work_dir)]
            if private_disks:
                command = _on_own_disk(command, work_dir)
            worker, worker_log = _spawn(command, tmp, f"worker{index}.log")
            started.append(worker)
            logs.append(worker_log)
        deadline = time.monotonic() + 120
        while not all("Successfully registered with master" in p.read_text() for p in logs):
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not register: " + logs[0].read_text()[-3000:])
            time.sleep(0.2)
        yield url


@contextlib.contextmanager
def connect_server(tmp: Path) -> Iterator[str]:
    """A Spark Connect server (local[2]): its URL.

    Started as ``sbin/start-connect-server.sh --wait`` starts it, by ``spark-submit``: pyspark
    4.2's package does not ship that script.
    """
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with _processes(tmp) as started:
        server, log = _spawn(
            [str(SPARK_HOME / "bin" / "spark-submit"), "--class",
             "org.apache.spark.sql.connect.service.SparkConnectServer",
             "--name", "Spark Connect server", "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
             "--conf", f"spark.pyspark.python={sys.executable}"],
            tmp, "connect.log",
        )
        started.append(server)
        _wait_for_port(port, server, "the Spark Connect server", log)
        yield f"sc://127.0.0.1:{port}"
