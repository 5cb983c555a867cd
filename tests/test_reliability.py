"""Faults against the whole pipeline, each judged by the consistency oracle.

The promise under test: every committed Postgres change reaches Iggy exactly once (the sink's
default ``delivery_guarantee=effectively_once``: a replay sends only what did not land), with a
stable id, nothing is invented, a row's changes keep their commit order in one partition, and
the replication slot is never ahead of what Spark has durably committed. Each test drives a
seeded :class:`~iggy_spark_testing.workload.Workload` (hostile values, key changes, interleaved
and rolled-back transactions) while it breaks something, lets the pipeline recover, and then

* reads every message back over the SDK and checks it with :func:`iggy_spark_testing.oracle.verify`:
  nothing missing or invented, content and ids right, commit and per-row order kept, and the
  replayed changes equal the source tables row for row;
* accepts no duplicate (and, as a second opinion, would place any in a batch in flight at a
  fault, by the batch ranges and times in the checkpoint's ``offsets/`` and ``commits/``:
  :func:`~iggy_spark_testing.chaos.in_flight`);
* checks the :class:`~iggy_spark_testing.chaos.SlotWatch` samples taken during the run: the slot's
  ``confirmed_flush_lsn`` never beyond the end of the last batch in ``commits/``.

A driver killed mid-batch is tests/test_full_loop.py's fault (with the same slot watch); the
heavy variant, a campaign of over 100 faults of every kind in one run (repeated kills at random
moments among them), is bench/bench_reliability.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support.faulty_sources import POINTS, fired_at, register, start_faulty_pipeline

from connector_common.lsn import format_lsn
from iggy_local import LocalIggy
from iggy_spark.sink.encoding import message_id
from iggy_spark_testing.chaos import (
    SlotWatch,
    in_flight,
    prepare_capture,
    unexplained_duplicates,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.oracle import ChangeMessage, OracleReport, check, read_tables, verify
from iggy_spark_testing.records import Change, RunStats
from iggy_spark_testing.workload import Workload
from pg_to_iggy.pipeline import start_pipeline

SINK = {"topic_defaults.partitions_count": "3"}
"""Three partitions per table topic, so per-row order is a real property, not a given."""


def judge(
    url: str, work: Workload, watch: SlotWatch, faults: list[float | tuple[float, float]],
) -> OracleReport:
    """The oracle's verdict, the slot samples, and no duplicates: delivery is effectively once
    (the default), so a replayed batch must not resend what landed."""
    report = verify(url, [work.schema], work)
    assert report.ok, str(report)
    assert report.duplicates == 0, f"{report.duplicates} duplicates: {report}"
    assert report.delivered == report.changes == work.changes
    suspects = in_flight(watch.batches(), faults)
    unexplained = unexplained_duplicates(report.duplicated_commits, suspects, report.commits)
    assert not unexplained, (
        f"{len(unexplained)} duplicated changes outside the batches in flight at a fault "
        f"{[(b.id, b.start, b.end) for b in suspects]}: first at {format_lsn(unexplained[0])}"
    )
    assert watch.samples, "the slot was never sampled"
    assert not watch.violations, watch.describe(watch.violations[0])
    final = watch.sample()
    assert final.confirmed_flush is not None and final.committed_end is not None
    assert final.confirmed_flush <= final.committed_end, watch.describe(final)
    print(f"\n{report}; {len(suspects)} batches in flight at faults; "
          f"{len(watch.samples)} slot samples")
    return report


@pytest.mark.pg_versions(18)  # the oracle is judged here, not the server: one version will do
def test_oracle_catches_loss_reordering_and_invention(pg: LocalPostgres, name: str) -> None:
    """The oracle itself: a perfect delivery passes, and each kind of damage is counted."""
    work = Workload(pg.dsn, name, seed=11)
    work.setup()
    work.run(changes=300)
    tables = list(work.tables.values())
    source = read_tables(pg.dsn, name, tables)
    assert source == work.expected_rows()  # the workload's model is the database
    perfect, changes = _perfect_delivery(work)

    def verdict(messages: list[ChangeMessage]) -> OracleReport:
        return check(messages, work.transactions, tables, source=source)

    assert verdict(perfect).ok and verdict(perfect).duplicates == 0
    lost = verdict(perfect[:100] + perfect[101:])
    assert lost.missing == 1 and lost.table_mismatches >= 1 and not lost.invented
    twice = verdict(perfect + perfect[:7])
    assert twice.ok and twice.duplicates == 7 and len(twice.duplicated_commits) == 7
    # Two changes of one row, swapped in the partition: the later commit comes first.
    first, second = next(
        (i, j) for i, a in enumerate(changes) for j in range(i + 1, len(changes))
        if (a.table, a.identity) == (changes[j].table, changes[j].identity)
    )
    swapped = perfect[:]
    swapped[first] = replace(perfect[first], offset=perfect[second].offset)
    swapped[second] = replace(perfect[second], offset=perfect[first].offset)
    assert verdict(swapped).order_violations == 1
    forged = dict(perfect[0].change or {}, seq=999)
    forged_id = message_id(f"{forged['commit_lsn']}:999")
    invented = replace(perfect[0], offset=len(perfect), id=forged_id, change=forged)
    assert verdict([*perfect, invented]).invented == 1


def _perfect_delivery(work: Workload) -> tuple[list[ChangeMessage], list[Change]]:
    """What a flawless pipeline would deliver for ``work``: one partition, in commit order."""
    messages: list[ChangeMessage] = []
    changes: list[Change] = []
    for txn in work.transactions:
        commit = format_lsn(0x1000 + txn.index * 0x100)
        for c in txn.changes:
            key = work.tables[c.table].key_json(c.key) if c.key else None
            change = {"commit_lsn": commit, "seq": c.seq, "xid": c.xid, "table": c.table,
                      "op": c.op, "key": key, "after": c.row, "unchanged": []}
            messages.append(ChangeMessage(work.schema, c.table, 0, len(messages),
                                          message_id(f"{commit}:{c.seq}"), change))
            changes.append(c)
    return messages, changes


def run_through(
    spark: SparkSession, dsn: str, url: str, name: str, tmp_path: Path, *, seed: int,
    rate: float, faults: dict[int, Callable[[], None]],
) -> tuple[Workload, SlotWatch, list[tuple[float, float]], RunStats]:
    """The pipeline in this session's Spark, 8,000 changes at ``rate``, and each fault once as
    many changes as its key have committed; returns when everything is processed, with the
    faults' windows."""
    checkpoint = str(tmp_path / "checkpoint")
    work, source = prepare_capture(dsn, name, seed=seed)
    query = start_pipeline(spark, dsn=dsn, slot=name, url=url, checkpoint=checkpoint,
                           source=source, sink=SINK)
    query.processAllAvailable()  # its start planned: the faults hit a running query
    windows = []
    with SlotWatch(dsn, name, checkpoint) as watch:
        run = work.start(changes=8_000, rate=rate)
        for after, fault in sorted(faults.items()):
            wait_until(lambda n=after: work.changes >= n, 60, f"{after} changes")
            began = time.time()
            fault()
            windows.append((began, time.time()))
        stats = run.join(90)
        query.processAllAvailable()
        query.stop()
    return work, watch, windows, stats


