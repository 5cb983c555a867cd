"""The sink's own create-topic request: the wheel's layout without the durability options a
0.9.0-edge server refuses, and topics it creates read back as asked on any server
(``IGGY_URL`` runs the services test against a real one)."""

from __future__ import annotations

import re
import struct
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iggy_local import LocalIggy
from iggy_local.requests import Reader, parse_options
from iggy_spark.connection import IggyConnection
from iggy_spark.iggy_url import IggyUrl
from iggy_spark.sink.admission import Destination
from iggy_spark.sink.control_topic import MAX_SIZE, SEGMENT_SIZE, ControlTopic
from iggy_spark.sink.options import TopicDefaults
from iggy_spark.sink.sending import ensure_topic
from iggy_spark.sink.topic_request import encode_create_topic

pytestmark = pytest.mark.iggy_line

# What the apache-iggy 0.9.0 wheel's create_topic("s", "t1", 2, ...) sends, captured over TCP,
# with its two durability options taken out.
_IDENTIFIER_AND_COUNT = "020173" + "02000000" + "027431"
_NEVER_UNLIMITED = (
    "020e0000006d61785f746f7069635f73697a650c08000000ffffffffffffffff"
    "020e0000006d6573736167655f6578706972790c08000000ffffffffffffffff"
)
_90S_10MB = (
    "020e0000006d61785f746f7069635f73697a650c080000008096980000000000"
    "020e0000006d6573736167655f6578706972790c08000000804a5d0500000000"
)


@pytest.mark.parametrize(("defaults", "options"), [
    (TopicDefaults(2), ""),
    (TopicDefaults(2, "never", "unlimited"), _NEVER_UNLIMITED),
    (TopicDefaults(2, timedelta(seconds=90), 10_000_000), _90S_10MB),
])
def test_the_body_is_the_wheels_without_durability_options(
    defaults: TopicDefaults, options: str
) -> None:
    assert encode_create_topic("s", "t1", defaults).hex() == _IDENTIFIER_AND_COUNT + options


@given(
    stream=st.text(st.characters(codec="utf-8"), min_size=1, max_size=60),
    name=st.text(st.characters(codec="utf-8"), min_size=1, max_size=60),
    partitions=st.integers(0, 1000),
    expiry=st.one_of(st.none(), st.just("never"),
                     st.timedeltas(timedelta(microseconds=1), timedelta(days=10_000))),
    size=st.one_of(st.none(), st.just("unlimited"), st.integers(1, 2**63)),
    segment=st.one_of(st.none(), st.integers(1, 2**63)),
)
def test_the_local_broker_reads_back_every_field(
    stream: str, name: str, partitions: int, expiry: timedelta | str | None, size: int | str | None,
    segment: int | None,
) -> None:
    body = encode_create_topic(stream, name, TopicDefaults(partitions, expiry, size, segment))  # type: ignore[arg-type]
    reader = Reader(body)
    # as the SDK reads the same text: what reads as a u32 is the stream's numeric id
    numeric = re.fullmatch(r"\+?[0-9]+", stream) is not None and int(stream) < 2**32
    assert reader.identifier("stream id") == (int(stream) if numeric else stream)
    assert reader.u32("partitions count") == partitions
    assert reader.name("topic name") == name
    options = parse_options(bytes(reader.rest()))
    never = 2**64 - 1
    expected: dict[bytes, int] = {}
    if expiry is not None:
        expected[b"message_expiry"] = never if expiry == "never" else (
            expiry // timedelta(microseconds=1))  # type: ignore[operator]
    if size is not None:
        expected[b"max_topic_size"] = never if size == "unlimited" else size  # type: ignore[assignment]
    if segment is not None:
        expected[b"segment_size"] = segment
    assert {k: struct.unpack("<Q", v)[0] for k, v in options.items()} == expected


def test_names_outside_1_to_255_bytes_are_refused() -> None:
    with pytest.raises(ValueError, match="topic name"):
        encode_create_topic("s", "", TopicDefaults())
    with pytest.raises(ValueError, match="stream name"):
        encode_create_topic("é" * 128, "t", TopicDefaults())


def test_the_sink_creates_topics_as_asked_and_a_second_create_is_no_error(
    broker: LocalIggy, name: str
) -> None:
    conn = IggyConnection(IggyUrl.parse(broker.url))
    asked = {
        "plain": TopicDefaults(3),
        "kept": TopicDefaults(2, timedelta(hours=2), 2 * 2**30),  # a server wants >= 1 segment
        "forever": TopicDefaults(1, "never", "unlimited"),
    }
    for topic, defaults in asked.items():
        destination = Destination(name, topic)
        first = conn.run(ensure_topic(conn, destination, create=True, defaults=defaults,
                                      timeout=30), timeout=60)
        again = conn.run(ensure_topic(conn, destination, create=True, defaults=defaults,
                                      timeout=30), timeout=60)
        assert (first.partitions_count, first.created) == (defaults.partitions_count, True)
        assert (again.partitions_count, again.created) == (defaults.partitions_count, False)

    async def options(topic: str) -> dict[str, int]:
        got = await (await conn.client()).get_topic(name, topic)
        assert got is not None
        return dict(got.options.to_scalar_dict())

    never = 2**64 - 1
    assert conn.run(options("plain"), timeout=60) == {}
    assert conn.run(options("kept"), timeout=60) == {
        "message_expiry": 2 * 3600 * 10**6, "max_topic_size": 2 * 2**30}
    assert conn.run(options("forever"), timeout=60) == {
        "message_expiry": never, "max_topic_size": never}


def test_the_control_topic_is_created_bounded_by_size_never_by_age(
    broker: LocalIggy, name: str
) -> None:
    conn = IggyConnection(IggyUrl.parse(broker.url))
    control = ControlTopic.of_query(conn, name, "q", timeout=30)
    control.create()
    topic = control.topic

    async def options() -> dict[str, int]:
        got = await (await conn.client()).get_topic(topic.stream, topic.topic)
        assert got is not None and len(got.partitions) == 1
        return dict(got.options.to_scalar_dict())

    assert conn.run(options(), timeout=60) == {
        "message_expiry": 2**64 - 1, "max_topic_size": MAX_SIZE,
        "segment_size": SEGMENT_SIZE}
