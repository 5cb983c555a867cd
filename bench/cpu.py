"""Where the time went: CPU seconds per group of processes (JVM, Python workers, broker,
Postgres, the benchmark itself) during one measured run, read with psutil.

A rate says how fast; this says which process was busy, which is what tells a slow Python
decoder from a busy JVM or a waiting task. Used by :func:`bench.common.paired_rounds`.

A benchmark that runs a second Spark session in a child process (:mod:`bench.spark_peer`)
counts it in the same groups (:func:`spark_groups`'s ``peers``): a contender's ``jvm`` is then
whichever JVM did its work, so the per-contender rows of the report compare like with like
(the idle session's JVM and workers spend next to nothing meanwhile).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil
    from pyspark.sql import SparkSession

__all__ = ["CpuMeter", "Finder", "descendants", "process", "python_groups", "spark_groups"]

Finder = Callable[[], Iterable["psutil.Process"]]
ProcessGroups = Mapping[str, "Finder | tuple[Finder, int | Sequence[int]]"]


class CpuMeter:
    """CPU seconds (user + system) that groups of processes spend between two snapshots.

    A group is a function finding its live processes, optionally with the pid (or pids) of the
    processes that reap the group's short-lived members (the postmaster for backends, the JVM
    for the per-query Python runner): a member that exits between the snapshots is then counted
    through its reaper's ``children`` CPU times instead of being lost. Processes are told apart
    by pid, so members started during the run count whole.
    """

    def __init__(self, groups: ProcessGroups) -> None:
        self.groups: dict[str, tuple[Finder, tuple[int, ...]]] = {
            name: (g[0], _pids(g[1])) if isinstance(g, tuple) else (g, ())
            for name, g in groups.items()}

    def snapshot(self) -> dict[str, dict[int | str, float]]:
        import psutil

        taken: dict[str, dict[int | str, float]] = {}
        for name, (find, reapers) in self.groups.items():
            entries: dict[int | str, float] = {}
            for member in find():
                with suppress(psutil.Error):
                    times = member.cpu_times()
                    entries[member.pid] = times.user + times.system
            for reaper in reapers:
                with suppress(psutil.Error):
                    times = psutil.Process(reaper).cpu_times()
                    entries[f"reaped by {reaper}"] = times.children_user + times.children_system
            taken[name] = entries
        return taken

    def since(self, before: dict[str, dict[int | str, float]]) -> dict[str, float]:
        """CPU seconds per group since ``before`` (a :meth:`snapshot`)."""
        used = {}
        for name, now in self.snapshot().items():
            then = before.get(name, {})
            total = sum(value - then.get(key, 0.0) for key, value in now.items())
            if self.groups[name][1]:  # exited members are in their reaper's "reaped by" whole
                total -= sum(v for k, v in then.items() if k not in now and isinstance(k, int))
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


def _pids(reapers: int | Sequence[int]) -> tuple[int, ...]:
    return (reapers,) if isinstance(reapers, int) else tuple(reapers)


_WORKERS = "pyspark.daemon"  # the daemons and the workers they fork share its command line
_RUNNER = "python_streaming_source_runner"


def python_groups(jvms: Sequence[int]) -> dict[str, tuple[Finder, tuple[int, ...]]]:
    """The Python processes of the Spark sessions whose JVMs are ``jvms``, in two groups:

    * ``python_workers``: the executors' Python workers (and the daemons that fork them), which
      read the partitions and write the batches: the per-change work;
    * ``python_runner``: the driver's Python source runners, one per streaming query, started
      with the query and gone when it stops (counted through the JVM that reaps them, as is
      anything else short-lived the JVM starts): planning and committing offsets, and first
      of all importing pyspark, which Spark puts first on the runner's path as ``pyspark.zip``
      (sources compiled at every import: about 1-1.5 s of CPU per query on these machines).
    """
    def find(match: str) -> Finder:
        return lambda: [p for jvm in jvms for p in descendants(jvm, match)]

    return {"python_workers": (find(_WORKERS), ()),
            "python_runner": (find(_RUNNER), tuple(jvms))}


def spark_groups(
    spark: SparkSession, peers: Sequence[tuple[int, int]] = ()
) -> dict[str, Finder | tuple[Finder, tuple[int, ...]]]:
    """Process groups of a local Spark session and this benchmark: the JVM, its Python
    processes (:func:`python_groups`), the local brokers (child processes of this one) and this
    process itself.

    ``peers``: ``(process pid, JVM pid)`` of other sessions this benchmark runs in child
    processes (:class:`bench.spark_peer.SparkPeer`), counted in the same groups: their JVMs in
    ``jvm``, their Python processes in theirs, their driver processes in ``bench_process``.
    """
    jvms = (int(spark.sparkContext._gateway.proc.pid),  # type: ignore[union-attr]
            *(jvm for _, jvm in peers))
    me = os.getpid()
    drivers = (me, *(pid for pid, _ in peers))
    return {
        "jvm": lambda: [p for jvm in jvms for p in process(jvm)],
        **python_groups(jvms),
        "broker": lambda: descendants(me, "iggy_local"),
        "bench_process": lambda: [p for pid in drivers for p in process(pid)],
    }
