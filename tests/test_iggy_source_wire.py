"""The ``iggy`` source decodes poll replies itself (:mod:`iggy_spark.source.wire`): every column
must equal what the SDK's own decoding of the same messages says, for any payloads, ids and
headers, from any offset and across the batches a poll spans, over TCP from the broker."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from apache_iggy import (
    Consumer,
    HeaderKey,
    HeaderValue,
    Partitioning,
    PollingStrategy,
    ReceiveMessage,
    SendMessage,
    UserHeaders,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.broker_fixtures import connect, create_topic, poll_reply, run

from iggy_spark import sdk
from iggy_spark.connection import sdk_line
from iggy_spark.source import wire
from iggy_spark.source.catalog import CONSUMER

pytestmark = pytest.mark.iggy_line

U128 = st.one_of(st.sampled_from([0, 1, 2**64 - 1, 2**64, 10**38, 2**127, 2**128 - 1]),
                 st.integers(0, 2**128 - 1))
KEYS = st.one_of(
    st.text(min_size=1, max_size=20).filter(lambda k: len(k.encode()) <= 255).map(
        HeaderKey.String),
    st.binary(min_size=1, max_size=8).map(HeaderKey.Raw),
    st.integers(-(2**31), 2**31 - 1).map(HeaderKey.Int32),
    st.booleans().map(HeaderKey.Bool),
)
VALUES = st.one_of(
    st.binary(min_size=1, max_size=40).map(HeaderValue.Raw),
    st.text(min_size=1, max_size=20).filter(lambda v: len(v.encode()) <= 255).map(
        HeaderValue.String),
    st.booleans().map(HeaderValue.Bool),
    st.integers(-128, 127).map(HeaderValue.Int8),
    st.integers(-(2**63), 2**63 - 1).map(HeaderValue.Int64),
    st.integers(-(2**127), 2**127 - 1).map(HeaderValue.Int128),
    st.integers(0, 2**16 - 1).map(HeaderValue.UnsignedInt16),
    st.integers(0, 2**128 - 1).map(HeaderValue.UnsignedInt128),
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(HeaderValue.Float32),
    st.floats(allow_nan=False, allow_infinity=False).map(HeaderValue.Float64),
)
MESSAGES = st.lists(st.tuples(U128, st.binary(min_size=1, max_size=300),
                              st.dictionaries(KEYS, VALUES, max_size=3)),
                    min_size=1, max_size=40)


def _text(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bool):
        return b"true" if value else b"false"
    return str(value).encode()


def _headers(message: ReceiveMessage) -> list[tuple[str, bytes]] | None:
    """The ``headers`` cell from the SDK's typed headers: the column's documented text."""
    headers = message.user_headers()
    if not headers:
        return None
    return sorted((_text(key).decode(errors="replace"), _text(value))
                  for key, value in _scalars(headers))


def _scalars(headers: UserHeaders) -> list[tuple[Any, Any]]:
    """Each typed key and value as a Python scalar, kinds kept apart (unlike
    ``to_scalar_dict``, which merges keys that compare equal)."""
    return [(UserHeaders({key: HeaderValue.Bool(True)}).to_scalar_dict().popitem()[0],
             UserHeaders({HeaderKey.String("v"): value}).to_scalar_dict()["v"])
            for key, value in headers.items()]


def _expected(messages: list[ReceiveMessage]) -> list[dict[str, Any]]:
    return [{
        "offset": m.offset(), "id": str(m.id()), "timestamp": m.timestamp(),
        "headers": _headers(m), "payload": m.payload(),
    } for m in messages]


def _decoded(reply: bytes) -> list[dict[str, Any]]:
    rows = wire.record_batch(reply, "s", "t", 0, sdk_line()).to_pylist()
    assert all((r["stream"], r["topic"], r["partition"]) == ("s", "t", 0) for r in rows)
    return [{
        "offset": r["offset"], "id": r["id"],
        "timestamp": int(r["timestamp"].timestamp() * 1_000_000),
        "headers": None if r["headers"] is None else sorted(r["headers"]),
        "payload": r["payload"],
    } for r in rows]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sent=MESSAGES, sends=st.integers(1, 4), start=st.integers(0, 50),
       count=st.integers(1, 60), one_size=st.booleans())
def test_a_poll_decodes_as_the_sdk_decodes_it(
    broker: Any, sent: list[tuple[int, bytes, dict[Any, Any]]], sends: int, start: int,
    count: int, one_size: bool,
) -> None:
    """``one_size``: every message as large as the first (its headers too), so batches take
    the path that finds the messages without walking them."""
    topic = f"t{uuid.uuid4().hex}"
    if one_size:
        size, headers = len(sent[0][1]), sent[0][2]
        sent = [(i, p[:size].ljust(size, b"."), headers) for i, p, _ in sent]

    async def main() -> tuple[bytes, list[ReceiveMessage]]:
        client = await connect(broker.address)
        if await client.get_stream("s") is None:
            await client.create_stream("s")
        await create_topic(client, "s", topic, 1)
        share = -(-len(sent) // sends)  # several sends: a poll spans several batches
        for low in range(0, len(sent), share):
            await client.send_messages("s", topic, Partitioning.partition_id(0), [
                SendMessage(payload, UserHeaders(headers) if headers else None, id=message_id)
                for message_id, payload, headers in sent[low:low + share]])
        raw = await client.send_binary_request(
            wire.POLL_MESSAGES, wire.poll_request(CONSUMER, "s", topic, 0, start, count))
        polled = await client.poll_messages(
            "s", topic, consumer=Consumer.Single(CONSUMER),
            polling_strategy=PollingStrategy.Offset(start), count=count, auto_commit=False,
            partition_id=0)
        return raw, polled

    raw, polled = run(main())
    assert len(polled) == max(0, min(count, len(sent) - start))
    assert _decoded(raw) == _expected(polled)


@pytest.fixture(params=sdk.LINES, ids=lambda line: f"iggy{line.server}")
def line(request: pytest.FixtureRequest) -> sdk.SdkLine:
    """Each Iggy line's reply layout, for replies laid out by hand."""
    return request.param


