"""A destination name is a name: rows whose stream or topic is ``"0"``, ``"1"`` or ``"2"`` land
in the streams and topics of those names, never in the ones the server numbered 0, 1 or 2, and
never in a query's control topic or the dead-letter topic, whatever they are numbered.

The SDK reads text of digits as an id (``get_topic("1", "0")`` is topic 0 of stream 1), which
is how such rows reached other queries' destinations and control topics. Every check here reads
back by the ids the server listed for each name (``get_streams``/``get_topics``), never by the
names themselves. Each scenario runs on a broker of its own, so the ids of its streams are the
ones the test created, from 0.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from apache_iggy import IggyClient
from pyspark.sql import SparkSession
from support.broker_fixtures import Polled, apoll_all, connect, run

from iggy_local import LocalIggy
from iggy_spark import names
from iggy_spark.identifiers import identifier, name_identifier, reads_as_id
from iggy_spark.sink.delivery import TaskIdentity
from iggy_spark.sink.options import RoutedOptions, TopicDefaults
from iggy_spark.sink.refusals import REASONS
from iggy_spark.sink.report import TaskReport
from iggy_spark.sink.topic_request import create_topic
from iggy_spark.sink.writer import IggyRoutedStreamWriter

DOCS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "iggy_routed.md"
DIGITS = ("0", "1", "2")


# -- unit: the encodings and the docs ---------------------------------------------------------

@pytest.mark.parametrize("text", ["0", "1", "+5", str(2**32 - 1), "orders"])
def test_a_name_identifier_is_the_name_whatever_it_reads_as(text: str) -> None:
    assert name_identifier(text, "stream") == bytes([2, len(text)]) + text.encode()


def test_an_int_is_always_the_numeric_id_and_digits_read_as_one() -> None:
    assert identifier(7, "stream") == identifier("7", "stream") == struct.pack("<BBI", 1, 4, 7)
    assert reads_as_id("0") and reads_as_id("+1") and not reads_as_id("1a")
    assert not reads_as_id(str(2**32))  # too large for a u32: the SDK sends it as a name


def test_every_refusal_reason_is_in_the_docs_table_and_only_those() -> None:
    table = DOCS_PAGE.read_text().split("| reason | why |", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)
    assert sorted(documented) == sorted(r.value for r in REASONS)


# -- services: the local broker ---------------------------------------------------------------

async def _ids(client: IggyClient) -> dict[tuple[str, str], tuple[int, int]]:
    """Every topic on the server by (stream name, topic name), as the server lists them."""
    found = {}
    for stream in await client.get_streams():
        for topic in await client.get_topics(int(stream.id)):
            found[str(stream.name), str(topic.name)] = (int(stream.id), int(topic.id))
    return found


async def _contents(address: str) -> dict[tuple[str, str], list[Polled]]:
    """Every message on the server, by the names of its stream and topic."""
    client = await connect(address)
    return {where: await apoll_all(client, *ids) for where, ids in (await _ids(client)).items()}


def _contents_now(broker: LocalIggy) -> dict[tuple[str, str], list[Polled]]:
    return run(_contents(broker.address))


class _Query:
    """Plays Spark for one streaming query of ``iggy_routed``: one task per batch, run in this
    process, then the driver's commit (which appends the ledger to the query's control
    topic)."""

    def __init__(self, broker: LocalIggy, **options: str) -> None:
        self.options = RoutedOptions.from_options({"url": broker.url, **options})
        self.id = str(uuid.uuid4())
        self.batch = 0

    @property
    def control_topic(self) -> tuple[str, str]:
        return self.options.state_stream, f"query-{self.id}"

    def run(self, **columns: list[Any]) -> TaskReport:
        identity = TaskIdentity(0, self.batch, 0, self.id, "run-1")
        writer = IggyRoutedStreamWriter(self.options, identify=lambda: identity)
        report = writer.write(iter([pa.RecordBatch.from_pydict(columns)]))
        writer.commit([report], self.batch)
        self.batch += 1
        return report


def _query_a(broker: LocalIggy) -> _Query:
    """Query A of the report, writing to ``alpha/beta`` and ``alpha/1`` on a fresh server: its
    destinations and its control topic are numbered with the digits B's rows name."""
    a = _Query(broker)
    a.run(stream=["alpha"] * 2, topic=["beta", "1"], n=[-1, -2])
    ids = run(_ids_of(broker))
    numbered = {(s, t) for s in range(3) for t in range(3)}
    assert {ids["alpha", "beta"], ids["alpha", "1"], ids[a.control_topic]} <= numbered, ids
    return a


