"""``on_slot_lost``: a slot Postgres invalidated while the query was stopped, through Spark.

The same checkpoint is run with the default (``fail``: the query stops, naming the slot, the
reason and the ways back) and then with ``resnapshot``: the tables arrive as they are now, rows
with op ``read``, and the stream goes on from the new slot. What the sink received (the rows
``foreachBatch`` saw) is compared with the table. A throwaway server of its own: a tiny
``max_slot_wal_keep_size`` on the session's server would invalidate other tests' slots.
"""

from __future__ import annotations

import orjson
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import Row, SparkSession
from support.streaming import rows_of, run_available_now
from test_slot_loss import write_wal_segments

from iggy_spark_testing.harness import LocalPostgres

pytestmark = pytest.mark.e2e


def _ops(rows: list[Row]) -> list[tuple[str, int]]:
    return sorted((r.op, orjson.loads(r.after or r.key)["id"]) for r in rows)


def test_a_lost_slot_fails_by_default_and_resnapshot_restores_the_tables(
    spark: SparkSession, name: str, checkpoint: str
) -> None:
    settings = {"max_slot_wal_keep_size": "1MB", "checkpoint_timeout": "1h"}
    with LocalPostgres(version=18, settings=settings) as server, server.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE TABLE {name}_fill (id int, data text)")
        conn.execute(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        options = {"dsn": server.dsn, "slot": name, "include_tables": f"public\\.{name}"}
        assert run_available_now(spark, checkpoint, options) == []  # the slot starts here
        conn.execute(f"INSERT INTO {name} VALUES (4, 'd')")
        conn.execute(f"UPDATE {name} SET v = 'a2' WHERE id = 1")
        assert _ops(rows_of(run_available_now(spark, checkpoint, options))) == [
            ("insert", 4), ("update", 1)]

        # stopped; changes in the gap, then the slot is lost
        conn.execute(f"UPDATE {name} SET v = 'b2' WHERE id = 2")
        conn.execute(f"DELETE FROM {name} WHERE id = 3")
        conn.execute(f"INSERT INTO {name} VALUES (5, 'e')")
        write_wal_segments(conn, f"{name}_fill", 4)
        conn.execute("CHECKPOINT")
        lost = conn.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                            (name,)).fetchone()
        assert lost == ("lost",)

        with pytest.raises(StreamingQueryException,
                           match=f"replication slot '{name}' is lost: Postgres invalidated it "
                           "\\(wal_removed\\).*on_slot_lost=resnapshot"):
            run_available_now(spark, checkpoint, options)

        options["on_slot_lost"] = "resnapshot"
        resnapshot = rows_of(run_available_now(spark, checkpoint, options))
        table = {r[0]: r[1] for r in conn.execute(f"SELECT id, v FROM {name}").fetchall()}
        assert {r.op for r in resnapshot} == {"read"}
        assert {orjson.loads(r.after)["id"]: orjson.loads(r.after)["v"] for r in resnapshot} == (
            table)
        assert len(resnapshot) == len(table) == 4  # 1, 2, 4, 5: each once

        conn.execute(f"INSERT INTO {name} VALUES (6, 'f')")  # the stream goes on
        conn.execute(f"DELETE FROM {name} WHERE id = 4")
        assert _ops(rows_of(run_available_now(spark, checkpoint, options))) == [
            ("delete", 4), ("insert", 6)]
        assert run_available_now(spark, checkpoint, options) == []
