"""What the sink's state in Iggy costs per batch: the control topic's reads and appends, timed.

    python -m bench.bench_sink_state [--repeat 200] [--destinations 50] [--tasks 2]

Against a fresh broker in its own process (``LocalIggy(process=True)``), over TCP with the
real SDK, it times the three things the sink does with its control topic
(:mod:`iggy_spark.sink.control_topic`): a task's start (read the tail back to the newest
ledger, append a ``start``), the driver's commit (read, append the ledger of
``--destinations`` destinations) and a breaker probe's claim (append, read on). Each is
repeated ``--repeat`` times on one query whose topic grows as a running query's does
(``--tasks`` starts and one ledger per batch).
Writes ``bench/results/sink_state.json``: the median and p95 of each, and the state's cost per
batch (tasks run in parallel: one start plus one commit on the critical path).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections import Counter
from typing import Any

from bench import common, iggy

TIMED = ("one call of iggy_spark.sink.control_topic against LocalIggy(process=True) over TCP, "
         "wall clock")


def _quantiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"median_ms": round(statistics.median(ordered) * 1000, 3),
            "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--destinations", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=2)
    args = parser.parse_args(argv)

    from iggy_spark.connection import IggyConnection
    from iggy_spark.iggy_url import IggyUrl
    from iggy_spark.sink.admission import Destination
    from iggy_spark.sink.control_records import LedgerRecord, Start, encode
    from iggy_spark.sink.control_topic import ControlTopic
    from iggy_spark.sink.report import Ledger, TaskReport

    broker = iggy.fresh_broker()
    try:
        control = ControlTopic.of_query(IggyConnection.shared(IggyUrl.parse(broker.url)),
                                        "bench_state", str(uuid.uuid4()), timeout=30)
        control.create()
        ledger = Ledger()
        routed = Counter({f"s/t{i}": 100 for i in range(args.destinations)})
        admitted = [("s", f"t{i}") for i in range(args.destinations)]
        ledger.apply(0, [TaskReport(routed=routed, admitted=admitted)])
        control.append(LedgerRecord(ledger.data))
        times: dict[str, list[float]] = {"task_start": [], "commit": [], "claim": []}
        for batch in range(1, args.repeat + 1):
            for task in range(args.tasks):
                started = time.perf_counter()
                view = control.read()
                control.append(Start(batch, task, 0))
                times["task_start"].append(time.perf_counter() - started)
            assert view is not None
            started = time.perf_counter()
            won = control.claim(view, "run", batch, Destination("s", "t0"))
            times["claim"].append(time.perf_counter() - started)
            assert won
            started = time.perf_counter()
            view = control.read()
            assert view is not None
            ledger = Ledger(view.ledger)
            ledger.apply(batch, [TaskReport(routed=routed)])
            control.append(LedgerRecord(ledger.data))
            times["commit"].append(time.perf_counter() - started)
        ledger_bytes = len(encode(LedgerRecord(ledger.data)))
    finally:
        broker.stop()
    results: dict[str, Any] = {name: _quantiles(seconds) for name, seconds in times.items()}
    per_batch = results["task_start"]["median_ms"] + results["commit"]["median_ms"]
    summary = (f"sink state in Iggy [{args.destinations} destinations, ledger "
               f"{ledger_bytes:,} bytes]: task start {results['task_start']['median_ms']} ms, "
               f"commit {results['commit']['median_ms']} ms, claim "
               f"{results['claim']['median_ms']} ms (medians); about {per_batch:.1f} ms per "
               "batch on the critical path")
    return common.publish("sink_state", {
        "benchmark": "iggy_routed query state in its control topic: per-batch operations",
        "config": {"repeat": args.repeat, "destinations": args.destinations,
                   "tasks": args.tasks, "timed": TIMED, "ledger_bytes": ledger_bytes,
                   "broker": "LocalIggy(process=True)"},
        "results": results,
        "per_batch_critical_path_ms": round(per_batch, 3),
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
