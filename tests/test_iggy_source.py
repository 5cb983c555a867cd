"""``format("iggy")`` against the local broker: batch reads with their columns and offset
bounds, streaming with admission control and new topics, and bad input refused by name."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from support.iggy_source_support import message_id, payload, reported_next, seed

import iggy_spark.source


def reader(spark: Any, broker: Any, stream: str, **options: str) -> Any:
    read = spark.read.format("iggy").option("url", broker.url).option("stream", stream)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def test_batch_read_gives_every_message_with_its_columns(spark: Any, broker: Any,
                                                         name: str) -> None:
    seed(broker.address, name, ["a", "b"], partitions=2, per_partition=30)
    rows = reader(spark, broker, name, topics="a,b", max_messages_per_partition="7",
                  poll_messages="4").collect()
    assert len(rows) == 120
    assert sorted((r.topic, r.partition, r.offset) for r in rows) == [
        (t, p, o) for t in "ab" for p in range(2) for o in range(30)]
    for r in rows:
        assert r.stream == name
        assert r.payload == payload(r.topic, r.partition, r.offset)
        assert r.id == str(message_id(r.partition, r.offset))
        assert r.headers == {"n": str(r.offset).encode(), "k": b"v"}
        assert r.timestamp is not None


def test_batch_read_between_offsets(spark: Any, broker: Any, name: str) -> None:
    seed(broker.address, name, ["a"], partitions=2, per_partition=10)
    rows = reader(spark, broker, name, topics="a",
                  starting_offsets='{"a": {"0": 4, "1": -1}}',
                  ending_offsets='{"a": {"0": 6}}').collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(0, 4), (0, 5)]
    latest = reader(spark, broker, name, topics="a", starting_offsets="latest")
    assert latest.count() == 0


def test_what_iggy_routed_writes_iggy_reads_back(spark: Any, broker: Any, name: str,
                                                 tmp_path: Path) -> None:
    """Spark alone closes the loop: rows routed into Iggy come back with their payloads, headers
    and ids, each key's rows in the order they were sent."""
    from iggy_spark.sink.encoding import message_id as routed_id

    rows = [(name, "t", f"k{i % 3}", f"payload-{i}".encode(), {"seq": str(i)}, f"msg-{i}")
            for i in range(200)]
    schema = ("stream string, topic string, partition_key string, value binary, "
              "headers map<string,string>, id string")
    spark.createDataFrame(rows, schema).coalesce(1).write.parquet(str(tmp_path / "feed"))
    (spark.readStream.schema(schema).parquet(str(tmp_path / "feed")).writeStream
     .format("iggy_routed").option("url", broker.url)
     .option("topic_defaults.partitions_count", "2")
     .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
     .awaitTermination(60))

    back = reader(spark, broker, name, topics="t").orderBy("partition", "offset").collect()
    assert sorted(r.payload for r in back) == sorted(r[3] for r in rows)
    per_key: dict[str, list[int]] = {}
    for r in back:
        i = int(r.payload.decode().split("-")[1])
        assert r.headers["seq"] == str(i).encode()
        assert r.id == str(routed_id(f"msg-{i}"))
        per_key.setdefault(f"k{i % 3}", []).append(i)
    assert all(seq == sorted(seq) for seq in per_key.values())


def test_a_stream_given_by_its_numeric_id_is_read(spark: Any, broker: Any, name: str) -> None:
    """``stream`` takes a name or a numeric id, as the SDK does: the source's own polls must
    name the same stream its planning found."""
    from support.broker_fixtures import connect, run

    seed(broker.address, name, ["a"], partitions=1, per_partition=5)

    async def stream_id() -> int:
        details = await (await connect(broker.address)).get_stream(name)
        assert details is not None
        return int(details.id)

    rows = reader(spark, broker, str(run(stream_id())), topics="a").collect()
    assert sorted(r.offset for r in rows) == list(range(5))


