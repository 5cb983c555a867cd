"""What every benchmark shares: the machine record, side-by-side rounds, Spark, results files.

These machines are small and noisy (2 cores shared with other work), so a benchmark never
reports a rate alone: it runs the contenders of one comparison *interleaved*, round after round
(A, B, A, B, ...), and reports the median of the per-round ratios next to the median rates. A
slow moment then hits both sides of a round rather than one side of the comparison.

What is timed is said per contender in :class:`Measure.timed`. For a Spark streaming query it is
the span from the start of its first micro-batch that had data to the end of its last one,
taken from Spark's own progress reports (:func:`streaming_measure`): JVM start-up and query
start-up are excluded, and reported separately as ``wall_seconds``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.cpu import CpuMeter, descendants, process, spark_groups

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "RESULTS_ENV",
    "Contender",
    # re-exported from bench.cpu, where they live:
    "CpuMeter",
    "Measure",
    "compared",
    "descendants",
    "log",
    "machine",
    "paired_rounds",
    "process",
    "publish",
    "ratio",
    "read_result",
    "read_to_noop",
    "results_dir",
    "run_available_now",
    "spark_groups",
    "spark_session",
    "stopwatch",
    "streaming_measure",
    "summarize",
    "write_result",
]

RESULTS_ENV = "BENCH_RESULTS_DIR"


def results_dir() -> Path:
    """Where results go: ``$BENCH_RESULTS_DIR`` when set (``python -m bench --quick`` points it
    at a scratch directory so a smoke run never overwrites real figures), else bench/results."""
    return Path(os.environ.get(RESULTS_ENV) or Path(__file__).resolve().parent / "results")


# Spark's Python workers must run this interpreter (the venv's), whatever started the bench.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def log(message: str) -> None:
    """Progress on stderr, so stdout keeps only each benchmark's summary line."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _package(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """The machine a result was measured on; stored with every result file."""
    return {
        "cores": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "cpu": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "packages": {p: _package(p) for p in ("pyspark", "pyarrow", "psycopg", "apache-iggy")},
        "measured_at": datetime.now().astimezone().isoformat(timespec="seconds"),
    }


@dataclass
class Measure:
    """One timed run of one contender: ``items`` (changes, messages) in ``seconds``."""

    items: int
    seconds: float
    timed: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """``with stopwatch() as elapsed:`` ... ``elapsed()`` seconds since the block began."""
    started = time.perf_counter()
    yield lambda: time.perf_counter() - started


Contender = Callable[[int], Measure]
"""Runs once for the given round number (so it can use fresh slots or streams) and measures."""


def paired_rounds(
    contenders: Mapping[str, Contender], rounds: int, label: str = "", *, warm_up: bool = False,
    cpu: CpuMeter | None = None, setup: Callable[[int], None] | None = None,
) -> dict[str, list[Measure]]:
    """Run every contender once per round, interleaved, in the mapping's order.

    ``warm_up`` first runs one full round that is thrown away: the JVM compiles its hot paths
    only after thousands of rows, and Python workers start on first use, so a first run
    measures start-up, not speed. With ``cpu``, each measure gets the CPU seconds every process
    group spent during it (``extra["cpu_seconds"]``): where the time went. Each measure also
    records the 1-minute load average before it ran (other work on the machine shows there).
    ``setup(round)`` runs before each round, outside any measurement (e.g. a fresh broker).
    """
    runs: dict[str, list[Measure]] = {name: [] for name in contenders}
    for number in range(-1 if warm_up else 0, rounds):
        if setup is not None:
            setup(number)
        for name, contender in contenders.items():
            before = cpu.snapshot() if cpu else None
            load = os.getloadavg()[0]
            measure = contender(number)
            measure.extra["load_1m_before"] = round(load, 2)
            if cpu and before is not None:
                measure.extra["cpu_seconds"] = cpu.since(before)
            what = "warm-up" if number < 0 else f"round {number + 1}/{rounds}"
            log(f"{label} {what} {name}: {measure.items:,} in {measure.seconds:.2f}s = "
                f"{measure.rate:,.0f}/s {measure.extra.get('cpu_seconds', '')}")
            if number >= 0:
                runs[name].append(measure)
    return runs


def summarize(measures: Sequence[Measure]) -> dict[str, Any]:
    """Median rate and every run's time, plus what was timed (the same for every run)."""
    rates = [m.rate for m in measures]
    summary: dict[str, Any] = {
        "items": measures[0].items,
        "per_second": round(statistics.median(rates)),
        "runs_seconds": [round(m.seconds, 3) for m in measures],
        "timed": measures[0].timed,
    }
    extras = [m.extra for m in measures if m.extra]
    if extras:
        summary["runs_extra"] = extras
    cpu = [m.extra["cpu_seconds"] for m in measures if "cpu_seconds" in m.extra]
    if cpu:
        summary["median_cpu_seconds"] = {
            group: round(statistics.median(c[group] for c in cpu), 2) for group in cpu[0]}
    return summary


