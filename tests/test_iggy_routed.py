"""iggy_routed end to end: Spark streaming queries into the local broker, read back over TCP.

Rows are prepared as Parquet files and streamed with ``trigger(availableNow=True)``, so each
test controls exactly which rows each micro-batch holds.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from support.broker_fixtures import poll_all

import iggy_spark
from iggy_local import LocalIggy
from iggy_spark.sink.delivery import ORIGIN_HEADER, Origin
from iggy_spark.sink.encoding import message_id


class Feed:
    """A directory of Parquet files streamed by Spark: ``add`` rows, then ``run`` a query."""

    def __init__(self, spark: SparkSession, root: Path, schema: str) -> None:
        self.spark, self.dir, self.schema = spark, root / "feed", schema
        self.checkpoint = str(root / "checkpoint")
        self.files = 0

    def add(self, rows: list[tuple[Any, ...]], partitions: int = 1) -> None:
        df = self.spark.createDataFrame(rows, self.schema).repartition(partitions)
        df.write.mode("append").parquet(str(self.dir))
        self.files += 1

    def run(self, url: str, **options: str) -> StreamingQuery:
        stream: DataFrame = self.spark.readStream.schema(self.schema).parquet(str(self.dir))
        query = (
            stream.writeStream.format("iggy_routed")
            .option("url", url)
            .option("checkpointLocation", self.checkpoint)
            .options(**options)
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination()  # a failure stays readable from query.exception()
        return query


SCHEMA = "stream string, topic string, partition_key string, n int"


def test_three_event_types_reach_three_topics_and_null_goes_to_the_default(
    spark: SparkSession, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    feed = Feed(spark, tmp_path, SCHEMA)
    feed.add([(name, f"type{i % 3}", None, i) for i in range(30)] + [(name, None, None, 99)])
    query = feed.run(broker.url, default_stream=name, default_topic="unrouted")
    assert query.exception() is None
    for t in range(3):
        got = sorted(json.loads(m.payload)["n"] for m in poll_all(broker.address, name, f"type{t}"))
        assert got == list(range(t, 30, 3))
    [fallback] = poll_all(broker.address, name, "unrouted")
    assert json.loads(fallback.payload) == {"n": 99}
    rows = iggy_spark.destinations(feed.checkpoint, url=broker.url).collect()
    table = {(r.topic, r.messages) for r in rows}
    assert table == {("type0", 10), ("type1", 10), ("type2", 10), ("unrouted", 1)}


def test_the_cap_holds_across_batches_for_the_whole_query(
    spark: SparkSession, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    feed = Feed(spark, tmp_path, SCHEMA)
    options = {
        "admission.max_destinations": "2",
        "on_admission_failure": "dlq",
        "dlq.stream": name,
        "dlq.topic": "dead",
    }
    feed.add([(name, "a", None, 1), (name, "b", None, 2)])
    assert feed.run(broker.url, **options).exception() is None
    feed.add([(name, "c", None, 3), (name, "a", None, 4)])  # a later batch, a third destination
    assert feed.run(broker.url, **options).exception() is None
    [dead] = poll_all(broker.address, name, "dead")
    assert json.loads(dead.payload)["n"] == 3
    assert (dead.headers["iggy_spark.reason"], dead.headers["iggy_spark.topic"]) == ("cap", "c")
    assert [json.loads(m.payload)["n"] for m in poll_all(broker.address, name, "a")] == [1, 4]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"admission.mode": "allowlist", "admission.allowlist": "*/*"}, "admission.allowlist"),
        ({"on_missing_destination": "default"}, "default_stream"),
        ({"on_admission_failure": "dlq"}, "dlq.stream"),
    ],
)
def test_invalid_combinations_fail_at_query_start_naming_the_option(
    spark: SparkSession,
    broker: LocalIggy,
    tmp_path: Path,
    name: str,
    options: dict[str, str],
    message: str,
) -> None:
    feed = Feed(spark, tmp_path, SCHEMA)
    feed.add([(name, "t", None, 1)])
    query = feed.run(broker.url, **options)
    assert query.exception() is not None
    assert message in str(query.exception())
    with pytest.raises(LookupError):
        poll_all(broker.address, name, "t")  # nothing moved


def test_payload_headers_and_ids_round_trip_and_keys_keep_their_order(
    spark: SparkSession, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    schema = (
        "stream string, topic string, partition_key string, value binary, "
        "headers map<string,string>, id string"
    )
    feed = Feed(spark, tmp_path, schema)
    rows = [
        (name, "t", f"k{i % 5}", f"payload-{i}".encode(), {"seq": str(i)}, f"msg-{i}")
        for i in range(500)
    ]
    feed.add(rows, partitions=1)
    assert feed.run(broker.url, **{"topic_defaults.partitions_count": "4"}).exception() is None
    polled = poll_all(broker.address, name, "t")
    assert sorted(m.payload for m in polled) == sorted(r[3] for r in rows)
    per_key: dict[str, list[int]] = {}
    marked = set()
    for m in sorted(polled, key=lambda m: (m.partition, m.offset)):
        i = int(m.payload.decode().split("-")[1])
        headers = dict(m.headers)
        # the user's headers arrive as sent; the last message of each send (here: of each
        # partition) also carries effectively-once's origin header
        if ORIGIN_HEADER in headers:
            assert Origin.decode(headers.pop(ORIGIN_HEADER)) is not None
            marked.add((m.partition, m.offset))
        assert headers == {"seq": str(i)} and m.id == message_id(f"msg-{i}")
        per_key.setdefault(f"k{i % 5}", []).append(i)
    last = {p: max(m.offset for m in polled if m.partition == p) for p in {m.partition
                                                                          for m in polled}}
    assert marked == set(last.items())
    assert all(seq == sorted(seq) for seq in per_key.values())


def test_parallel_tasks_create_one_destination_once(
    spark: SparkSession, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    feed = Feed(spark, tmp_path, SCHEMA)
    feed.add([(name, "shared", None, i) for i in range(40)], partitions=4)
    assert feed.run(broker.url).exception() is None
    assert sorted(
        json.loads(m.payload)["n"] for m in poll_all(broker.address, name, "shared")
    ) == list(range(40))
    [row] = iggy_spark.destinations(feed.checkpoint, url=broker.url).collect()
    assert (row.messages, row.created) == (40, True)


def test_a_contract_column_of_the_wrong_type_fails_at_query_start_naming_it(
    spark: SparkSession, broker: LocalIggy, tmp_path: Path, name: str
) -> None:
    feed = Feed(spark, tmp_path, "stream string, topic int, n int")
    feed.add([(name, 1, 1)])
    query = feed.run(broker.url)
    assert "column 'topic': has type int; the sink accepts string" in str(query.exception())
    with pytest.raises(LookupError):
        poll_all(broker.address, name, "1")  # nothing moved


@pytest.mark.parametrize(("kind", "schema"), [
    ("json", "stream string, topic string, text string, n int"),
    ("text", "stream string, topic string, value string"),
    ("binary", "stream string, topic string, value binary"),
])
def test_payloads_arrive_byte_for_byte_text_and_binary(
    spark: SparkSession, broker: LocalIggy, name: str, tmp_path: Path, kind: str, schema: str,
) -> None:
    """The SDK's messages are made from ``str`` when the payloads are text (JSON rows, a
    string value column) and from ``bytes`` otherwise: either way the payload that lands is the
    row's bytes, non-ASCII, escapes and bytes that are not UTF-8 included."""
    texts = ["plain", "é ü 中文 🎉", 'quo"te \\ \n tab\t', "\u2028", "x" * 3000]
    feed = Feed(spark, tmp_path, schema)
    if kind == "json":
        rows: list[tuple[Any, ...]] = [(name, "t", text, i) for i, text in enumerate(texts)]
        expected = [json.dumps({"text": t, "n": i}, ensure_ascii=False, separators=(",", ":"))
                    .encode() for i, t in enumerate(texts)]
    elif kind == "text":
        rows = [(name, "t", text) for text in texts]
        expected = [text.encode() for text in texts]
    else:
        expected = [b"\xff\xfe\x00 not utf-8", b"\xc3", bytes(range(256)), "é".encode()]
        rows = [(name, "t", payload) for payload in expected]
    feed.add(rows)
    assert feed.run(broker.url).exception() is None
    polled = sorted(poll_all(broker.address, name, "t"), key=lambda m: m.offset)
    assert [m.payload for m in polled] == expected