def test_messages_of_one_size_split_between_payload_and_headers_decode(line: sdk.SdkLine) -> None:
    """Same-size messages are found without a walk; each still gets its own payload and
    headers, however it splits its size between them."""
    header = b"\x02\x01\x00\x00\x00k" + b"\x02\x01\x00\x00\x00v"  # 12 bytes: k=v
    reply = poll_reply(0, [(b"p" * 12, b""), (b"", header), (b"p" * 12, b"")], line)
    rows = wire.record_batch(reply, "s", "t", 0, line).to_pylist()
    assert [(r["payload"], r["headers"]) for r in rows] == [
        (b"p" * 12, None), (b"", [("k", b"v")]), (b"p" * 12, None)]


def test_a_hand_laid_reply_decodes(line: sdk.SdkLine) -> None:
    header = b"\x02\x01\x00\x00\x00k" + b"\x0c\x08\x00\x00\x00" + struct.pack("<Q", 2**64 - 1)
    reply = poll_reply(40, [(b"a", b""), (b"", header), (b"ccc", b"")], line)
    assert wire.message_count(reply, line) == 3 and wire.following(reply, line) == 43
    rows = wire.record_batch(reply, "s", "t", 3, line).to_pylist()
    assert rows[0]["timestamp"].timestamp() == 7e-6
    assert [(r["offset"], r["payload"], r["headers"]) for r in rows] == [
        (40, b"a", None), (41, b"", [("k", b"18446744073709551615")]), (42, b"ccc", None)]
    assert {r["id"] for r in rows} == {"0"}
    assert {r["partition"] for r in rows} == {3}


def _lying(reply: bytes, line: sdk.SdkLine) -> bytes:
    """``reply`` with its first message's payload length one too long: the batch's size still
    divides evenly among its messages, but they are not of one size."""
    patched = bytearray(reply)
    at = line.poll_reply_header + 256 + 36
    struct.pack_into("<I", patched, at, struct.unpack_from("<I", patched, at)[0] + 1)
    return bytes(patched)


def _counting(reply: bytes, count: int) -> bytes:
    """``reply`` with its header's message count set to ``count``."""
    return reply[:12] + struct.pack("<I", count) + reply[16:]


def _one(line: sdk.SdkLine, headers: bytes = b"") -> bytes:
    return poll_reply(40, [(b"abc" if not headers else b"", headers)], line)


@pytest.mark.parametrize(("reply", "problem"), [
    (lambda line: b"\0" * 10, "has no header"),
    (lambda line: _one(line)[:-1], "does not fill"),
    (lambda line: _lying(poll_reply(40, [(b"abc", b""), (b"abc", b"")], line), line),
     "does not fill"),
    (lambda line: _one(line)[:line.poll_reply_header + 84], "ends inside a batch header"),
    (lambda line: _one(line) + b"\0" * 300, "does not fill"),
    (lambda line: _counting(_one(line), 2), "says 2 messages and holds 1"),
    (lambda line: _one(line, b"\x02\x09\x00\x00\x00k"), "kind 2 and 9 bytes does not fit"),
    (lambda line: _one(line, b"\x63\x01\x00\x00\x00k"), "kind 99"),
    (lambda line: _one(line, b"\x02\x01\x00\x00\x00k"), "a key without a value"),
    (lambda line: _one(line, b"\x02\x01"), "end inside an entry"),
])
def test_a_malformed_reply_is_refused(
    reply: Callable[[sdk.SdkLine], bytes], problem: str, line: sdk.SdkLine
) -> None:
    with pytest.raises(wire.MalformedReply, match=problem):
        wire.record_batch(reply(line), "s", "t", 0, line)


def test_a_reply_read_in_the_other_lines_layout_does_not_add_up() -> None:
    """The 24 bytes of partition context make the layouts disagree: a 0.10 reply read as 0.9
    starts its batch inside the context, and the other way round inside the batch header."""
    for written, read in ((sdk.SDK_0_10, sdk.SDK_0_9), (sdk.SDK_0_9, sdk.SDK_0_10)):
        with pytest.raises(wire.MalformedReply):
            wire.record_batch(poll_reply(40, [(b"abc", b"")], written), "s", "t", 0, read)


def test_polls_of_ever_new_sizes_keep_a_bounded_number_of_index_arrays() -> None:
    """A long query polls many sizes (each range's last poll, payloads of changing size): the
    index arrays kept per size must not grow with them."""
    line = sdk.SDK_0_9
    for size in range(1, 200):
        reply = poll_reply(0, [(b"x", b"")] * size, line)
        assert wire.record_batch(reply, "s", "t", 0, line).num_rows == size
    assert wire._every.cache_info().currsize <= 64  # of the 398 index arrays these polls used
    assert wire._interleaved.cache_info().currsize <= 16  # of 199