async def _ids_of(broker: LocalIggy) -> dict[tuple[str, str], tuple[int, int]]:
    return await _ids(await connect(broker.address))


def _digit_rows() -> dict[str, list[Any]]:
    """60 rows of query B, each naming one of the nine destinations of digits."""
    streams = [DIGITS[i % 3] for i in range(60)]
    topics = [DIGITS[i // 3 % 3] for i in range(60)]
    return {"stream": streams, "topic": topics, "n": list(range(60))}


@pytest.mark.services
@pytest.mark.iggy_line
def test_rows_named_with_digits_land_in_the_destinations_of_those_names() -> None:
    with LocalIggy() as broker:
        a = _query_a(broker)
        before = _contents_now(broker)
        b = _Query(broker, **{"topic_defaults.partitions_count": "3"})
        rows = _digit_rows()
        report = b.run(**rows)
        after = _contents_now(broker)
    assert sum(report.routed.values()) == 60 and not report.rejected
    for where in (("alpha", "beta"), ("alpha", "1"), a.control_topic):
        assert after[where] == before[where], f"query B's rows reached {where}"
    expected: dict[tuple[str, str], list[int]] = {}
    for n, where in enumerate(zip(rows["stream"], rows["topic"], strict=True)):
        expected.setdefault(where, []).append(n)
    assert len(expected) == 9
    for where, numbers in expected.items():
        assert sorted(json.loads(m.payload)["n"] for m in after[where]) == numbers, where


@pytest.mark.services
@pytest.mark.iggy_line
def test_the_state_stream_and_the_dlq_are_refused_to_rows_whatever_the_allowlist_says() -> None:
    with LocalIggy() as broker:
        a = _query_a(broker)
        dlq = {"on_admission_failure": "dlq", "dlq.stream": "ops", "dlq.topic": "dead"}
        b = _Query(broker, **{"admission.mode": "allowlist",
                              "admission.allowlist": "iggy_spark_state/*,ops/*,alpha/gamma",
                              **dlq})
        b.run(stream=["alpha"], topic=["gamma"], n=[0])
        before = _contents_now(broker)
        control_stream, control_topic = a.control_topic
        report = b.run(stream=[control_stream, control_stream, "ops", "alpha"],
                       topic=[control_topic, "fresh", "dead", "gamma"], n=[1, 2, 3, 4])
        after = _contents_now(broker)
    assert report.rejected == {"reserved": 3} and report.dead_lettered == 3
    assert after[a.control_topic] == before[a.control_topic]
    assert (control_stream, "fresh") not in after  # nothing was created there
    assert ("ops", "dead") not in before
    assert [(m.headers["iggy_spark.reason"], m.headers["iggy_spark.stream"],
             m.headers["iggy_spark.topic"]) for m in after["ops", "dead"]] == [
        ("reserved", control_stream, control_topic), ("reserved", control_stream, "fresh"),
        ("reserved", "ops", "dead")]
    assert len(after["alpha", "gamma"]) == 2


@pytest.mark.services
@pytest.mark.iggy_line
def test_a_state_stream_named_with_digits_holds_the_control_topics() -> None:
    with LocalIggy() as broker:
        run(_create_stream(broker, "alpha"))  # the stream the server numbers 0
        query = _Query(broker, state_stream="0")
        query.run(stream=["alpha"], topic=["beta"], n=[0])
        query.run(stream=["alpha"], topic=["beta"], n=[1])
        after = _contents_now(broker)
    assert ("alpha", f"query-{query.id}") not in after
    assert len(after["0", f"query-{query.id}"]) >= 2  # a ledger per batch, at least
    assert len(after["alpha", "beta"]) == 2


async def _create_stream(broker: LocalIggy, name: str) -> None:
    await (await connect(broker.address)).create_stream(name)


async def _as_the_sdk_reads_it(client: IggyClient, name: str) -> int | None:
    found = await client.get_stream(name)  # digits are an id
    return None if found is None else int(found.id)


async def _topic_as_the_sdk_reads_it(
    client: IggyClient, stream: int, name: str
) -> names.FoundTopic | None:
    found = await client.get_topic(stream, name)
    return None if found is None else names.FoundTopic(int(found.id), int(found.partitions_count))


@pytest.mark.services
@pytest.mark.iggy_line
def test_a_destination_found_at_a_reserved_id_is_refused_however_it_was_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second line of defence: were names read as ids again (an SDK, a lookup), rows
    reaching the state stream's or the DLQ's ids are still refused, by those ids."""
    with LocalIggy() as broker:
        a = _query_a(broker)
        b = _Query(broker, on_admission_failure="dlq", **{"dlq.stream": "ops",
                                                         "dlq.topic": "dead"})
        b.run(stream=["alpha/"], topic=["beta"], n=[0])  # invalid_name: the DLQ exists now
        ids = run(_ids_of(broker))
        state, control = ids[a.control_topic]
        dlq_stream, dlq_topic = ids["ops", "dead"]
        before = _contents_now(broker)
        monkeypatch.setattr(names, "stream_id", _as_the_sdk_reads_it)
        monkeypatch.setattr(names, "topic", _topic_as_the_sdk_reads_it)
        report = b.run(stream=[str(state), str(dlq_stream), "alpha"],
                       topic=[str(control), str(dlq_topic), "beta"], n=[1, 2, 3])
        after = _contents_now(broker)
    assert report.rejected == {"reserved": 2}
    assert after[a.control_topic] == before[a.control_topic]
    dead = after["ops", "dead"][len(before["ops", "dead"]):]
    assert [m.headers["iggy_spark.reason"] for m in dead] == ["reserved", "reserved"]


@pytest.mark.services
@pytest.mark.iggy_line
def test_a_name_of_digits_is_looked_up_as_that_name() -> None:
    async def scenario(broker: LocalIggy) -> None:
        client = await connect(broker.address)
        for stream in ("alpha", "1", "0"):  # numbered 0, 1, 2
            await client.create_stream(stream)
        assert await names.stream_id(client, "1") == 1
        assert await names.stream_id(client, "0") == 2
        assert await names.stream_id(client, "2") is None  # stream id 2 is named 0
        await create_topic(client, 2, "x", TopicDefaults(1))
        await create_topic(client, 2, "0", TopicDefaults(4))
        assert await names.topic(client, 2, "0") == names.FoundTopic(1, 4)
        assert await names.topic(client, 2, "1") is None  # topic id 1 is named 0

    with LocalIggy() as broker:
        asyncio.run(scenario(broker))


@pytest.mark.services
@pytest.mark.iggy_line
def test_a_default_dlq_takes_rows_without_a_destination_but_rows_may_not_name_it() -> None:
    with LocalIggy() as broker:
        query = _Query(broker, default_stream="ops", default_topic="dead",
                       on_admission_failure="dlq", **{"dlq.stream": "ops", "dlq.topic": "dead"})
        report = query.run(stream=[None, "ops"], topic=[None, "dead"], n=[0, 1])
        dead = _contents_now(broker)["ops", "dead"]
    assert report.rejected == {"reserved": 1} and report.routed == {"ops/dead": 2}
    assert [(json.loads(m.payload)["n"], m.headers.get("iggy_spark.reason")) for m in dead] == [
        (0, None), (1, "reserved")]


@pytest.mark.e2e
def test_a_spark_query_writes_rows_named_with_digits_to_those_names_and_never_its_own_state(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The report's case through Spark: query A's destinations and control topic are numbered
    0 to 2; a streaming query B whose rows name the digits, the state stream and the DLQ writes
    the digits' rows to the destinations of those names and parks the others in its DLQ."""
    rows = _digit_rows()
    rows["stream"] += ["iggy_spark_state", "dead"]
    rows["topic"] += ["query-x", "letters"]
    rows["n"] += [60, 61]
    feed = tmp_path / "feed"
    spark.createDataFrame(list(zip(rows["stream"], rows["topic"], rows["n"], strict=True)),
                          "stream string, topic string, n int").write.parquet(str(feed))
    with LocalIggy() as broker:
        a = _query_a(broker)
        before = _contents_now(broker)
        query = (spark.readStream.schema("stream string, topic string, n int")
                 .parquet(str(feed)).writeStream.format("iggy_routed")
                 .option("url", broker.url).option("checkpointLocation", str(tmp_path / "chk"))
                 .option("on_admission_failure", "dlq")
                 .option("dlq.stream", "dead").option("dlq.topic", "letters")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        after = _contents_now(broker)
    assert query.exception() is None
    for where in (("alpha", "beta"), ("alpha", "1"), a.control_topic):
        assert after[where] == before[where], f"query B's rows reached {where}"
    for stream in DIGITS:
        for topic in DIGITS:
            got = sorted(json.loads(m.payload)["n"] for m in after[stream, topic])
            assert got == [n for n in range(60) if (DIGITS[n % 3], DIGITS[n // 3 % 3]) == (
                stream, topic)]
    assert sorted(json.loads(m.payload)["n"] for m in after["dead", "letters"]) == [60, 61]
    assert ("iggy_spark_state", "query-x") not in after
