"""Peak memory of Spark's Python workers while ``pg_cdc`` reads one huge transaction.

    python -m bench.bench_memory [--sizes 100000,1000000] [--interval 0.02]

Every row of a transaction needs the commit's LSN, which comes last, so a reader must hold a
transaction until its COMMIT: ``pg_cdc`` keeps the first ``spill_rows`` changes in memory and
pickles the rest to a temporary file (see ``postgres_cdc_source.assembly``). This benchmark
checks that a 1,000,000-change transaction costs about as much memory as a 100,000-change one.

Per size: a new slot, then one transaction of that many inserts, then ``pg_cdc`` → ``noop``
(``trigger(availableNow=True)``) while a thread samples, every ``--interval`` seconds, the RSS of
every Python process below the JVM (psutil): ``pyspark.daemon``, the workers it forks (one of
them runs ``read``), the driver-side ``python_streaming_source_runner``. Reported: the largest
peak of a forked worker (the reading worker; the headline) and the peak of all of them summed.
Sizes run in the given order in one Spark session (workers are reused, as in a long-running
stream), after a small warm-up read.
Writes ``bench/results/memory.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from typing import Any

from bench import cdc
from bench.common import Measure, log, publish, run_available_now, spark_session
from bench.cpu import descendants
from iggy_spark_testing.harness import postgres
from postgres_cdc_source.option_docs import OPTION_DOCS

TABLE = "mem"
TIMED = "pg_cdc -> noop, first micro-batch start to last micro-batch end"


class RssSampler(threading.Thread):
    """Samples the RSS of a JVM's Python descendants until stopped: per process and summed."""

    def __init__(self, jvm: int, interval: float) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.jvm, self.interval = jvm, interval
        self.peaks: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self.peak_total = 0
        self.samples = 0
        self._done = threading.Event()

    def sample(self) -> int:
        import psutil

        total = 0
        for process in descendants(self.jvm, "python"):
            try:
                rss = int(process.memory_info().rss)
                if process.pid not in self.roles:
                    self.roles[process.pid] = _role(process)
            except psutil.Error:
                continue
            total += rss
            self.peaks[process.pid] = max(rss, self.peaks.get(process.pid, 0))
        self.peak_total = max(self.peak_total, total)
        self.samples += 1
        return total

    def peak_of(self, role: str) -> int:
        return max((rss for pid, rss in self.peaks.items() if self.roles.get(pid) == role),
                   default=0)

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self.join()


def _role(process: Any) -> str:
    """``worker`` (forked by the daemon: runs tasks, so ``read``), ``daemon``, or the module a
    JVM-started Python process runs (e.g. the driver-side ``python_streaming_source_runner``)."""
    command = process.cmdline()
    module = command[command.index("-m") + 1] if "-m" in command else " ".join(command[:2])
    if module == "pyspark.daemon":
        parent = process.parent()
        return "worker" if parent is not None and "pyspark.daemon" in parent.cmdline() else "daemon"
    return module.rsplit(".", 1)[-1]


def read_transaction(spark: Any, conn: Any, dsn: str, rows: int, interval: float,
                     first_id: int) -> dict[str, Any]:
    """Write one transaction of ``rows`` inserts behind a new slot, read it, sample RSS."""
    slot = f"mem_{rows}"
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    with conn.transaction():
        cdc.insert_rows(conn, TABLE, first_id, first_id + rows - 1)
    jvm = int(spark.sparkContext._gateway.proc.pid)
    sampler = RssSampler(jvm, interval)
    idle = sampler.sample()
    sampler.peaks.clear()
    sampler.start()
    checkpoint = tempfile.mkdtemp(prefix="bench-memory-")
    options = {"dsn": dsn, "slot": slot, "publication": TABLE, "create_slot": "false"}
    try:
        measure: Measure = run_available_now(
            lambda: spark.readStream.format("pg_cdc").options(**options).load()
            .writeStream.format("noop").option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start(), TIMED)
    finally:
        sampler.stop()
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    if measure.items != rows:
        raise AssertionError(f"pg_cdc read {measure.items} changes, not {rows}")
    result: dict[str, Any] = {
        "changes": rows,
        "peak_reader_rss_bytes": sampler.peak_of("worker"),
        "peak_total_rss_bytes": sampler.peak_total,
        "idle_total_rss_bytes": idle,
        "peak_rss_bytes_by_process": [
            {"pid": pid, "role": sampler.roles.get(pid, "?"), "peak": peak}
            for pid, peak in sorted(sampler.peaks.items())],
        "samples": sampler.samples,
        "seconds": round(measure.seconds, 3),
        "changes_per_second": round(measure.rate),
    }
    log(f"memory {rows:,} changes in one transaction: reader peak "
        f"{result['peak_reader_rss_bytes'] / 2**20:.0f} MiB, all workers "
        f"{result['peak_total_rss_bytes'] / 2**20:.0f} MiB ({measure.seconds:.1f}s)")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--interval", type=float, default=0.02)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    defaults = {d.name: d.default for d in OPTION_DOCS if d.name in ("spill_rows", "batch_rows")}

    with postgres() as pg, pg.connect() as conn:
        cdc.create_table(conn, TABLE)
        conn.execute(f"CREATE PUBLICATION {TABLE} FOR TABLE {TABLE}")
        spark = spark_session("bench-memory")
        read_transaction(spark, conn, pg.dsn, 1000, args.interval, 1)  # warm-up
        next_id = 1001
        results = []
        for size in sizes:
            results.append(read_transaction(spark, conn, pg.dsn, size, args.interval, next_id))
            next_id += size
        spark.stop()

    ratio = results[-1]["peak_reader_rss_bytes"] / results[0]["peak_reader_rss_bytes"]
    summary = (f"memory: reading worker peak RSS {results[-1]['peak_reader_rss_bytes'] / 2**20:.0f}"
               f" MiB for a {sizes[-1]:,}-change transaction vs "
               f"{results[0]['peak_reader_rss_bytes'] / 2**20:.0f} MiB for {sizes[0]:,} "
               f"= {ratio:.2f}x [spill_rows={defaults['spill_rows']}, "
               f"batch_rows={defaults['batch_rows']}]")
    return publish("memory", {
        "benchmark": "peak RSS of Spark's Python workers, pg_cdc reading one big transaction",
        "config": {"sizes": sizes, "interval_seconds": args.interval, "options": defaults,
                   "plugin": "pgoutput"},
        "results": {"by_size": results, "ratio_last_vs_first": round(ratio, 3)},
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