def test_batch_read_from_a_timestamp(spark: Any, broker: Any, name: str) -> None:
    seed(broker.address, name, ["a"], partitions=2, per_partition=5)
    time.sleep(0.01)
    since = datetime.now(UTC).isoformat()
    time.sleep(0.01)
    seed(broker.address, name, ["a"], partitions=1, per_partition=3, create=False, first=5)
    rows = reader(spark, broker, name, topics="a", starting_timestamp=since).collect()
    # partition 1 got nothing after `since`: it starts at its end
    assert sorted((r.partition, r.offset) for r in rows) == [(0, 5), (0, 6), (0, 7)]
    before = reader(spark, broker, name, topics="a", ending_timestamp=since).collect()
    # partition 0 stops before its first message after `since`; partition 1 is read to its end
    assert sorted((r.partition, r.offset) for r in before) == [(p, o) for p in (0, 1)
                                                               for o in range(5)]
    with pytest.raises(AnalysisException,
                       match="ConfigError: option 'ending_timestamp': offset 5 of topic 'a' "
                             "partition 0 is before its starting offset 8"):
        reader(spark, broker, name, topics="a", ending_timestamp=since,
               starting_offsets="latest").collect()


@pytest.mark.iggy_line
@pytest.mark.parametrize("subscription", [{"topic_pattern": ".*"}, {"topics": "0"}])
def test_a_topic_named_with_digits_only_is_refused_not_read_as_another(
    broker: Any, name: str, subscription: dict[str, str]
) -> None:
    """Iggy accepts a topic named "0", but its clients read "0" as topic id 0: here the topic
    "orders". Planning must refuse it, naming the option, rather than read "orders" twice (or
    label its messages "0")."""
    from iggy_spark.errors import ConfigError
    from iggy_spark.source.options import SourceOptions
    from iggy_spark.source.reader import IggyStreamReader

    seed(broker.address, name, ["orders", "0"], partitions=1, per_partition=2)
    options = SourceOptions.from_options({"url": broker.url, "stream": name, **subscription})
    option = next(iter(subscription))
    with pytest.raises(ConfigError, match=f"option '{option}': '0' reads as a topic id, and "
                                          "names topic 'orders'"):
        IggyStreamReader(options, None).initialOffset()


@pytest.mark.iggy_line
@pytest.mark.parametrize("fail", [True, False])
def test_a_range_whose_topic_was_deleted_after_planning_is_lost_not_stuck(
    broker: Any, name: str, fail: bool
) -> None:
    """A batch planned, then its topic deleted (the query stopped in between): its replay must
    not fail on every attempt; the gone range is data loss, refused or skipped."""
    from support.broker_fixtures import connect, run

    from iggy_spark.source.errors import DataLoss
    from iggy_spark.source.offsets import Range
    from iggy_spark.source.options import SourceOptions
    from iggy_spark.source.polling import read_range

    seed(broker.address, name, ["gone"], partitions=1, per_partition=5)
    options = SourceOptions.from_options({"url": broker.url, "stream": name, "topics": "gone",
                                          "fail_on_data_loss": str(fail).lower()})
    assert sum(b.num_rows for b in read_range(options, Range("gone", 0, 0, 5))) == 5

    async def delete() -> None:
        await (await connect(broker.address)).delete_topic(name, "gone")

    run(delete())
    if fail:
        with pytest.raises(DataLoss, match=r"offsets \[0, 5\) of topic 'gone' partition 0 "
                                           r"are lost \(its topic or partition no longer"):
            list(read_range(options, Range("gone", 0, 0, 5)))
    else:
        assert list(read_range(options, Range("gone", 0, 0, 5))) == []


