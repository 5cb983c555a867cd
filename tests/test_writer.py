"""The iggy_routed writer against the local broker over TCP, without Spark.

``IggyRoutedStreamWriter.write`` is called the way a Spark task calls it (an iterator of Arrow
batches, a commit message back), and everything is read back through the real SDK.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from support.broker_fixtures import connect, create_topic, poll_all, run

from iggy_local import LocalIggy
from iggy_spark import read_ledger
from iggy_spark.errors import AdmissionError, ServerError
from iggy_spark.failures import Disconnected
from iggy_spark.iggy_url import IggyUrl
from iggy_spark.sink import outbox, sending
from iggy_spark.sink.control_records import LedgerRecord, decode, encode
from iggy_spark.sink.delivery import TaskIdentity
from iggy_spark.sink.encoding import message_id
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.sink.partitioning import partition_for_key
from iggy_spark.sink.report import Ledger, TaskReport
from iggy_spark.sink.writer import IggyRoutedStreamWriter

pytestmark = pytest.mark.iggy_line


def make_writer(broker: LocalIggy, **options: str) -> IggyRoutedStreamWriter:
    """A writer whose tasks run outside Spark: no query, no state, at-least-once."""
    return IggyRoutedStreamWriter(RoutedOptions.from_options({"url": broker.url, **options}))


def batch(**columns: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_rows_reach_the_topics_they_name(broker: LocalIggy, name: str) -> None:
    rows = batch(stream=[name] * 6, topic=["a", "b", "c", "a", "b", "c"], n=[0, 1, 2, 3, 4, 5])
    report = make_writer(broker).write(iter([rows]))
    assert report.routed == {f"{name}/a": 2, f"{name}/b": 2, f"{name}/c": 2}
    assert sorted(report.created) == [f"{name}/a", f"{name}/b", f"{name}/c"]
    for topic, expected in (("a", [0, 3]), ("b", [1, 4]), ("c", [2, 5])):
        got = [json.loads(m.payload)["n"] for m in poll_all(broker.address, name, topic)]
        assert got == expected


def test_null_topic_goes_to_the_default(broker: LocalIggy, name: str) -> None:
    rows = batch(stream=[name, None], topic=[None, "x"], n=[1, 2])
    report = make_writer(broker, default_stream=name, default_topic="fallback").write(iter([rows]))
    assert report.missing == {"default": 2}
    assert [json.loads(m.payload)["n"] for m in poll_all(broker.address, name, "fallback")] == [1]
    assert [json.loads(m.payload)["n"] for m in poll_all(broker.address, name, "x")] == [2]


@pytest.mark.parametrize(
    ("mode", "extra"),
    [
        ("open", {}),
        ("allowlist", {"admission.allowlist": "*/t1,*/t2,*/t3"}),
        ("denylist", {"admission.denylist": "nostream/never"}),
    ],
)
def test_cap_holds_in_every_mode(
    broker: LocalIggy, name: str, mode: str, extra: dict[str, str]
) -> None:
    rows = batch(stream=[name] * 3, topic=["t1", "t2", "t3"], n=[1, 2, 3])
    options = {
        "admission.mode": mode,
        "admission.max_destinations": "2",
        "on_admission_failure": "dlq",
        "dlq.stream": name,
        "dlq.topic": "dlq",
        **extra,
    }
    report = make_writer(broker, **options).write(iter([rows]))
    assert report.rejected == {"cap": 1}
    assert report.routed[f"{name}/t1"] == 1 and report.routed[f"{name}/t2"] == 1
    [dead] = poll_all(broker.address, name, "dlq")
    assert json.loads(dead.payload)["n"] == 3
    assert dead.headers["iggy_spark.reason"] == "cap"
    assert dead.headers["iggy_spark.topic"] == "t3"
    failing = {k: v for k, v in options.items() if not k.startswith(("dlq", "on_admission"))}
    with pytest.raises(AdmissionError, match="cap"):
        make_writer(broker, **failing).write(iter([rows]))


def test_cap_counts_destinations_admitted_by_earlier_batches(broker: LocalIggy, name: str) -> None:
    driver = Driver(broker, **{"admission.max_destinations": "2", "on_admission_failure": "drop"})
    driver.run(batch(stream=[name], topic=["old1"], n=[0]),
               batch(stream=[name], topic=["old2"], n=[0]))
    rows = batch(stream=[name, name], topic=["old1", "new"], n=[1, 2])
    [report] = driver.run(rows)
    assert report.rejected == {"cap": 1} and report.dropped == 1
    assert report.routed == {f"{name}/old1": 1}


def test_cap_holds_between_the_tasks_of_one_batch(broker: LocalIggy, name: str) -> None:
    """Two tasks of one batch meet new destinations; neither knows what the other admitted
    from the ledger (both start from the same one), yet together they admit only the cap."""
    driver = Driver(broker, **{"admission.max_destinations": "3", "on_admission_failure": "drop"})
    driver.run(batch(stream=[name], topic=["old"], n=[0]))
    first, second = driver.run(batch(stream=[name] * 2, topic=["a", "b"], n=[1, 2]),
                               batch(stream=[name] * 3, topic=["a", "c", "d"], n=[3, 4, 5]))
    assert first.routed == {f"{name}/a": 1, f"{name}/b": 1}
    assert second.routed == {f"{name}/a": 1} and second.rejected == {"cap": 2}
    assert sorted(driver.ledger().admitted) == [(name, t) for t in ("a", "b", "old")]


def test_hostile_destination_names_are_rejected_and_counted(broker: LocalIggy, name: str) -> None:
    hostile = ["", "x" * 256, "a/b", "ünïcode", "with space", "'; drop table x; --"]
    rows = batch(stream=[name] * len(hostile), topic=hostile, n=list(range(len(hostile))))
    dlq = {"on_admission_failure": "dlq", "dlq.stream": name, "dlq.topic": "dlq"}
    report = make_writer(broker, **dlq).write(iter([rows]))
    assert report.rejected == {"invalid_name": len(hostile)}
    dead = poll_all(broker.address, name, "dlq")
    assert sorted(json.loads(m.payload)["n"] for m in dead) == list(range(len(hostile)))
    assert {m.headers["iggy_spark.reason"] for m in dead} == {"invalid_name"}


def test_partition_id_out_of_range_is_rejected_without_tripping_the_breaker(
    broker: LocalIggy, name: str
) -> None:
    options = {
        "partition_key_encoding": "partition_id",
        "topic_defaults.partitions_count": "4",
        "on_admission_failure": "drop",
    }
    rows = batch(stream=[name] * 3, topic=["t"] * 3, partition_id=[1, 99, 3], n=[1, 2, 3])
    report = make_writer(broker, **options).write(iter([rows]))
    assert report.rejected == {"partition_id_out_of_range": 1}
    assert report.breakers[f"{name}/t"] == {
        "state": "closed",
        "consecutive_failures": 0,
        "last_error": None,
        "opened_at": None,
    }
    got = {m.partition: json.loads(m.payload)["n"] for m in poll_all(broker.address, name, "t")}
    assert got == {1: 1, 3: 3}


def test_per_key_order_and_payload_headers_id_round_trip(broker: LocalIggy, name: str) -> None:
    keys = [f"user-{i % 7}" for i in range(700)]
    rows = batch(
        stream=[name] * 700,
        topic=["t"] * 700,
        partition_key=keys,
        value=[f"{k}:{i}".encode() for i, k in enumerate(keys)],
        headers=[[("h", str(i))] for i in range(700)],
        id=[f"id-{i}" for i in range(700)],
    )
    rows = rows.set_column(
        4,
        "headers",
        pa.array([{"h": str(i)} for i in range(700)], pa.map_(pa.string(), pa.string())),
    )
    make_writer(broker, **{"topic_defaults.partitions_count": "3", "max_batch_bytes": "1KB"}).write(
        iter([rows])
    )
    polled = poll_all(broker.address, name, "t")
    assert len(polled) == 700
    by_key: dict[str, list[int]] = {}
    partitions: dict[str, set[int]] = {}
    for m in polled:
        key, i = m.payload.decode().split(":")
        by_key.setdefault(key, []).append(int(i))
        partitions.setdefault(key, set()).add(m.partition)
        assert m.headers == {"h": i}
        assert m.id == message_id(f"id-{i}")
    assert all(seq == sorted(seq) for seq in by_key.values())
    # the server's rule (apache/iggy: XXH32 seed 0 of the key, mod the partition count), with
    # values computed once by the xxhash package's xxh32 directly, not by the sink's function
    assert partitions == {"user-0": {2}, "user-1": {0}, "user-2": {2}, "user-3": {1},
                          "user-4": {2}, "user-5": {0}, "user-6": {2}}


def _dlq_options(name: str, **extra: str) -> dict[str, str]:
    return {"on_admission_failure": "dlq", "dlq.stream": name, "dlq.topic": "dlq", **extra}


class Driver:
    """Plays Spark: a writer per micro-batch, its tasks run one after another, each told its
    query, batch and partition as Spark's local properties would; ``commit`` folds their
    reports into the control topic's ledger. The breakers' clock is ``now``."""

    def __init__(self, broker: LocalIggy, **options: str) -> None:
        self.options = RoutedOptions.from_options({"url": broker.url, **options})
        self.query = str(uuid.uuid4())
        self.now = 1_000_000.0
        self.batch_id = 0
        self.identity: TaskIdentity | None = None

    def run(self, *tasks: pa.RecordBatch) -> list[TaskReport]:
        writer = IggyRoutedStreamWriter(self.options, clock=lambda: self.now,
                                        identify=lambda: self.identity)
        reports = []
        for partition, rows in enumerate(tasks):
            self.identity = TaskIdentity(partition, self.batch_id, 0, self.query, "run-1")
            reports.append(writer.write(iter([rows])))
        writer.commit(list(reports), self.batch_id)
        self.batch_id += 1
        return reports

    def ledger(self) -> Ledger:
        return read_ledger(self.options.url, query_id=self.query)


def test_a_failing_destination_is_isolated_while_the_others_flow(
    broker: LocalIggy, name: str, tmp_path: Any
) -> None:
    driver = Driver(broker, **_dlq_options(
        name, **{"circuit_breaker.failure_threshold": "3", "circuit_breaker.cool_down": "10s"}))
    bad = f"{name}/bad"
    rows = batch(stream=[name] * 12, topic=["ok1", "bad", "ok2"] * 4, n=list(range(12)))
    driver.run(batch(stream=[name], topic=["bad"], n=[-1]))

    async def make_topics() -> None:  # beforehand: a real server's refusal stops creating them
        client = await connect(broker.address)
        for topic in ("ok1", "ok2", "dlq"):
            await create_topic(client, name, topic, 1)

    run(make_topics())
    broker.refuse_sends(name, "bad")
    try:
        [report] = driver.run(rows)
        assert report.routed == {f"{name}/ok1": 4, f"{name}/ok2": 4, f"{name}/dlq": 4}
        assert report.rejected == {"circuit_open": 4} and report.dead_lettered == 4
        assert report.breakers[bad]["state"] == "open"
        assert report.breakers[bad]["consecutive_failures"] == 3
        dead = poll_all(broker.address, name, "dlq")
        assert [json.loads(m.payload)["n"] for m in dead] == [1, 4, 7, 10]  # in order
        assert {m.headers["iggy_spark.reason"] for m in dead} == {"circuit_open"}
        assert {m.headers["iggy_spark.topic"] for m in dead} == {"bad"}
        assert driver.ledger().data["destinations"][bad]["breaker"] == "open"
        # the next batch refuses at once: no send, so no outcome recorded for it
        driver.now += 9
        [report] = driver.run(rows)
        assert report.rejected == {"circuit_open": 4} and report.routed[f"{name}/ok1"] == 4
        assert bad not in report.breakers
    finally:
        broker.refuse_sends(name, "bad", refuse=False)
    # after the cool-down, of two tasks exactly one sends the probe; it closes the breaker
    driver.now += 1
    probe, other = driver.run(rows, rows)
    assert probe.routed[bad] == 4 and probe.breakers[bad]["state"] == "closed"
    assert other.rejected == {"circuit_open": 4} and bad not in other.breakers
    assert driver.ledger().data["destinations"][bad]["breaker"] == "closed"
    first, second = driver.run(rows, rows)
    assert first.routed[bad] == second.routed[bad] == 4 and not first.rejected
    assert [json.loads(m.payload)["n"] for m in poll_all(broker.address, name, "bad")] == [
        -1] + [1, 4, 7, 10] * 3


def test_an_open_breaker_under_policy_error_fails_the_task(broker: LocalIggy, name: str) -> None:
    options = {"circuit_breaker.failure_threshold": "2"}
    make_writer(broker, **options).write(iter([batch(stream=[name], topic=["bad"], n=[0])]))
    broker.refuse_sends(name, "bad")
    try:
        with pytest.raises(AdmissionError, match="circuit_open"):
            make_writer(broker, **options).write(iter([batch(stream=[name], topic=["bad"],
                                                             n=[1])]))
    finally:
        broker.refuse_sends(name, "bad", refuse=False)


def test_a_missing_destination_with_creation_off_is_unknown_not_a_breaker_failure(
    broker: LocalIggy, name: str
) -> None:
    async def make_stream() -> None:
        client = await connect(broker.address)
        await client.create_stream(name)
        await create_topic(client, name, "dlq", 1)

    run(make_stream())
    options = _dlq_options(name, create_destinations="false",
                           **{"circuit_breaker.failure_threshold": "1"})
    writer = make_writer(broker, **options)
    for _ in range(2):
        report = writer.write(iter([batch(stream=[name], topic=["missing"], n=[1])]))
        assert report.rejected == {"unknown": 1} and report.dead_lettered == 1
        assert f"{name}/missing" not in report.breakers  # a configuration fact, no outcome
    dead = poll_all(broker.address, name, "dlq")
    assert [m.headers["iggy_spark.reason"] for m in dead] == ["unknown", "unknown"]


def _create_concurrently(url: str, stream: str, barrier: Any, out: Any) -> None:
    writer = IggyRoutedStreamWriter(RoutedOptions.from_options({"url": url}))
    barrier.wait()
    out.put(writer.write(iter([batch(stream=[stream], topic=["shared"], n=[1])])).created)
    out.close()
    out.join_thread()
    # Skip interpreter teardown: the SDK's runtime threads are still alive and, under load,
    # tearing them down has aborted the child after its work was done and reported.
    os._exit(0)


def test_four_tasks_creating_one_destination_at_once(broker: LocalIggy, name: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=_create_concurrently, args=(broker.url, name, barrier, out))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    created = [out.get(timeout=5) for _ in procs]
    assert sum(len(c) for c in created) <= 1  # at most one task saw itself create it
    assert len(poll_all(broker.address, name, "shared")) == 4


def test_a_streams_existing_topics_are_learned_in_one_listing(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Topics made beforehand (with their own partition counts) are never looked up one by one;
    the one that is missing is still created, and keys spread over the real counts."""

    async def make() -> None:
        client = await connect(broker.address)
        await client.create_stream(name)
        await create_topic(client, name, "two", 2)
        await create_topic(client, name, "five", 5)

    run(make())
    ensured: list[str] = []
    real = sending.ensure_topic

    async def ensure(conn: Any, destination: Any, **kwargs: Any) -> sending.Topic:
        ensured.append(str(destination))
        return await real(conn, destination, **kwargs)

    monkeypatch.setattr(sending, "ensure_topic", ensure)
    keys = [f"k{i}" for i in range(40)]
    rows = batch(stream=[name] * 120, topic=["two", "five", "new"] * 40,
                 partition_key=[k for k in keys for _ in range(3)], n=list(range(120)))
    report = make_writer(broker).write(iter([rows]))
    assert ensured == [f"{name}/new"] and report.created == [f"{name}/new"]
    for topic, count in (("two", 2), ("five", 5)):
        for partition in range(count):
            got = {json.loads(m.payload)["n"] // 3
                   for m in poll_all(broker.address, name, topic, partition)}
            assert got == {i for i, k in enumerate(keys)
                           if partition_for_key(k.encode(), count) == partition}


