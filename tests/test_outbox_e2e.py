"""The transactional outbox end to end: a transaction writes a business row and emits a logical
message; Spark carries both through ``iggy_routed`` and a consumer reads them from Iggy in the
order they were written, without the messages of rolled-back transactions."""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

from iggy_local import LocalIggy
from iggy_spark_testing.chaos import committed_end, flush_lsn, slot_exists, wait_until
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.oracle import read_back
from pg_to_iggy.pipeline import start_pipeline

pytestmark = pytest.mark.e2e


@pytest.mark.pg_versions(18)
def test_outbox_messages_arrive_with_their_rows_in_commit_order(
    spark: SparkSession, pg: LocalPostgres, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, status text)")
    checkpoint = tmp_path / "chk"
    query = start_pipeline(  # one topic of one partition: the order a consumer sees is total
        spark, dsn=pg.dsn, slot=name, url=broker.url, checkpoint=str(checkpoint),
        source={"include_tables": rf"public\.{name}", "message_prefixes": "order_events",
                "default_stream": name, "default_topic": "all"},
        sink={"topic_defaults.partitions_count": "1"},
    )
    try:
        wait_until(lambda: slot_exists(pg.dsn, name), 120, "the slot")
        with pg.connect() as conn:
            conn.autocommit = True
            for i in range(20):
                # every fifth transaction fails after emitting its event: neither arrives
                with contextlib.suppress(psycopg.errors.UniqueViolation), conn.transaction():
                    conn.execute(f"INSERT INTO {name} VALUES (%s, 'paid')", (i,))
                    conn.execute("SELECT pg_logical_emit_message(true, 'order_events', %s)",
                                 (json.dumps({"order": i}),))
                    if i % 5 == 4:
                        conn.execute(f"INSERT INTO {name} VALUES (%s, 'x')", (i,))
        target = flush_lsn(pg.dsn)
        wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 120,
                   "the query to catch up")
    finally:
        query.stop()
    seen = [(m.change["op"], m.change["key"], m.change["after"])
            for m in read_back(broker.url, [name]) if m.change is not None]
    expected = []
    for i in range(20):
        if i % 5 != 4:
            event = json.dumps({"order": i})
            expected += [
                ("insert", {"id": i}, {"id": i, "status": "paid"}),
                ("message", {"prefix": "order_events"},
                 {"prefix": "order_events", "content": event,
                  "content_base64": base64.b64encode(event.encode()).decode()}),
            ]
    assert seen == expected