@pytest.mark.parametrize(("options", "message"), [
    ({"topics": "a", "stream": "missing"}, "option 'stream': stream 'missing' does not exist"),
    ({"topics": "a,nope"}, "option 'topics': topic 'nope' does not exist"),
    ({"topics": "a", "starting_offsets": '{"a": {"0": 99}}'},
     "option 'starting_offsets': offset 99 of topic 'a' partition 0 is past its end"),
    ({"topics": "a", "starting_offsets": '{"a": {"5": 0}}'},
     "option 'starting_offsets': topic 'a' partition 5 is not subscribed"),
    ({"topics": "a", "ending_offsets": '{"a": {"0": 1}}', "starting_offsets": "latest"},
     "option 'ending_offsets': offset 1 of topic 'a' partition 0 is before"),
    ({"topics": "a", "starting_offsets": "{not json"},
     "option 'starting_offsets': bad value: expected earliest"),
    ({"topics": "a", "ending_offsets": "earliest"},
     "option 'ending_offsets': bad value: .*earliest cannot end a read"),
    ({"topics": "a", "stream": "s" * 256}, "option 'stream': bad value: .* 1 to 255 bytes"),
    ({"topics": "a", "report_consumer": "c" * 256},
     "option 'report_consumer': bad value: .* 1 to 255 bytes"),
])
def test_bad_input_is_refused_naming_the_option(
    spark: Any, broker: Any, name: str, options: dict[str, str], message: str
) -> None:
    seed(broker.address, name, ["a"], partitions=1, per_partition=3)
    with pytest.raises(AnalysisException, match=f"ConfigError: {message}"):
        reader(spark, broker, options.pop("stream", name), **options).collect()


def _stream(spark: Any, broker: Any, stream: str, checkpoint: str, out: str,
            **options: str) -> list[Any]:
    """One ``availableNow`` run into a parquet table; its progress reports."""
    read = spark.readStream.format("iggy").option("url", broker.url).option("stream", stream)
    for key, value in options.items():
        read = read.option(key, value)
    query = (read.load().writeStream.format("parquet").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(out))
    query.awaitTermination(60)  # raises what failed the query
    return list(query.recentProgress)


def test_streaming_admission_and_new_topics(spark: Any, broker: Any, name: str,
                                            tmp_path: Path) -> None:
    seed(broker.address, name, ["t1"], partitions=2, per_partition=25)
    checkpoint, out = str(tmp_path / "cp"), str(tmp_path / "out")
    options = {"topic_pattern": "t[0-9]", "max_messages_per_trigger": "20",
               "report_consumer": f"{name}-monitor"}
    progress = _stream(spark, broker, name, checkpoint, out, **options)
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sizes == [20, 20, 10]  # admission control under Trigger.AvailableNow
    first = next(p for p in progress if p["numInputRows"])  # lag reads a query's progress
    assert iggy_spark.source.lag(first["sources"][0]) == {"t1": {"0": 15, "1": 15}}
    assert iggy_spark.source.lag(progress[-1]["sources"][0]) == {"t1": {"0": 0, "1": 0}}

    seed(broker.address, name, ["t2"], partitions=1, per_partition=5)  # matches the pattern
    seed(broker.address, name, ["t1"], partitions=2, per_partition=3, create=False, first=25)
    _stream(spark, broker, name, checkpoint, out, **options)
    # the first run's last batch (to 25) was committed, and reported, when the second started
    monitor = f"{name}-monitor"
    assert [reported_next(broker.address, name, "t1", p, monitor) for p in range(2)] == [25, 25]
    forget = {"url": broker.url, "stream": name, "topic_pattern": "t[0-9]",
              "report_consumer": monitor}
    assert iggy_spark.source.delete_reported_offsets(forget) == [("t1", 0), ("t1", 1)]
    # nothing stored: the consumer would start from the beginning again
    assert [reported_next(broker.address, name, "t1", p, monitor) for p in range(2)] == [0, 0]
    assert iggy_spark.source.delete_reported_offsets(forget) == []
    rows = spark.read.parquet(out).select("topic", "partition", "offset", "payload").collect()
    keys = sorted((r.topic, r.partition, r.offset) for r in rows)
    assert keys == sorted([("t1", p, o) for p in range(2) for o in range(28)]
                          + [("t2", 0, o) for o in range(5)])
    assert all(r.payload == payload(r.topic, r.partition, r.offset) for r in rows)


