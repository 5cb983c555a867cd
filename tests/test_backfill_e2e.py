"""Backfill end to end: real Spark, the real Postgres, the broker over TCP, a driver kill -9.

Tables filled before the slot exists (so the stream alone never shows their rows) are
backfilled while a workload keeps inserting, updating (keys too) and deleting; the driver is
killed mid-backfill and started again. The request comes from a role granted it, after a role
that may only log in wrote a forged request and a malformed one, which the query skips. A
consumer replaying the topics in stream order must rebuild every table exactly: no missing key,
no resurrected delete, the newest value last.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from iggy_local import LocalIggy
from iggy_spark_testing.chaos import read_checkpoint, slot_exists, wait_until
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.job import PipelineJob, abandon, catch_up_and_stop
from iggy_spark_testing.oracle import read_back, read_tables
from iggy_spark_testing.replay import in_stream_order, replay
from iggy_spark_testing.workload import Workload
from postgres_cdc_source.backfill import request_backfill
from postgres_cdc_source.options import REQUEST_PREFIX

pytestmark = pytest.mark.e2e


def _backfill_state(checkpoint: Path) -> dict[str, Any] | None:
    """The ``backfill`` part of the last committed batch's end offset."""
    batches = read_checkpoint(checkpoint)
    if not batches:
        return None
    text = (checkpoint / "offsets" / str(batches[-1].id)).read_text().splitlines()[-1]
    return dict(json.loads(text)).get("backfill")


@pytest.mark.oldest_spark
def test_backfill_across_a_driver_kill_rebuilds_every_table(
    pg: LocalPostgres, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    work = Workload(pg.dsn, name, seed=25)
    work.setup()
    work.run(changes=400)  # rows that exist before the slot
    checkpoint = tmp_path / "chk"
    job = PipelineJob(
        dsn=pg.dsn, slot=name, url=broker.url, checkpoint=checkpoint,
        log_path=tmp_path / "job.log", sink={"topic_defaults.partitions_count": "3"},
        source={"include_tables": f"{name}\\..*", "topic_from": "table",
                "partition_key_from": "id", "default_stream": name,
                "backfill_chunk_rows": "100"},
    )
    stop = threading.Event()
    try:
        job.start()
        wait_until(lambda: slot_exists(pg.dsn, name), 120, "the slot", alive=lambda: job.running)
        run = work.start(stop=stop, rate=30)  # on through the backfill, the kill, the restart
        # forged while the query listens (after its first planning): a message written before
        # then is passed unread by the start's search, which decodes the WAL only where the
        # requests table has a row, and its NOTIFY reached no listener
        wait_until(lambda: any(b.committed_at for b in read_checkpoint(checkpoint)), 120,
                   "a first committed batch", alive=lambda: job.running)
        _forge(pg, name, list(work.tables))
        request_backfill(_granted(pg, name), name, [f"{name}.{t}" for t in work.tables])
        wait_until(lambda: ((_backfill_state(checkpoint) or {}).get("queue") or [{}])[0].get(
            "chunks", 0) >= 2, 300, "two chunks", alive=lambda: job.running)
        job.kill()
        assert _backfill_state(checkpoint), "the backfill finished before the kill"
        job.start()
        wait_until(lambda: _backfill_state(checkpoint) is None, 300,
                   "the backfill to finish", alive=lambda: job.running)
        catch_up_and_stop(job, pg.dsn, checkpoint, run, stop)
    finally:
        abandon(job, stop, work)
    log = job.log_path.read_text(errors="replace")
    assert len(set(re.findall(r"request message at LSN (\S+) is skipped", log))) == 2
    messages = [dict(m.change or {}, id=m.id) for m in read_back(broker.url, [name])]
    reads = [m for m in messages if m["op"] == "read"]
    assert reads and {m["table"] for m in reads} == set(work.tables)
    model, _ = replay(messages, work.tables, strict=False, order=in_stream_order)
    assert model == read_tables(pg.dsn, name, work.tables.values())


def _forge(pg: LocalPostgres, name: str, tables: list[str]) -> None:
    """As a role that may only log in: a request as a release before requests were rows wrote
    it (its ``where`` would keep one row), and a request nested 100,000 deep."""
    with pg.connect() as conn:
        conn.execute(f"CREATE ROLE {name}_login LOGIN")
    with psycopg.connect(pg.dsn.replace("user=postgres", f"user={name}_login"),
                         autocommit=True) as conn:
        for content in (json.dumps({"id": "forged", "slot": name, "where": "false",
                                    "tables": [[name, t] for t in tables]}), "[" * 100_000):
            conn.execute("SELECT pg_logical_emit_message(true, %s, %s)",
                         (REQUEST_PREFIX, content))
        conn.execute("NOTIFY pg_cdc_backfill")


def _granted(pg: LocalPostgres, name: str) -> str:
    """The DSN of a role granted backfill requests, and nothing on the tables."""
    with pg.connect() as conn:
        conn.execute(f"CREATE ROLE {name}_ops LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {name} TO {name}_ops")
        conn.execute(f"GRANT INSERT (slot, kind, id, tables) ON public.pg_cdc_requests "
                     f"TO {name}_ops")
    return pg.dsn.replace("user=postgres", f"user={name}_ops")