def ratio(numerator: Sequence[Measure], denominator: Sequence[Measure]) -> dict[str, Any]:
    """Median of the per-round rate ratios (paired by round), with every round's ratio."""
    per_round = [a.rate / b.rate for a, b in zip(numerator, denominator, strict=True)]
    return {"median": round(statistics.median(per_round), 3),
            "rounds": [round(r, 3) for r in per_round]}


def compared(runs: Mapping[str, Sequence[Measure]], project: str = "spark",
             baselines: Sequence[str] = ("handwritten",)) -> dict[str, Any]:
    """Every contender summarized, plus ``ratio_vs_<baseline>`` of ``project`` to each one."""
    return {
        **{name: summarize(measures) for name, measures in runs.items()},
        **{f"ratio_vs_{base}": ratio(runs[project], runs[base]) for base in baselines},
    }


def publish(name: str, report: dict[str, Any]) -> int:
    """Write ``bench/results/<name>.json`` (machine added), print its summary line; exit 0."""
    write_result(name, report)
    print(report["summary"])
    return 0


def write_result(name: str, report: dict[str, Any]) -> Path:
    """Write ``<results>/<name>.json`` with the machine record added."""
    results_dir().mkdir(parents=True, exist_ok=True)
    path = results_dir() / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **report}, indent=2) + "\n")
    return path


def read_result(name: str) -> dict[str, Any] | None:
    path = results_dir() / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def spark_session(app: str, extra: Mapping[str, str] | None = None) -> SparkSession:
    """A ``local[2]`` session configured like the test suite's, quiet, for one benchmark."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]").appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _instant(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _has_data(progress: Mapping[str, Any]) -> bool:
    """Whether a micro-batch had input: its offsets moved (``numInputRows`` is not reliable
    when the sink is a Python data source too: Spark sometimes reports 0 for a full batch)."""
    return int(progress["numInputRows"]) > 0 or any(
        source.get("startOffset") != source.get("endOffset") for source in progress["sources"])


PHASES = ("latestOffset", "queryPlanning", "addBatch", "triggerExecution")
"""The phases of a micro-batch's ``durationMs`` a measure records per batch."""


def streaming_measure(
    query: StreamingQuery, wall_seconds: float, timed: str, items: int | None = None
) -> Measure:
    """Rows and time of a finished query, from its progress reports.

    Timed: first data batch's trigger start to the last data batch's end (``triggerExecution``
    included); batches whose offsets did not move do not count. ``items``: how many rows the
    caller knows arrived (counted at the destination); by default Spark's ``numInputRows``.
    ``extra["durations_ms"]`` holds, per phase of :data:`PHASES`, each data batch's
    milliseconds: where a batch's time went (the source's planning is ``latestOffset``, its
    read ``addBatch``).
    """
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"streaming query failed: {error}")
    batches = [p for p in query.recentProgress if _has_data(p)]
    rows = sum(int(p["numInputRows"]) for p in batches) if items is None else items
    if not batches or not rows:
        raise RuntimeError("the streaming query read no rows")
    first, last = batches[0], batches[-1]
    end = _instant(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000
    seconds = end - _instant(first["timestamp"])
    return Measure(rows, seconds, timed, {
        "batches": len(batches),
        "wall_seconds": round(wall_seconds, 3),
        "first_batch_seconds": round(first["durationMs"]["triggerExecution"] / 1000, 3),
        "durations_ms": {phase: [int(p["durationMs"].get(phase, 0)) for p in batches]
                         for phase in PHASES},
    })


def run_available_now(
    start: Callable[[], StreamingQuery], timed: str, items: int | None = None
) -> Measure:
    """Start a ``trigger(availableNow=True)`` query, wait for it and measure it."""
    with stopwatch() as elapsed:
        query = start()
        query.awaitTermination()
    return streaming_measure(query, elapsed(), timed, items)


def read_to_noop(
    load: Callable[[], DataFrame], timed: str, expected: int, what: str
) -> Measure:
    """One ``availableNow`` run of the streaming DataFrame ``load()`` into Spark's ``noop``
    sink on a fresh checkpoint, measured; it must read exactly ``expected`` rows."""
    checkpoint = tempfile.mkdtemp(prefix="bench-noop-")

    def start() -> StreamingQuery:
        return (load().writeStream.format("noop").option("checkpointLocation", checkpoint)
                .trigger(availableNow=True).start())

    measure = run_available_now(start, timed)
    if measure.items != expected:
        raise AssertionError(f"{what} read {measure.items}, not {expected}")
    return measure