def test_streaming_admission_by_bytes(spark: Any, broker: Any, name: str,
                                      tmp_path: Path) -> None:
    """``max_bytes_per_trigger`` charges each partition's average stored message size, holds
    with ``max_messages_per_trigger`` too, and lets a message larger than it through alone."""
    from iggy_spark.source import catalog
    from iggy_spark.source.options import SourceOptions

    seed(broker.address, name, ["a"], partitions=2, per_partition=10)  # messages of one size
    parsed = SourceOptions.from_options({"url": broker.url, "stream": name, "topics": "a"})
    size = {tail.message_bytes for tail in catalog.tails(parsed).values()}.pop()

    def sizes(run: str, topics: str = "a", **options: str) -> list[int]:
        progress = _stream(spark, broker, name, str(tmp_path / run / "cp"),
                           str(tmp_path / run / "out"), topics=topics, **options)
        return [p["numInputRows"] for p in progress if p["numInputRows"]]

    assert sizes("bytes", max_bytes_per_trigger=str(7 * size)) == [7, 7, 6]
    assert sizes("both", max_bytes_per_trigger=str(7 * size),
                 max_messages_per_trigger="4") == [4] * 5
    seed(broker.address, name, ["b"], partitions=1, per_partition=3)
    assert sizes("tiny", "b", max_bytes_per_trigger="1") == [1, 1, 1]


@pytest.mark.parametrize(("option", "value"), [("ending_offsets", "latest"),
                                               ("ending_timestamp", "1")])
def test_ending_options_are_refused_for_streams(spark: Any, broker: Any, name: str,
                                                tmp_path: Path, option: str, value: str) -> None:
    with pytest.raises(StreamingQueryException,
                       match=f"ConfigError: option '{option}': only applies to batch"):
        _stream(spark, broker, name, str(tmp_path / "cp"), str(tmp_path / "out"), topics="a",
                **{option: value})


@pytest.mark.iggy_line
@pytest.mark.parametrize("subscription", [{"topic_pattern": ".*"}, {"topics": "kept,gone"}])
def test_a_topic_deleted_or_recreated_under_a_running_query_is_named_or_passed_over(
    broker: Any, name: str, subscription: dict[str, str]
) -> None:
    """An operator deletes a topic the query reads (over TCP, on the broker), then creates one
    with its name and fewer messages: the checkpoint's offsets point at messages that are gone.
    The next planning fails naming the topic and ``fail_on_data_loss``; with it off, the query
    passes the deleted topic over and reads the recreated one from its start (its messages are
    new: none of them was read)."""
    from support.broker_fixtures import connect, run

    from connector_common.spark_versions import ReadAllAvailable
    from iggy_spark.source.errors import SourceError
    from iggy_spark.source.options import SourceOptions
    from iggy_spark.source.reader import IggyStreamReader

    seed(broker.address, name, ["kept", "gone"], partitions=1, per_partition=5)

    def planned(fail: bool, start: dict[str, Any]) -> dict[str, Any]:
        options = SourceOptions.from_options({"url": broker.url, "stream": name,
                                              **subscription,
                                              "fail_on_data_loss": str(fail).lower()})
        return IggyStreamReader(options, None).latestOffset(start, ReadAllAvailable())

    checkpoint = planned(True, {})
    assert checkpoint == {"kept": {"0": 5}, "gone": {"0": 5}}

    async def delete() -> None:
        await (await connect(broker.address)).delete_topic(name, "gone")

    run(delete())
    with pytest.raises(SourceError, match=r"reading topic 'gone': partition 0 no longer exists"
                                          r".*fail_on_data_loss=false"):
        planned(True, checkpoint)
    passed_over = planned(False, checkpoint)
    assert passed_over == {"kept": {"0": 5}}
    assert planned(False, passed_over) == passed_over  # and at every planning after

    seed(broker.address, name, ["gone"], partitions=1, per_partition=2)  # recreated, shorter
    with pytest.raises(SourceError, match="reading topic 'gone': partition 0 ends at 2, "
                                          "before the checkpoint's offset 5"):
        planned(True, checkpoint)
    end = planned(False, checkpoint)
    assert end == {"kept": {"0": 5}, "gone": {"0": 2}}
    options = SourceOptions.from_options({"url": broker.url, "stream": name,
                                          **subscription, "fail_on_data_loss": "false"})
    ranges = [p.value for p in IggyStreamReader(options, None).partitions(checkpoint, end)]
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges if r] == [("gone", 0, 0, 2)]
