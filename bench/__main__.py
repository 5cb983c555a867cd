"""``python -m bench``: run every benchmark, then write the summary, the table and the plots.

    python -m bench [--quick] [--only source,sink] [--skip decoders]

Each benchmark runs in its own process (its own SparkSession, Postgres and brokers), one after
the other, so one benchmark's memory or JIT state never colours the next one's numbers, and a
failure in one does not lose the others. ``--quick`` passes small sizes (a smoke run of a few
minutes) and writes to a scratch directory unless ``--results`` says otherwise; the default
sizes are the ones docs/performance.md quotes. The exit status is non-zero if any
benchmark failed; the report is built from whatever results exist.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from bench.common import RESULTS_ENV, log, results_dir
from bench.report import build

# name -> (full-run arguments, --quick arguments)
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "decoders": ([], ["--rows", "5000", "--repeat", "1"]),
    "broker": ([], ["--batches", "20"]),
    "source": ([], ["--changes", "20000", "--rounds", "1", "--sweep", "1MB"]),
    "sink": ([], ["--messages", "20000", "--rounds", "1", "--destinations", "1,50"]),
    "e2e": ([], ["--changes", "20000", "--rounds", "1"]),
    "polling": ([], ["--rows", "20000", "--rounds", "1"]),
    "iggy_source": ([], ["--messages", "20000", "--rounds", "1"]),
    "snapshot": ([], ["--rows", "20000", "--rounds", "1", "--chunk-rows", "5000",
                      "--memory-sizes", "10000,100000"]),
    "latency": ([], ["--rates", "1000", "--seconds", "10"]),
    "backfill": ([], ["--rows", "20000", "--rounds", "1", "--chunk-rows", "2000",
                      "--seconds", "5"]),
    "memory": ([], ["--sizes", "10000,100000"]),
    "delivery": ([], ["--messages", "20000", "--rounds", "1"]),
    "sink_state": ([], ["--repeat", "20"]),
    # The fault campaign runs about 45 minutes (its own time budget, then the verdict).
    "reliability": ([], ["--faults", "3", "--exception-rounds", "1", "--off-faults", "1",
                         "--inject-minutes", "4"]),
    "remote_checkpoint": ([], ["--kills", "1", "--changes", "500"]),
    "busy_db": ([], ["--changes", "4000", "--rounds", "1"]),
    "row_format": ([], ["--changes", "4000", "--rounds", "1"]),
    # the pure-Python path against the last revision before the compiled core (a git worktree)
    "pure_path": ([], ["--changes", "20000", "--rounds", "1"]),
    "held_back": ([], ["--batch", "10000", "--behind", "0,100000", "--rounds", "2"]),
    "snapshot_faults": ([], ["--rows", "3000", "--kills", "1", "--chunk-rows", "300",
                             "--max-rows-per-trigger", "300"]),
    # 3,000/s is what 2 cores sustain with generator, Postgres, Spark and broker on them.
    "soak": (["--rate", "3000"], ["--seconds", "60", "--warmup", "20", "--rate", "1000"]),
}
TIMEOUT_SECONDS = 20 * 60  # per benchmark
LONG_TIMEOUTS = {"reliability": 75 * 60}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--skip", default="", help="comma-separated benchmark names")
    parser.add_argument("--results", default=None,
                        help="results directory (default bench/results; a scratch one with "
                        "--quick)")
    args = parser.parse_args(argv)
    if args.results or args.quick:
        os.environ[RESULTS_ENV] = args.results or tempfile.mkdtemp(prefix="bench-quick-")
    chosen = [n for n in (args.only.split(",") if args.only else BENCHMARKS) if n]
    skipped = set(filter(None, args.skip.split(",")))
    unknown = set(chosen) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; known: {', '.join(BENCHMARKS)}")

    failed = []
    started = time.monotonic()
    for name in chosen:
        if name in skipped:
            continue
        full, quick = BENCHMARKS[name]
        command = [sys.executable, "-m", f"bench.bench_{name}", *(quick if args.quick else full)]
        log(f"running {' '.join(command[1:])}")
        began = time.monotonic()
        try:
            code = subprocess.run(
                command, timeout=LONG_TIMEOUTS.get(name, TIMEOUT_SECONDS)).returncode
        except subprocess.TimeoutExpired:
            code = -1
        log(f"{name}: {'ok' if code == 0 else f'FAILED ({code})'} in "
            f"{time.monotonic() - began:.0f}s")
        if code != 0:
            failed.append(name)
    figures = build()
    log(f"all done in {time.monotonic() - started:.0f}s; wrote latest.json, results.md and "
        f"plots in {results_dir()}")
    headline = {k: figures[k] for k in ("source_ratio", "source_raw_ratio",
                                        "source_compiled_vs_python", "sink_ratio", "e2e_ratio",
                                        "e2e_compiled_vs_python", "rss_ratio_1m_vs_100k",
                                        "latency_p50_s", "latency_p99_s")}
    print(" ".join(f"{k}={v}" for k, v in headline.items()))
    if failed:
        log(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
