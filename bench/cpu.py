"""Where the time went: CPU seconds per group of processes (JVM, Python workers, broker,
Postgres, the benchmark itself) during one measured run, read with psutil.

A rate says how fast; this says which process was busy, which is what tells a slow Python
decoder from a busy JVM or a waiting task. Used by :func:`bench.common.paired_rounds`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil
    from pyspark.sql import SparkSession

__all__ = ["CpuMeter", "Finder", "descendants", "process", "spark_groups"]

Finder = Callable[[], Iterable["psutil.Process"]]
ProcessGroups = Mapping[str, "Finder | tuple[Finder, int]"]


class CpuMeter:
    """CPU seconds (user + system) that groups of processes spend between two snapshots.

    A group is a function finding its live processes, optionally with the pid of the process
    that reaps the group's short-lived members (the postmaster for backends, the JVM for the
    per-query Python runner): a member that exits between the snapshots is then counted through
    its reaper's ``children`` CPU times instead of being lost. Processes are told apart by pid,
    so members started during the run count whole.
    """

    def __init__(self, groups: ProcessGroups) -> None:
        self.groups = {name: g if isinstance(g, tuple) else (g, None) for name, g in groups.items()}

    def snapshot(self) -> dict[str, dict[int | str, float]]:
        import psutil

        taken: dict[str, dict[int | str, float]] = {}
        for name, (find, reaper) in self.groups.items():
            entries: dict[int | str, float] = {}
            for member in find():
                with suppress(psutil.Error):
                    times = member.cpu_times()
                    entries[member.pid] = times.user + times.system
            if reaper is not None:
                with suppress(psutil.Error):
                    times = psutil.Process(reaper).cpu_times()
                    entries["reaped"] = times.children_user + times.children_system
            taken[name] = entries
        return taken

    def since(self, before: dict[str, dict[int | str, float]]) -> dict[str, float]:
        """CPU seconds per group since ``before`` (a :meth:`snapshot`)."""
        used = {}
        for name, now in self.snapshot().items():
            then = before.get(name, {})
            total = sum(value - then.get(key, 0.0) for key, value in now.items())
            if self.groups[name][1] is not None:  # exited members are in "reaped" whole
                total -= sum(v for k, v in then.items() if k not in now and k != "reaped")
            used[name] = round(total, 2)
        return used


def descendants(root: int, match: str = "") -> list[psutil.Process]:
    """``root``'s descendant processes whose command line contains ``match``."""
    import psutil

    found = []
    with suppress(psutil.Error):
        for child in psutil.Process(root).children(recursive=True):
            with suppress(psutil.Error):
                if match in " ".join(child.cmdline()):
                    found.append(child)
    return found


def process(pid: int) -> list[psutil.Process]:
    import psutil

    try:
        return [psutil.Process(pid)]
    except psutil.Error:
        return []


def spark_groups(spark: SparkSession) -> dict[str, Finder | tuple[Finder, int]]:
    """Process groups of a local Spark session and this benchmark: the JVM, its Python worker
    processes, the local brokers (child processes of this one) and this process itself."""
    jvm = int(spark.sparkContext._gateway.proc.pid)  # type: ignore[union-attr]
    me = os.getpid()
    return {
        "jvm": lambda: process(jvm),
        "python_workers": (lambda: descendants(jvm, "python"), jvm),
        "broker": lambda: descendants(me, "iggy_local"),
        "bench_process": lambda: process(me),
    }
