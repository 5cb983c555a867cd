"""``snapshot=initial`` of 100,000 rows under writes, with the driver ``kill -9``-ed twice during
the snapshot; the state rebuilt from Iggy must equal the tables.

    python -m bench.bench_snapshot_faults [--rows 100000] [--kills 2] [--rate 100]
        [--chunk-rows 5000] [--max-rows-per-trigger 10000] [--seed 31]

The heavy variant of tests/test_snapshot_e2e.py (one kill, a few hundred rows). One throwaway
Postgres, one local Iggy broker in its own process, the pipeline job (``python -m pg_to_iggy``,
``local[2]``) as a child process group. A seeded workload first inserts ``--rows`` rows into its
three tables (hostile values, TOAST, composite keys, one table under ``REPLICA IDENTITY FULL``),
then the job starts with ``snapshot=initial`` (``--chunk-rows`` per chunk, so many chunks,
``--max-rows-per-trigger`` per batch, so many batches) and the workload goes on inserting,
updating (keys too) and deleting the same keys at ``--rate`` changes per second. ``--kills``
times: once the job has committed a batch since its (re)start, a random 0.2-1.5 s later it is
SIGKILLed whole (driver, JVM, workers: the exported snapshot dies with it) and restarted from
the checkpoint; each kill must land while the snapshot is still running (recorded, and the
verdict fails otherwise). Then the writes stop, the job catches up and stops, every message is
read back over the SDK and replayed as a consumer does (:mod:`iggy_spark_testing.replay`,
upsert per key, changes in commit order), and the result is compared with the tables row by
row: ``missing`` (a row of the table the messages lack), ``extra`` (a row the messages keep that
the table does not have), ``wrong`` (a row whose values differ).

Writes ``bench/results/snapshot_faults.json``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import log, write_result
from iggy_local import LocalIggy
from iggy_spark_testing.chaos import (
    PipelineJob,
    committed_end,
    flush_lsn,
    last_offset_in_snapshot,
    read_checkpoint,
    slot_exists,
    snapshot_finished,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.oracle import read_back, read_tables
from iggy_spark_testing.replay import replay
from iggy_spark_testing.workload import Mix, Workload

NAME = "snapfaults"
SINK = {"topic_defaults.partitions_count": "3"}


def populate(work: Workload, rows: int) -> float:
    """Insert ``rows`` rows with the workload (so its later changes hit the same keys)."""
    started = time.monotonic()
    work.mix = Mix(insert=1.0, update=0.0, delete=0.0, rollback=0.0, multi_row=1.0)
    work.run(changes=rows)
    work.mix = Mix()
    return time.monotonic() - started


def compare(model: dict[str, dict[Any, Any]], tables: dict[str, dict[Any, Any]]
            ) -> dict[str, dict[str, int]]:
    """Per table: rows in the table, and the missing / extra / wrong rows of the replay."""
    out = {}
    for name, table in tables.items():
        rebuilt = model.get(name, {})
        out[name] = {
            "rows": len(table),
            "missing": sum(1 for k in table if k not in rebuilt),
            "extra": sum(1 for k in rebuilt if k not in table),
            "wrong": sum(1 for k, row in table.items() if k in rebuilt and rebuilt[k] != row),
        }
    return out


def explain_wrong(model: dict[str, dict[Any, Any]], tables: dict[str, dict[Any, Any]],
                  messages: list[dict[str, Any]], specs: dict[str, Any]) -> list[dict[str, Any]]:
    """For each wrong row: the columns that differ, and what the messages held for its key
    (whether a snapshot read had it, and the ops and ``unchanged`` lists of its changes)."""
    import orjson

    def pk(table: str, text: Any) -> Any:
        values = orjson.loads(text) if isinstance(text, str) else text
        spec = specs[table]
        if not values or any(k not in values for k in spec.primary_key):
            return None
        return spec.key_of(values)

    history: dict[tuple[str, Any], list[str]] = {}
    for m in messages:
        table = m.get("table")
        if table not in specs:
            continue
        for k in {pk(table, m.get("key")), pk(table, m.get("after"))} - {None}:
            unchanged = ",".join(m.get("unchanged") or ())
            history.setdefault((table, k), []).append(
                m["op"] + (f"(unchanged {unchanged})" if unchanged else "")
                + ("" if m["op"] == "read" else f"@{m.get('commit_lsn')}"))
    out = []
    for name, table in tables.items():
        for key, row in table.items():
            rebuilt = model.get(name, {}).get(key)
            if rebuilt is None or rebuilt == row:
                continue
            out.append({
                "table": name, "key": repr(key),
                "columns": {c: [repr(rebuilt.get(c))[:40], repr(row.get(c))[:40]]
                            for c in row if rebuilt.get(c) != row.get(c)},
                "messages": history.get((name, key), [])[-8:],
            })
    return out[:20]


def run(args: argparse.Namespace, pg: LocalPostgres, broker: LocalIggy, root: Path
        ) -> dict[str, Any]:
    work = Workload(pg.dsn, NAME, seed=args.seed)
    work.setup()
    populate_seconds = populate(work, args.rows)
    log(f"populated {args.rows:,} rows in {populate_seconds:.0f}s")
    checkpoint = root / "checkpoint"
    job = PipelineJob(
        dsn=pg.dsn, slot=NAME, url=broker.url, checkpoint=checkpoint,
        log_path=root / "job.log", sink=SINK,
        source={"snapshot": "initial", "include_tables": f"{NAME}\\..*", "topic_from": "table",
                "partition_key_from": "id", "default_stream": NAME,
                "snapshot_chunk_rows": str(args.chunk_rows),
                "snapshot_max_rows_per_trigger": str(args.max_rows_per_trigger)},
    )
    rng = random.Random(args.seed)
    stop = threading.Event()
    kills: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        job.start()
        wait_until(lambda: slot_exists(pg.dsn, NAME), 300, "the slot", alive=lambda: job.running)
        writer = work.start(stop=stop, rate=args.rate)
        for number in range(args.kills):
            committed = job.wait_for_batch_after(job.started_at or 0, 300, committed=True)
            time.sleep(max(0.0, committed + rng.uniform(0.2, 1.5) - time.time()))
            job.kill()
            batches = read_checkpoint(checkpoint)
            kills.append({
                "at_seconds": round(time.monotonic() - started, 1),
                "batches_planned": len(batches),
                "batches_committed": sum(1 for b in batches if b.committed_at is not None),
                "during_snapshot": last_offset_in_snapshot(checkpoint),
                "changes_committed_by_then": work.changes,
            })
            log(f"kill {number + 1}/{args.kills}: {kills[-1]}")
            job.start()
        wait_until(lambda: snapshot_finished(checkpoint), 900, "the snapshot to finish",
                   alive=lambda: job.running)
        snapshot_seconds = time.monotonic() - started
        stop.set()
        stats = writer.join(120)
        target = flush_lsn(pg.dsn)
        wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 600,
                   "the job to catch up", alive=lambda: job.running)
        exit_code = job.stop()
    finally:
        stop.set()
        if job.running:
            job.kill()
        work.close()
    wall = time.monotonic() - started
    log(f"snapshot done after {snapshot_seconds:.0f}s, caught up after {wall:.0f}s; reading back")

    messages = [dict(m.change or {}, id=m.id) for m in read_back(broker.url, [NAME])]
    reads = [m for m in messages if m.get("op") == "read"]
    model, _ = replay(messages, work.tables, strict=False)
    tables = read_tables(pg.dsn, NAME, work.tables.values())
    per_table = compare(model, tables)
    totals = {k: sum(t[k] for t in per_table.values()) for k in ("rows", "missing", "extra",
                                                                  "wrong")}
    ok = (not any(totals[k] for k in ("missing", "extra", "wrong"))
          and len(kills) == args.kills and all(k["during_snapshot"] for k in kills)
          and exit_code == 0)
    return {
        "benchmark": "snapshot=initial under writes with kill -9 of the driver during the "
                     "snapshot; consumer state rebuilt from Iggy compared with the tables",
        "config": {"rows": args.rows, "kills": args.kills, "rate_per_second": args.rate,
                   "chunk_rows": args.chunk_rows,
                   "max_rows_per_trigger": args.max_rows_per_trigger, "seed": args.seed,
                   "pipeline": "python -m pg_to_iggy --master local[2], default trigger"},
        "rows_at_start": args.rows,
        "kills": kills,
        "messages": len(messages),
        "snapshot_messages": len(reads),
        "snapshot_distinct_ids": len({m["id"] for m in reads}),
        "change_messages": len(messages) - len(reads),
        "changes_during_run": stats.changes,
        "final_rows": totals["rows"],
        "missing": totals["missing"],
        "extra": totals["extra"],
        "wrong": totals["wrong"],
        "per_table": per_table,
        "wrong_rows": explain_wrong(model, tables, messages, work.tables),
        "batches": len(read_checkpoint(checkpoint)),
        "snapshot_seconds": round(snapshot_seconds, 1),
        "wall_seconds": round(wall, 1),
        "populate_seconds": round(populate_seconds, 1),
        "job_exit_code": exit_code,
        "verdict": "ok" if ok else "FAILED",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--rate", type=float, default=100.0, help="changes per second")
    parser.add_argument("--chunk-rows", type=int, default=5_000)
    parser.add_argument("--max-rows-per-trigger", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-snapfaults-") as tmp, LocalPostgres() as pg:
        broker = LocalIggy(process=True, data_dir=Path(tmp) / "iggy").start()
        try:
            result = run(args, pg, broker, Path(tmp))
        finally:
            broker.stop()
    path = write_result("snapshot_faults", result)
    print(f"snapshot faults: {result['verdict']}: {result['rows_at_start']:,} rows, "
          f"{len(result['kills'])} kills during the snapshot, {result['messages']:,} messages; "
          f"missing {result['missing']}, extra {result['extra']}, wrong {result['wrong']} of "
          f"{result['final_rows']:,} final rows -> {path}")
    return 0 if result["verdict"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
