"""How a task polls its range: sized in bytes after a small first poll, never past the range,
every message once, with the server's answers stubbed (each message of ``size`` payload bytes)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.broker_fixtures import poll_reply

from iggy_spark.source import polling
from iggy_spark.source.offsets import Range
from iggy_spark.source.options import SourceOptions

pytestmark = pytest.mark.iggy_line

URL = "iggy://iggy:secret@localhost:8090"


def read(monkeypatch: pytest.MonkeyPatch, work: Range, size: int, **options: str
         ) -> tuple[list[int], list[int]]:
    """The offsets read and the counts each poll asked for."""
    asked: list[int] = []

    def poll(_options: SourceOptions, _topic: str, _partition: int, start: int, end: int,
             count: int) -> Future[bytes]:
        asked.append(count)
        answer: Future[bytes] = Future()
        answer.set_result(poll_reply(start, [(b"p" * size, b"")] * min(count, end - start)))
        return answer

    monkeypatch.setattr(polling, "_poll", poll)
    parsed = SourceOptions.from_options({"url": URL, "stream": "s", "topics": "t", **options})
    offsets = [o for b in polling.read_range(parsed, work) for o in b["offset"].to_pylist()]
    return offsets, asked


def test_small_messages_are_polled_many_at_a_time_and_large_ones_few(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    _, small = read(monkeypatch, Range("t", 0, 0, 100_000), 200)
    assert small[0] == 100 and set(small[1:]) == {10_000}  # poll_messages caps 4MB / 248 B
    _, large = read(monkeypatch, Range("t", 0, 0, 200), 1_000_000)
    assert large[0] == 100 and set(large[1:]) == {4}  # 4MB of 1MB messages
    _, tiny = read(monkeypatch, Range("t", 0, 0, 110), 5_000, poll_bytes="1KB")
    assert set(tiny) == {100, 1}  # one message a poll when one alone is larger than poll_bytes


@settings(max_examples=60, deadline=None)
@given(start=st.integers(0, 500), length=st.integers(1, 1_000), size=st.integers(1, 5_000),
       poll_bytes=st.integers(1, 200_000), poll_messages=st.integers(1, 700))
def test_a_range_is_read_whole_once_with_polls_within_the_limits(
    start: int, length: int, size: int, poll_bytes: int, poll_messages: int
) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        offsets, asked = read(monkeypatch, Range("t", 0, start, start + length), size,
                              poll_bytes=str(poll_bytes), poll_messages=str(poll_messages))
    assert offsets == list(range(start, start + length))
    assert all(1 <= count <= poll_messages for count in asked)
    stored = size + 48  # what a message weighs in a reply, besides the reply's own headers
    assert all(count == 1 or count * stored <= poll_bytes for count in asked[1:])
