"""Effectively-once delivery against the local broker over TCP, without Spark.

A write task is called the way Spark calls it, with the task's identity (partition id, Spark's
batch id, attempt) set as a replay would see it. An interrupted first attempt is reproduced by
running the same task on a prefix of its rows: the sink numbers a group's messages in order, so
that is exactly what a crash after that prefix was acknowledged leaves in the partition.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from psycopg import sql
from support.broker_fixtures import poll_all

from connector_common.spark_versions import ReadAllAvailable
from iggy_local import LocalIggy
from iggy_spark.connection import IggyConnection
from iggy_spark.sink import outbox
from iggy_spark.sink.control_records import LedgerRecord, Start
from iggy_spark.sink.control_topic import ControlTopic
from iggy_spark.sink.delivery import ORIGIN_HEADER, Origin, TaskIdentity
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.sink.report import Ledger, TaskReport
from iggy_spark.sink.writer import IggyRoutedStreamWriter
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.polling.reader import PgPollingStreamReader

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]


def rows(name: str, numbers: range, partitions: int = 2) -> pa.RecordBatch:
    ns = list(numbers)
    return pa.RecordBatch.from_pydict({
        "stream": [name] * len(ns), "topic": ["t"] * len(ns),
        "partition_id": [n % partitions for n in ns], "n": ns,
    })


def write(
    broker: LocalIggy, monkeypatch: pytest.MonkeyPatch, batch: pa.RecordBatch, *,
    task: int = 0, spark_batch: int = 4, replay: bool = False, last_delivered: int = 3,
    retry: bool = False, query: str = "q1", plan: bool = True, **options: str,
) -> TaskReport:
    """One task of ``spark_batch``, its control topic (in a stream of the test's own, named by
    the ``state_stream`` option) holding a ledger through ``last_delivered`` and, with
    ``replay``, an earlier attempt's ``start``. ``plan=False``: at-least-once delivery."""
    settings = RoutedOptions.from_options({
        "url": broker.url, "partition_key_encoding": "partition_id",
        "topic_defaults.partitions_count": "2", "state_stream": _state_stream(batch),
        **({} if plan else {"delivery_guarantee": "at_least_once"}), **options})
    seed_state(settings, query, last_delivered, Start(spark_batch, task, 0) if replay else None)
    identity = TaskIdentity(task, spark_batch, int(retry), query, "run-1")
    writer = IggyRoutedStreamWriter(settings, identify=lambda: identity)
    return writer.write(iter([batch]))


def _state_stream(batch: pa.RecordBatch) -> str:
    """The test's own state stream: its rows' stream name (unique per test), suffixed."""
    return f"{batch.column('stream')[0]}-state"


def seed_state(
    options: RoutedOptions, query: str, last_delivered: int, start: Start | None
) -> None:
    """Make the query's control topic hold a ledger through ``last_delivered`` (unless a newer
    one is there) and ``start``."""
    control = ControlTopic.of_query(IggyConnection.shared(options.url), options.state_stream,
                                    query, timeout=30)
    control.create()
    view = control.read()
    if view is None or view.last_batch < last_delivered:
        ledger = Ledger()
        ledger.data["last_batch"] = last_delivered
        control.append(LedgerRecord(ledger.data))
    if start is not None:
        control.append(start)


def landed(broker: LocalIggy, name: str) -> list[tuple[int, int, Any]]:
    """(partition, n, origin header) of every message, in partition and offset order."""
    return [(m.partition, json.loads(m.payload)["n"], m.headers.get(ORIGIN_HEADER))
            for m in poll_all(broker.address, name, "t")]


def writers(got: list[tuple[int, int, Any]]) -> list[tuple[int, int, Origin]]:
    """(partition, n, origin) with each message attributed to the header that ends its send:
    a send lands whole, so its messages sit together, the marked one last."""
    attributed: list[tuple[int, int, Origin]] = []
    carried: tuple[int, Origin] | None = None
    for partition, n, header in reversed(got):
        if header is not None:
            origin = Origin.decode(header)
            assert origin is not None
            carried = (partition, origin)
        assert carried is not None and carried[0] == partition, "a message after the last mark"
        attributed.append((partition, n, carried[1]))
    return attributed[::-1]


def ns(broker: LocalIggy, name: str) -> list[int]:
    return [n for _, n, _ in landed(broker, name)]


