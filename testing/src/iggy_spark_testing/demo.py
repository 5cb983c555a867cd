"""The main job, end to end: one Postgres table with 50 event types, each routed to its own topic.

``./run demo`` (or ``python -m iggy_spark_testing.demo``) starts a throwaway Postgres and the
local Iggy broker (or uses ``PG_CDC_DSN`` / ``IGGY_URL``), starts the streaming query ``pg_cdc`` →
``iggy_routed`` with ``topic_from=event_type``, writes ``--events`` rows while the query runs,
then reads every topic back over TCP and checks that each topic holds exactly the rows of its
event type. It exits 0 only if every count matches.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

from iggy_spark_testing.harness import postgres
from iggy_spark_testing.readback import read_topic
from pg_to_iggy.pipeline import start_pipeline

EVENT_TYPES = tuple(f"event_{i:02d}" for i in range(50))
STREAM = "demo"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="./run demo", description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=100_000, help="rows to write (default 100000)")
    p.add_argument("--rows-per-transaction", type=int, default=100)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--max-bytes-per-trigger", default="4MB",
                   help="WAL per micro-batch (default 4MB): smaller batches, more progress lines")
    p.add_argument("--timeout", type=float, default=900, help="seconds before giving up")
    return p


@contextlib.contextmanager
def _broker() -> Iterator[str]:
    """``IGGY_URL`` if set, else the local broker: the same code path either way."""
    from iggy_spark_testing.brokers import iggy_server

    with iggy_server() as broker:
        yield broker.url


def _write_events(dsn: str, table: str, total: int, per_tx: int, seed: int,
                  written: list[int]) -> None:
    """Insert ``total`` events of random types in transactions of ``per_tx`` rows."""
    import psycopg

    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=False) as conn:
        for start in range(0, total, per_tx):
            n = min(per_tx, total - start)
            rows = [
                (rng.choice(EVENT_TYPES), rng.randrange(1000),
                 orjson.dumps({"seq": start + i, "amount": rng.randrange(1, 10_000)}).decode())
                for i in range(n)
            ]
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {table} (event_type, tenant, payload) VALUES (%s, %s, %s)", rows
                )
            conn.commit()
            written[0] += n


def _lag(conn: Any, slot: str) -> int:
    row = conn.execute(
        "SELECT pg_current_wal_flush_lsn() - confirmed_flush_lsn FROM pg_replication_slots"
        " WHERE slot_name = %s", (slot,)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from pyspark.sql import SparkSession

    # Spark's Python workers must run this interpreter (where the connectors are installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    run_id = uuid.uuid4().hex[:8]
    table, slot = "demo_events", f"iggy_spark_demo_{run_id}"
    with postgres() as pg, _broker() as url, tempfile.TemporaryDirectory() as work:
        with pg.connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, event_type text NOT "
                         "NULL, tenant int NOT NULL, payload jsonb, created_at timestamptz "
                         "NOT NULL DEFAULT now())")
        print(f"[demo] Postgres ready; Iggy at {url.split('@')[-1]}; starting Spark", flush=True)
        spark = (SparkSession.builder.master("local[2]").appName("iggy-spark-demo")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        query = start_pipeline(
            spark, dsn=pg.dsn, slot=slot, url=url, checkpoint=os.path.join(work, "checkpoint"),
            source={"topic_from": "event_type", "default_stream": STREAM,
                    "default_topic": "unrouted",
                    "partition_key_from": "tenant", "include_tables": rf"public\.{table}",
                    "publication": slot, "max_bytes_per_trigger": args.max_bytes_per_trigger},
            sink={"topic_defaults.partitions_count": "3"},
            trigger={"processingTime": "1 second"},
        )
        while not query.recentProgress:  # the slot exists once the first batch is planned
            time.sleep(0.5)
            if query.exception() is not None:
                raise SystemExit(f"[demo] the query failed: {query.exception()}")
        written = [0]
        writer = threading.Thread(target=_write_events, args=(
            pg.dsn, table, args.events, args.rows_per_transaction, args.seed, written))
        started = time.monotonic()
        writer.start()
        _watch(query, pg, slot, writer, written, args.events, args.timeout)
        query.processAllAvailable()
        elapsed = time.monotonic() - started
        query.stop()
        ok = _verify(pg, url, table, elapsed)
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        spark.stop()
    return 0 if ok else 1


def _watch(query: Any, pg: Any, slot: str, writer: threading.Thread, written: list[int],
           total: int, timeout: float) -> None:
    """Print progress every second until the query has streamed every row written."""
    seen_batch, processed = -1, 0
    deadline = time.monotonic() + timeout
    with pg.connect() as conn:
        while writer.is_alive() or processed < written[0]:
            time.sleep(1)
            for progress in query.recentProgress:
                if progress["batchId"] > seen_batch:
                    seen_batch = progress["batchId"]
                    processed += progress["numInputRows"]
            last = query.lastProgress or {}
            print(f"[demo] written {written[0]:>7}/{total}  streamed {processed:>7}  "
                  f"batch {seen_batch:>3}: {last.get('numInputRows', 0):>6} rows  "
                  f"slot lag {_lag(conn, slot) / 1024:,.0f} KiB", flush=True)
            if query.exception() is not None:
                raise SystemExit(f"[demo] the query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"[demo] gave up after {timeout:.0f} s")
    writer.join()


def _verify(pg: Any, url: str, table: str, elapsed: float) -> bool:
    with pg.connect() as conn:
        expected = dict(conn.execute(
            f"SELECT event_type, count(*) FROM {table} GROUP BY 1").fetchall())
    print(f"\n{'topic':<10} {'messages':>9} {'duplicates':>10} {'partitions':>10} "
          f"{'first offset':>12} {'last offset':>11}  source rows")
    ok, total, duplicates = True, 0, 0
    for topic in EVENT_TYPES:
        messages = read_topic(url, STREAM, topic) if expected.get(topic) else []
        unique = {m.id for m in messages}
        offsets = [m.offset for m in messages]
        want = expected.get(topic, 0)
        mark = "" if len(unique) == want else "  <-- MISMATCH"
        ok &= not mark
        total += len(unique)
        duplicates += len(messages) - len(unique)
        first, last = (min(offsets), max(offsets)) if offsets else ("-", "-")
        partitions = len({m.partition for m in messages})
        print(f"{topic:<10} {len(unique):>9} {len(messages) - len(unique):>10} {partitions:>10} "
              f"{first!s:>12} {last!s:>11}  {want}{mark}")
    rows = sum(expected.values())
    print(f"\n[demo] {total} distinct messages ({duplicates} duplicates) in {len(EVENT_TYPES)} "
          f"topics for {rows} source rows; {rows / elapsed:,.0f} rows/s from the first insert "
          f"to the last message acknowledged ({elapsed:.1f} s)")
    print("[demo] OK: every topic holds exactly its event type's rows" if ok else
          "[demo] FAILED: counts differ", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(main())
