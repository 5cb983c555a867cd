"""Backfill progress as offsets carry it: random request/chunk/cancel sequences, each state
round-tripped through JSON as Spark stores it, against a model of what must be delivered."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector_common.lsn import parse_lsn
from postgres_cdc_source.backfill.progress import Backfills, ChunkPlan, Request
from postgres_cdc_source.backfill.requests import Malformed, request_of
from postgres_cdc_source.replication.request_table import RequestRow
from postgres_cdc_source.snapshot.offsets import Creation
from postgres_cdc_source.stream.offset import StreamOffset

_TABLES = [("s", "a"), ("s", "b"), ('S"q', "c d")]
_step = st.one_of(
    st.tuples(st.just("request"), st.lists(st.sampled_from(_TABLES), min_size=1, max_size=3,
                                            unique=True)),
    st.tuples(st.just("chunk"), st.integers(0, 3)),  # keys in the chunk; 0: to the end
    st.tuples(st.just("cancel"), st.integers(0, 5)),
)


def _spark(state: Backfills, lsn: str = "0/10") -> Backfills:
    offset = json.loads(json.dumps(StreamOffset(parse_lsn(lsn), backfill=state).to_json()))
    return StreamOffset.from_json(offset).backfill


@settings(max_examples=300, deadline=None)
@given(st.lists(_step, max_size=30))
def test_every_table_of_a_request_is_read_in_order_to_its_end(steps: list[tuple[str, object]]
                                                              ) -> None:
    state = Backfills()
    ids: list[str] = []
    pending: dict[str, list[tuple[str, str]]] = {}  # the model: tables still to read, per id
    cancelled: set[str] = set()
    read: dict[str, list[tuple[tuple[str, str], str | None, str | None]]] = {}
    for kind, arg in steps:
        if kind == "request":
            assert isinstance(arg, list)
            rid = f"r{len(ids)}"
            ids.append(rid)
            pending[rid] = list(arg)
            state = _spark(state.requested([Request(rid, tuple(arg))], set(), 0))
        elif kind == "cancel":
            assert isinstance(arg, int)
            if arg < len(ids):
                cancelled.add(ids[arg])
                pending.pop(ids[arg], None)
                state = _spark(state.requested([], {ids[arg]}, 0))
        elif state.queue:  # plan a chunk of the running request, Spark commits it, next plan
            head = state.queue[0]
            assert head.id == next(iter(pending))  # requests run in the order they came
            lo = head.after
            hi = None if arg == 0 else str(int(lo[0] if lo else "0") + int(str(arg)))
            chunk = ChunkPlan(head.id, "n", head.tables[0], lo, None if hi is None else (hi,),
                              None)
            read.setdefault(head.id, []).append((head.tables[0], lo and lo[0], hi))
            state = _spark(Backfills(state.queue, chunk, state.scanned)).delivered()
            if hi is None:
                pending[head.id].pop(0)
                if not pending[head.id]:
                    del pending[head.id]
        assert [r.id for r in state.queue] == list(pending)
        assert all(list(r.tables) == pending[r.id] for r in state.queue)
        assert not cancelled & {r.id for r in state.queue}
    for chunks in read.values():  # each table's chunks join up: (lo, hi] after (.., lo]
        previous: dict[tuple[str, str], str | None] = {}
        for table, lo, hi in chunks:
            assert previous.get(table) == lo
            previous[table] = hi


def test_a_request_found_again_is_not_queued_twice() -> None:
    one = Request("r1", (("s", "a"),))
    state = Backfills().requested([one], set(), 100)
    assert state.requested([one], set(), 120).queue == (one,)
    assert _spark(state, "0/64").scanned == 100  # kept while beyond the offset's LSN
    assert _spark(Backfills()) == Backfills()


def _row(kind: str = "backfill", **given: Any) -> RequestRow:
    columns: dict[str, Any] = {
        "lsn": 100, "kind": kind, "id": "r1", "slot": "slot", "tables": [["s", "t"]],
        "table_count": 1, "condition": None, "publication": None, "created_xmin": None,
        "created_cid": None, "requested_by": "alice", **given}
    return RequestRow(**columns)


def test_the_event_triggers_request_names_exactly_the_rows_a_new_table_was_not_sent() -> None:
    """A ``CREATE TABLE AS``'s request is for the query reading its pair with the pair alone:
    the rows of the creating transaction written before the command that added the table."""
    row = _row("created", slot=None, publication="p", created_xmin=731, created_cid=2)
    request = request_of(row, "slot", "p")
    assert request == Request("created s.t in transaction 731", (("s", "t"),),
                              created=Creation(731, 2))
    assert request_of(row, "slot", "other") is None  # another query's pair
    assert request_of(row, "slot", None) is None  # test_decoding, or <pub>_all read
    with pytest.raises(Malformed, match="created_xmin"):
        request_of(_row("created", publication="p", created_cid=2), "slot", "p")
    assert isinstance(request, Request)
    assert Request.from_json(json.loads(json.dumps(request.to_json()))) == request
    assert "created" not in Request("r1", (("s", "a"),)).to_json()  # older offsets unchanged
    plan = ChunkPlan("r1", "n", ("s", "t"), None, ("9",), None, Creation(731, 2))
    assert ChunkPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_a_progress_events_end_offset_gives_the_backfills_back() -> None:
    """What a listener reads where the reader's own report never reaches the progress (Spark
    4.0, 4.1): the end offset of a pg_cdc stream batch, and nothing from another offset."""
    chunk = ChunkPlan("r1", "n1", ("s", "a"), None, ("41",), None)
    state = Backfills((Request("r1", (("s", "a"), ("s", "b"))), Request("r2", (("s", "c"),))),
                      chunk)
    end = json.dumps(StreamOffset(parse_lsn("0/20"), backfill=state).to_json())
    assert Backfills.from_progress(end) == state
    assert Backfills.from_progress('{"lsn": "0/20"}') == Backfills()
    for other in (None, "", "not json", "[1]", '{"frontier": 3, "tracking": null}',
                  '{"lsn": {"0": 3}}', '{"lsn": "0/20", "backfill": {"queue": [{"id": 1}]}}'):
        assert Backfills.from_progress(other) is None, other
