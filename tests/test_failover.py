"""A failover slot through a promotion, end to end (Postgres 17 and 18, Spark, the broker over
TCP): 17 is the first version with failover slots.

A primary and a ``pg_basebackup`` standby that synchronizes failover slots; the query reads a
multi-host DSN (``target_session_attrs=read-write``) with ``failover=true``. Mid-stream the old
primary is killed and the standby promoted; the query goes on from the same checkpoint on the new
primary, and the oracle reads Iggy back: every committed change once, nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from iggy_local import LocalIggy
from iggy_spark_testing.chaos import committed_end, flush_lsn, prepare_capture, wait_until
from iggy_spark_testing.harness import LocalPostgres, LocalStandby
from iggy_spark_testing.oracle import verify
from pg_to_iggy.pipeline import start_pipeline

pytestmark = pytest.mark.e2e

SINK = {"topic_defaults.partitions_count": "3"}


def synced(standby: LocalStandby, slot: str) -> bool:
    """Whether the standby holds a persistent synchronized copy of ``slot`` (a synced slot is
    temporary until the primary's slot has moved past the standby's position)."""
    with standby.connect() as conn:
        row = conn.execute("SELECT synced AND NOT temporary FROM pg_replication_slots"
                           " WHERE slot_name = %s", (slot,)).fetchone()
    return row == (True,)


@pytest.mark.parametrize("version", [17, 18], ids=["pg17", "pg18"])
def test_the_query_goes_on_on_a_promoted_standby(
    spark: SparkSession, broker: LocalIggy, name: str, tmp_path: Path, version: int
) -> None:
    with LocalPostgres(version=version) as primary, LocalStandby(primary) as standby:
        dsn = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres "
               "dbname=postgres target_session_attrs=read-write")
        work, source = prepare_capture(dsn, name, seed=24, options={"failover": "true"})
        checkpoint = str(tmp_path / "checkpoint")
        queries: list[StreamingQuery] = []

        def running() -> StreamingQuery:
            """The query, started again from its checkpoint if it stopped (a supervisor)."""
            if not queries or not queries[-1].isActive:
                queries.append(start_pipeline(
                    spark, dsn=dsn, slot=name, url=broker.url, checkpoint=checkpoint,
                    source=source, sink=SINK, trigger={"processingTime": "1 second"}))
            return queries[-1]

        def caught_up(server: LocalPostgres) -> None:
            target = flush_lsn(server.dsn)

            def there() -> bool:
                running()
                return (committed_end(checkpoint) or 0) >= target

            wait_until(there, 120, "the query to catch up", every=0.5)

        try:
            running()
            work.run(changes=300)
            caught_up(primary)
            with primary.connect() as conn:  # lets the synced copy become persistent
                conn.execute("SELECT pg_log_standby_snapshot()")
            work.run(changes=20)
            wait_until(lambda: synced(standby, name), 90, "the slot synced to the standby")

            work.run(changes=300)  # the query is reading these when the primary dies
            target = flush_lsn(primary.dsn)
            wait_until(lambda: standby.replayed() >= target, 60, "the standby to replay")
            primary.stop()  # killed: pg_ctl stop -m immediate, and its data gone
            standby.promote()
            work.run(changes=300)  # on the new primary, through the same DSN
            caught_up(standby)
        finally:
            for query in queries:
                query.stop()
            work.close()
        failures = [str(q.exception()) for q in queries if q.exception() is not None]
        assert len(queries) == 1, failures  # rode out the promotion: no restart needed
        report = verify(broker.url, [name], work)
        assert report.ok, str(report)
        assert report.duplicates == 0, str(report)
        assert report.delivered == report.changes == work.changes == 920