def test_ledger_folds_reports_once_per_batch() -> None:
    ledger = Ledger()
    report = TaskReport(
        routed=Counter({"s/t": 3}),
        rejected=Counter({"cap": 1}),
        admitted=[("s", "t")],
        created=["s/t"],
    )
    assert ledger.apply(0, [report]) is not None
    assert ledger.apply(0, [report]) is None  # Spark may commit a batch id twice
    record = decode(encode(LedgerRecord(ledger.data)))
    assert isinstance(record, LedgerRecord)
    reloaded = Ledger(record.data)
    assert reloaded.data["destinations"]["s/t"]["messages"] == 3
    assert reloaded.data["rejected"] == {"cap": 1}
    assert reloaded.admitted == {("s", "t")}


@pytest.mark.services  # its own broker
def test_an_unreachable_server_fails_the_task_without_tripping_breakers(name: str) -> None:
    with LocalIggy(process=True) as down:
        writer = make_writer(down, send_timeout="2s",
                             **{"circuit_breaker.failure_threshold": "1"})
        writer.write(iter([batch(stream=[name], topic=["t"], n=[1])]))  # topic now exists
        down.stop()
        # with failure_threshold=1 a counted failure would open the breaker and fail the task
        # with circuit_open instead: the disconnection is not the destination's fault
        with pytest.raises(Disconnected, match="unreachable for 2s"):
            writer.write(iter([batch(stream=[name], topic=["t"], n=[2])]))
        down.start()
        report = writer.write(iter([batch(stream=[name], topic=["t"], n=[3])]))
        assert report.routed == {f"{name}/t": 1}