def test_the_last_message_of_every_send_carries_its_origin(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox, "MESSAGES_PER_SEND", 2)
    write(broker, monkeypatch, rows(name, range(10)), task=3)
    got = landed(broker, name)
    assert [(p, n) for p, n, _ in got] == [(p, n) for p in (0, 1) for n in range(p, 10, 2)]
    mark = {1: Origin("q1", 4, 3, 1, 2), 3: Origin("q1", 4, 3, 3, 2), 4: Origin("q1", 4, 3, 4, 1)}
    assert [Origin.decode(h) if h else None for _, _, h in got] == [
        mark.get(seq) for _ in (0, 1) for seq in range(5)]  # sends of 2, 2 and 1 messages


def test_an_interrupted_batch_resends_only_what_did_not_land(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tasks of one batch write the same partitions, with another query's messages in
    between; each task's first attempt landed a different prefix. The replay completes each
    group exactly, in order."""
    write(broker, monkeypatch, rows(name, range(0, 100)), spark_batch=3, last_delivered=2)
    write(broker, monkeypatch, rows(name, range(0, 37)), task=0)  # crashed after 37 rows
    write(broker, monkeypatch, rows(name, range(1000, 1010)), query="other")
    write(broker, monkeypatch, rows(name, range(500, 511)), task=1)  # ... and this one after 11
    first = write(broker, monkeypatch, rows(name, range(0, 60)), task=0, replay=True)
    second = write(broker, monkeypatch, rows(name, range(500, 580)), task=1, replay=True)
    assert (first.resumed, second.resumed, first.at_least_once) == (37, 11, 0)
    assert sum(first.routed.values()) == 60 and sum(second.routed.values()) == 80
    got = writers(landed(broker, name))
    by_writer: dict[tuple[str, int, int], list[int]] = {}
    for _, n, origin in got:
        by_writer.setdefault((origin.query, origin.batch, origin.task), []).append(n)
    assert {k: sorted(v) for k, v in by_writer.items()} == {
        ("q1", 3, 0): list(range(100)), ("q1", 4, 0): list(range(60)),
        ("q1", 4, 1): list(range(500, 580)), ("other", 4, 0): list(range(1000, 1010))}
    for partition in (0, 1):  # each task's rows in their order in each partition
        for low, high in ((0, 60), (500, 580)):
            seq = [n for p, n, o in got if p == partition and low <= n < high
                   and (o.query, o.batch) == ("q1", 4)]
            assert seq == [n for n in range(low, high) if n % 2 == partition]


def test_a_replay_of_a_batch_that_fully_landed_sends_nothing(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(broker, monkeypatch, rows(name, range(20)))
    again = write(broker, monkeypatch, rows(name, range(20)), replay=True)
    assert again.resumed == 20 and sum(again.routed.values()) == 20
    assert sorted(ns(broker, name)) == list(range(20))


def test_a_retried_task_counts_as_a_replay(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark retries a failed task within the same batch: no new writer, no marker; the
    attempt number alone says the earlier attempt may have sent a prefix."""
    write(broker, monkeypatch, rows(name, range(8)))
    write(broker, monkeypatch, rows(name, range(20)), retry=True)
    assert sorted(ns(broker, name)) == list(range(20))


def test_a_batch_the_ledger_holds_is_not_sent_at_all(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(broker, monkeypatch, rows(name, range(5)))
    report = write(broker, monkeypatch, rows(name, range(5, 9)), last_delivered=4, replay=True)
    assert report == TaskReport(query="q1")
    assert ns(broker, name) == [0, 2, 4, 1, 3]


def test_past_the_scan_bound_it_falls_back_to_at_least_once(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(broker, monkeypatch, rows(name, range(10)))
    write(broker, monkeypatch, rows(name, range(100, 130)), query="other")
    report = write(broker, monkeypatch, rows(name, range(10)), replay=True,
                   delivery_scan_messages="5")
    assert report.at_least_once == 2 and report.resumed == 0  # both partitions undecided
    assert sorted(n for n in ns(broker, name) if n < 10) == sorted([*range(10)] * 2)


def test_at_least_once_sends_again_and_adds_no_header(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(broker, monkeypatch, rows(name, range(6)), plan=False)
    write(broker, monkeypatch, rows(name, range(6)), plan=False, replay=True)
    got = landed(broker, name)
    assert sorted(n for _, n, _ in got) == sorted([*range(6)] * 2)
    assert {h for _, _, h in got} == {None}


def keyed(name: str, numbers: list[int]) -> pa.RecordBatch:
    """Rows that say what they are: an ``id`` column, as ``pg_cdc`` gives every row."""
    return pa.RecordBatch.from_pydict({
        "stream": [name] * len(numbers), "topic": ["t"] * len(numbers),
        "partition_id": [n % 2 for n in numbers], "n": numbers,
        "id": [f"row {n}" for n in numbers],
    })


def test_a_replay_reading_other_rows_sends_every_row_that_did_not_land(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21's loss: a snapshot chunk read again after the driver died sees the table as it
    is then. Rows the first attempt sent were deleted, rows were inserted and the rest came in
    another order; the replay was itself cut short and replayed. Every row of the last replay
    lands, none twice: skipped by id, not by count (a count would skip rows 40-49 here)."""
    monkeypatch.setattr(outbox, "MESSAGES_PER_SEND", 7)  # a group is many sends
    write(broker, monkeypatch, keyed(name, list(range(40))))  # crashed after 40 rows
    write(broker, monkeypatch, keyed(name, list(range(1000, 1010))), task=1)
    replay = [n for n in range(100) if not 0 <= n < 10] + list(range(200, 215))
    replay[5:25] = reversed(replay[5:25])  # another order
    interrupted = write(broker, monkeypatch, keyed(name, replay[:60]), replay=True)
    assert interrupted.resumed == 30 and interrupted.at_least_once == 0
    final = write(broker, monkeypatch, keyed(name, replay), replay=True)
    assert final.resumed == 60 and final.at_least_once == 0
    assert sum(final.routed.values()) == len(replay)
    got = [n for n in ns(broker, name) if n < 1000]
    assert sorted(got) == sorted({*range(40), *replay})  # nothing missing, nothing twice
    marks = [h for _, _, h in landed(broker, name) if h is not None]
    assert all(Origin.decode(h) is not None for h in marks)


def test_past_the_scan_bound_a_keyed_replay_skips_what_it_read_and_sends_the_rest(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox, "MESSAGES_PER_SEND", 4)
    write(broker, monkeypatch, keyed(name, list(range(20))))
    report = write(broker, monkeypatch, keyed(name, list(range(20))), replay=True,
                   delivery_scan_messages="6")
    assert report.at_least_once == 2  # both partitions: found 6 of their 10
    assert report.resumed == 12 and sum(report.routed.values()) == 20
    got = ns(broker, name)
    assert set(got) == set(range(20)) and len(got) == 28


def test_a_polled_range_read_again_after_deletes_lands_every_row_still_there(
    pg: LocalPostgres, broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mode=polling: a batch's range read again after a crash holds fewer rows when some were
    deleted in between (landed ones and others). Skipping by the rows' ids sends every row
    still there once; a count would skip rows 31 and 32, which never landed."""
    with pg.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, ts int)").format(
            sql.Identifier(name)))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, g FROM generate_series(1, 60) g").format(
            sql.Identifier(name)))
    reader = PgPollingStreamReader(CdcOptions.from_options(
        {"dsn": pg.dsn, "mode": "polling", "table": name, "tracking_column": "ts"}))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())

    def read() -> pa.RecordBatch:
        """The batch's rows as Spark reads them, routed to one partition."""
        rows = pa.Table.from_batches(
            [b for p in reader.partitions(start, end) for b in reader.read(p)]).to_pylist()
        numbers = [json.loads(r["after"])["id"] for r in rows]
        return pa.RecordBatch.from_pydict({
            "stream": [name] * len(rows), "topic": ["t"] * len(rows),
            "partition_id": [0] * len(rows), "n": numbers, "id": [r["id"] for r in rows]})

    monkeypatch.setattr(outbox, "MESSAGES_PER_SEND", 7)
    write(broker, monkeypatch, read().slice(0, 30))  # crashed after 30 rows landed
    with pg.connect() as conn:
        conn.execute(sql.SQL("DELETE FROM {} WHERE id IN (3, 10, 40, 41)").format(
            sql.Identifier(name)))
    replay = read()
    assert replay.num_rows == 56
    report = write(broker, monkeypatch, replay, replay=True)
    assert report.resumed == 28 and report.at_least_once == 0
    assert sorted(ns(broker, name)) == sorted(set(range(1, 61)) - {40, 41})
