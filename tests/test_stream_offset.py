"""``pg_cdc``'s offsets (:class:`StreamOffset`): every offset survives Spark's storage, and an
offset an earlier release wrote is written back as the very same JSON (Spark compares offsets as
text, so another spelling would be a new offset)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from connector_common.lsn import MAX_LSN, format_lsn, parse_lsn
from postgres_cdc_source.backfill.progress import Backfills, ChunkPlan, Request
from postgres_cdc_source.snapshot import Position
from postgres_cdc_source.stream.offset import PENDING, StreamOffset

lsns = st.integers(0, MAX_LSN)
names = st.text(min_size=1, max_size=6)
tables = st.tuples(names, names)
keys = st.none() | st.lists(st.text(max_size=6), min_size=1, max_size=3).map(tuple)
wheres = st.none() | st.text(max_size=10)

offsets = st.builds(
    StreamOffset,
    lsns,
    st.none() | st.builds(Position, st.none() | tables, keys, st.integers(0, 10**6)),
    st.builds(
        Backfills,
        st.lists(st.builds(Request, names, st.lists(tables, min_size=1, max_size=3).map(tuple),
                           wheres, keys, st.integers(0, 10**4)), max_size=3).map(tuple),
        st.none() | st.builds(ChunkPlan, names, names, tables, keys, keys, wheres),
        lsns,
    ),
    st.none() | st.just(PENDING) | lsns,
    st.lists(st.tuples(tables, keys, keys), max_size=3).map(tuple),
    st.lists(st.tuples(names, names, st.lists(  # include_schema_changes: per plugin's columns
        st.tuples(names, st.integers(0, 2**32 - 1), st.integers(-1, 2**31 - 1), st.booleans())
        | st.tuples(names, names), max_size=3).map(tuple)), max_size=2).map(tuple),
)


def _stored(offset: StreamOffset) -> dict[str, Any]:
    """What Spark writes to its checkpoint and hands back."""
    return json.loads(json.dumps(offset.to_json()))


@given(offsets)
def test_an_offset_survives_sparks_storage(offset: StreamOffset) -> None:
    assert StreamOffset.from_json(_stored(offset)) == offset


# The offsets earlier releases wrote, spelled as they wrote them.
key_json = st.none() | st.lists(st.text(max_size=6), min_size=1, max_size=3)
table_json = st.lists(names, min_size=2, max_size=2)
request_json = st.builds(
    lambda id_, tables, where, after, chunks: {
        "id": id_, "tables": tables, "where": where, "after": after, "chunks": chunks},
    names, st.lists(table_json, min_size=1, max_size=3), wheres, key_json, st.integers(0, 10**4))
chunk_json = st.builds(
    lambda id_, nonce, table, lo, hi, where: {
        "id": id_, "nonce": nonce, "table": table, "lo": lo, "hi": hi, "where": where},
    names, names, table_json, key_json, key_json, wheres)


@st.composite
def backfill_json(draw: st.DrawFn) -> dict[str, Any]:
    backfill: dict[str, Any] = {"queue": draw(st.lists(request_json, max_size=3))}
    if draw(st.booleans()):
        backfill["chunk"] = draw(chunk_json)
    if draw(st.booleans()):
        backfill["scanned"] = format_lsn(draw(st.integers(1, MAX_LSN)))
    return backfill


planned_json = st.lists(st.tuples(names, names, key_json, key_json).map(list), min_size=1,
                        max_size=3)


@st.composite
def legacy_offsets(draw: st.DrawFn) -> dict[str, Any]:
    lsn = draw(lsns)
    offset: dict[str, Any] = {"lsn": format_lsn(lsn)}
    kind = draw(st.sampled_from(["stream", "snapshot", "snapshot done"]))
    if kind == "stream":
        backfill = draw(backfill_json())
        if (backfill["queue"] or "chunk" in backfill
                or parse_lsn(backfill.get("scanned", "0/0")) > lsn):  # else it was left out
            offset["backfill"] = backfill
        horizon = draw(st.none() | lsns)
        if horizon is not None:
            offset["reselect_until"] = format_lsn(horizon)
        return offset
    if kind == "snapshot":
        offset["snapshot"] = {"after": draw(key_json), "chunks": draw(st.integers(0, 10**6)),
                              "table": draw(st.none() | table_json)}
    else:
        offset["reselect_until"] = "pending"
    if draw(st.booleans()):
        offset["planned"] = draw(planned_json)
    return offset


@given(legacy_offsets())
def test_an_offset_from_a_checkpoint_is_written_back_as_the_same_json(
    legacy: dict[str, Any],
) -> None:
    text = json.dumps(legacy)
    assert json.dumps(StreamOffset.from_json(json.loads(text)).to_json()) == text


def test_a_plain_stream_offset_is_its_lsn() -> None:
    offset = StreamOffset.from_json({"lsn": "0/1534DC8"})
    assert offset == StreamOffset(0x1534DC8)
    assert offset.to_json() == {"lsn": "0/1534DC8"}


def test_a_backfill_state_that_says_nothing_at_the_offset_is_left_out() -> None:
    searched = Backfills(scanned=0x10)
    assert StreamOffset(0x10, backfill=searched) == StreamOffset(0x10)
    assert StreamOffset(0x10, backfill=searched).to_json() == {"lsn": "0/10"}
    assert StreamOffset(0xF, backfill=searched).to_json() == {
        "lsn": "0/F", "backfill": {"queue": [], "scanned": "0/10"}}