def test_postgres_restarted_then_the_broker_unavailable_for_8_seconds(
    spark: SparkSession, name: str, tmp_path: Path
) -> None:
    """A fast restart of Postgres while changes are written and read: both sides ride it out.
    Later in the same run Iggy goes away and comes back 8 s later: sends wait and retry.
    Nothing is lost or sent twice. Both servers are the test's own: the session's are shared
    with other tests."""
    with LocalPostgres() as server, LocalIggy(process=True, data_dir=tmp_path / "iggy") as broker:

        def outage() -> None:
            broker.stop()
            time.sleep(8)  # the outage itself: several batch intervals
            broker.start()

        work, watch, (restart, down), stats = run_through(
            spark, server.dsn, broker.url, name, tmp_path, seed=3, rate=400,
            faults={2_000: lambda: server.restart("fast"), 4_000: outage},
        )
        assert stats.reconnects >= 1, "the restart did not interrupt the workload"
        assert in_flight(watch.batches(), [down]), "no batch ran while the broker was down"
        judge(broker.url, work, watch, [restart, down])


@pytest.fixture(scope="module")
def faulty(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def test_injected_exceptions(
    faulty: SparkSession, pg: LocalPostgres, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    """An exception at each point of a batch in turn fails the query; each restart replays and
    goes on. One run of the pipeline meets every point, one after the other."""
    work, source = prepare_capture(pg.dsn, name, seed=4)
    checkpoint = str(tmp_path / "checkpoint")
    markers = {point: tmp_path / f"armed-{point}" for point in POINTS}

    def start(point: str) -> StreamingQuery:
        fault = {"fault_at": point, "fault_marker": str(markers[point])}
        return start_faulty_pipeline(
            faulty, checkpoint=checkpoint,
            source={"dsn": pg.dsn, "slot": name, "batch_rows": "200", **source, **fault},
            sink={"url": broker.url, **SINK, **fault},
        )

    with SlotWatch(pg.dsn, name, checkpoint) as watch:
        for point in POINTS:
            # Written while the query is down, so the first batch of the next start holds all
            # of it (or replays the last fault's batch first): the batch a fault hits is large,
            # many Arrow batches of 200 rows, and a write fault leaves half of the first landed.
            work.run(changes=1_500)
            markers[point].touch()  # armed: the first batch with data trips it
            query = start(point)
            with pytest.raises(StreamingQueryException, match=f"injected fault at {point}"):
                query.awaitTermination(90)
            assert not markers[point].exists()
        query = start(POINTS[0])  # not armed: replays the last fault's batch and goes on
        query.processAllAvailable()
        query.stop()
    judge(broker.url, work, watch, [fired_at(marker) for marker in markers.values()])
