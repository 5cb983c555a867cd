"""pg_cdc mode=polling end to end: real Spark streaming queries against the real Postgres.

Each micro-batch is collected with ``foreachBatch``, which runs on the driver after the batch was
read and before Spark commits it: the callback looks at the table at that moment, so the tests
see exactly when rows are deleted or marked relative to Spark's commits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from support import faulty_sources
from support.streaming import run_available_now

from iggy_spark_testing.harness import LocalPostgres

pytestmark = pytest.mark.e2e

TRACKING = [1, 2, 2, 2, 3, 4, 5, 5, 6]  # with 2 rows per trigger: 1,2,2,2 | 3,4 | 5,5 | 6


def slot_count(pg: LocalPostgres) -> int:
    with pg.connect() as conn:
        row = conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()
    assert row is not None
    return int(row[0])


def table_state(pg: LocalPostgres, table: str) -> dict[int, bool | None]:
    """``id -> done`` of every row still in the table."""
    with pg.connect() as conn:
        return dict(conn.execute(f"SELECT id, done FROM {table}").fetchall())


@pytest.mark.parametrize("destructive", ["delete_after_read", "processed_column"])
def test_rows_are_deleted_or_marked_only_after_spark_committed_their_batch(
    spark: SparkSession, pg: LocalPostgres, name: str, tmp_path: Any, destructive: str
) -> None:
    with pg.connect() as conn:
        conn.execute(
            f"CREATE TABLE {name} (id serial PRIMARY KEY, ts int NOT NULL, note text,"
            " done boolean NOT NULL DEFAULT false)"
        )
        for ts in TRACKING:
            conn.execute(f"INSERT INTO {name} (ts, note) VALUES (%s, %s)", (ts, f"n{ts}"))
    options = {
        "dsn": pg.dsn, "mode": "polling", "table": name, "tracking_column": "ts",
        "max_rows_per_trigger": "2", "topic_from": "table",
        **({"delete_after_read": "true"} if destructive == "delete_after_read"
           else {"processed_column": "done"}),
    }
    slots = slot_count(pg)
    checkpoint = str(tmp_path / "checkpoint")
    seen: list[list[Row]] = []  # the rows of each batch, as foreachBatch saw them
    crash = {"at": 1}

    def observe(df: DataFrame, batch_id: int) -> None:
        rows = df.collect()
        state = table_state(pg, name)
        # This batch's rows are untouched: nothing destructive before Spark commits it ...
        assert all(state.get(key_of(r)) is False for r in rows), (batch_id, state)
        # ... and every batch Spark committed before it is gone (or marked).
        for r in (r for earlier in seen for r in earlier):
            assert state.get(key_of(r)) in (None, True), (batch_id, r, state)
        seen.append(rows)
        if batch_id == crash["at"]:
            crash["at"] = -1
            raise RuntimeError("injected crash between read and commit")

    expected = [[1, 2, 2, 2], [3, 4], [5, 5], [6]]  # tracking values per batch
    crashed: list[Row] = []
    if destructive == "delete_after_read":  # a crash between read and commit (tested once)
        with pytest.raises(StreamingQueryException,
                           match="RuntimeError: injected crash between read and commit"):
            run(spark, checkpoint, options, observe)
        first, crashed = seen
        assert sorted(key_of(r) for r in first) == [1, 2, 3, 4]  # the tie at 2 stays whole
        assert sorted(key_of(r) for r in crashed) == [5, 6]
        unread = {k for k, done in table_state(pg, name).items() if done is False}
        assert unread == set(range(5, 10))  # batch 0 (ids 1-4) went after its commit, not 1
        seen.clear()
        expected = expected[1:]
    else:
        crash["at"] = -1

    # (Again,) and this time the driver dies once Spark has committed the last batch, before
    # its destructive step (planning the next batch fails).
    marker = tmp_path / "fault"

    def observe_then_arm(df: DataFrame, batch_id: int) -> None:
        observe(df, batch_id)
        if batch_id == 3:
            marker.touch()

    faulty = {**options, "fault_at": "latest_offset", "fault_marker": str(marker)}
    with pytest.raises(StreamingQueryException,
                       match="InjectedFault: injected fault at latest_offset"):
        run(spark, checkpoint, faulty, observe_then_arm, fmt="pg_cdc_faulty")
    # A crashed batch comes again, whole and with the same ids; ties never split a batch.
    assert [sorted(json.loads(r.after)["ts"] for r in rows) for rows in seen] == expected
    if crashed:
        assert sorted(r.id for r in seen[0]) == sorted(r.id for r in crashed)
    assert all(r.op == "read" and r.topic == name for rows in seen for r in rows)
    assert table_state(pg, name).get(9) is False  # committed by Spark, step not yet run

    assert run(spark, checkpoint, options) == []  # nothing new: no batch ...
    state = table_state(pg, name)  # ... but the missed step of the last batch was caught up
    assert state == (
        {} if destructive == "delete_after_read" else dict.fromkeys(range(1, 10), True)
    )
    assert slot_count(pg) == slots  # polling never creates a replication slot


def run(spark: SparkSession, checkpoint: str, options: dict[str, str],
        on_batch: Callable[[DataFrame, int], None] | None = None,
        fmt: str = "pg_cdc") -> list[list[Row]]:
    """One availableNow run; the rows of every non-empty batch (``on_batch`` sees each first)."""
    faulty_sources.register(spark)
    return [rows for _, rows in run_available_now(spark, checkpoint, options, on_batch, fmt=fmt)]


@pytest.mark.oldest_spark
def test_a_transaction_that_commits_late_is_not_lost(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    """The classic polling loss, both ways: A takes tracking value T0, B writes T1 > T0 and
    commits, a batch runs, A commits; the next batch must deliver A's row."""
    with pg.connect() as conn:
        conn.execute(
            f"CREATE TABLE {name} (id int PRIMARY KEY, ts timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(f"INSERT INTO {name} VALUES (99)")
    delivered: list[int] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        delivered.extend(json.loads(r.after)["id"] for r in df.collect())

    query = (
        spark.readStream.format("pg_cdc")
        .options(dsn=pg.dsn, mode="polling", table=name, tracking_column="ts")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        assert delivered == [99]
        with psycopg.connect(pg.dsn) as a, psycopg.connect(pg.dsn, autocommit=True) as b:
            # 1. A has written its row (it holds a transaction id) but not committed.
            a.execute(f"INSERT INTO {name} (id) VALUES (100)")
            b.execute(f"INSERT INTO {name} (id) VALUES (101)")
            query.processAllAvailable()
            assert delivered == [99]  # 101 waits: A could still commit a smaller value
            a.commit()
            query.processAllAvailable()
            assert delivered == [99, 100, 101]

            # 2. A has taken its value (now(), its start time) but written nothing yet.
            a.execute("SELECT now()")
            b.execute(f"INSERT INTO {name} (id) VALUES (103)")
            query.processAllAvailable()
            assert delivered == [99, 100, 101, 103]
            a.execute(f"INSERT INTO {name} (id) VALUES (102)")  # ts below 103's
            a.commit()
            query.processAllAvailable()
            assert delivered == [99, 100, 101, 103, 102]  # a late commit, not a loss
    finally:
        query.stop()
    assert query.exception() is None


def key_of(row: Row) -> int:
    return int(json.loads(row.key)["id"])


def test_bad_polling_options_fail_at_load(
    spark: SparkSession, pg: LocalPostgres, name: str
) -> None:
    base = {"dsn": pg.dsn, "mode": "polling", "table": name, "tracking_column": "ts"}
    with pytest.raises(AnalysisException,
                       match="ConfigError: option 'slot': only applies to mode=cdc"):
        spark.readStream.format("pg_cdc").options(**base, slot=name).load()
    with pytest.raises(AnalysisException,
                       match=f"ConfigError: option 'table': bad value: '{name}' does not exist"):
        spark.readStream.format("pg_cdc").options(**base).load()