def test_wrong_credentials_fail_the_task_without_blaming_a_destination(
    broker: LocalIggy, name: str
) -> None:
    wrong = dataclasses.replace(IggyUrl.parse(broker.url), password="not-the-password").format(
        reveal_password=True)
    writer = IggyRoutedStreamWriter(RoutedOptions.from_options(
        {"url": wrong, "circuit_breaker.failure_threshold": "1"}))
    with pytest.raises(ServerError, match="Invalid credentials") as info:
        writer.write(iter([batch(stream=[name], topic=["t"], n=[1])]))
    assert "not-the-password" not in str(info.value)  # and not circuit_open: nobody blamed


def test_prewarm_creates_the_literal_allowlist_entries_once_and_never_raises(
    broker: LocalIggy, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    from support.broker_fixtures import connect, run

    from iggy_spark.sink.writer import prewarm_once

    allow = {"admission.mode": "allowlist", "admission.allowlist": f"{name}/a,{name}/b,*/c"}
    prewarm_once(RoutedOptions.from_options({"url": broker.url, **allow}))

    async def topics() -> list[str]:
        client = await connect(broker.address)
        stream = await client.get_stream(name)
        assert stream is not None
        return sorted(t.name for t in await client.get_topics(name))

    assert run(topics()) == ["a", "b"]  # */c names no topic in particular
    with LocalIggy() as other:
        down = other.url
    options = RoutedOptions.from_options({"url": down, "prewarm_deadline": "500ms", **allow})
    prewarm_once(options)  # nothing listens: logged, not raised, given up at the deadline
    assert f"{name}/a not ready: not ready within 0.5s" in caplog.text


def test_dead_letters_are_sent_as_the_buffer_fills_not_all_at_the_end(
    broker: LocalIggy, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_batch_bytes`` bounds a task's memory for rows that go to the DLQ too: 60 refused
    rows of about 1 KB with a 4 KB buffer are sent in many flushes while routing."""
    flushes: list[int] = []
    real_flush = outbox.Outbox.flush

    def counted(self: outbox.Outbox) -> None:
        flushes.append(self.buffered)
        real_flush(self)

    monkeypatch.setattr(outbox.Outbox, "flush", counted)
    rows = batch(stream=[name] * 60, topic=["no such/topic"] * 60, pad=["x" * 1000] * 60)
    dlq = {"on_admission_failure": "dlq", "dlq.stream": name, "dlq.topic": "dlq",
           "max_batch_bytes": "4KB"}
    report = make_writer(broker, **dlq).write(iter([rows]))
    assert report.dead_lettered == 60
    assert len(poll_all(broker.address, name, "dlq")) == 60
    assert len(flushes) >= 12 and max(flushes) < 8 * 1024
