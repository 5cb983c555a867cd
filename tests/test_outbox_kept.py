"""The outbox keeps each group's messages column by column; read back, they must be exactly the
messages buffered, in order (the last of a send gets the origin header from them, and a tail an
open breaker refused is dead-lettered from them)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from iggy_spark.sink.outbox import Message, _Kept

_messages = st.lists(st.tuples(st.binary(max_size=4),
                               st.none() | st.just({"h": "v"}),
                               st.integers(0, 2**128 - 1)), max_size=12)


@given(st.lists(st.tuples(st.booleans(), _messages), max_size=6), st.integers(0, 80))
def test_kept_messages_read_back_as_buffered(adds: list[tuple[bool, list[Message]]],
                                             start: int) -> None:
    kept, expected = _Kept(), []
    for one_by_one, messages in adds:
        if one_by_one:
            for message in messages:
                kept.append(*message)
        else:
            kept.extend([m[0] for m in messages], [m[1] for m in messages],
                        [m[2] for m in messages])
        expected.extend(messages)
    assert len(kept) == len(expected)
    assert list(kept) == expected
    assert [kept[i] for i in range(len(expected))] == expected
    assert kept.since(start) == expected[start:]
