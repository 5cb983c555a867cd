"""Arrow batches from decoded events, against rows built one by one from the output contract.

The assembly builds columns in bulk (one transposition per batch, transaction values repeated by
Arrow, LSN texts formatted in one operation); the oracle here builds each row field by field
with :func:`format_lsn`, so any shortcut that changes a byte shows up.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector_common.change_rows import ARROW_SCHEMA, LONE_MESSAGE_SEQ, READ_SEQ, position
from connector_common.lsn import format_lsn, parse_lsn
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.decoding import (
    UNCHANGED,
    UPDATE,
    Begin,
    Change,
    Commit,
    Event,
    LoneMessage,
    message_change,
)
from postgres_cdc_source.errors import DecodeError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GIB4 = 1 << 32


class _NoRoute:
    active = False


class _Route:
    """Routes by schema, by table for every other change, and by key."""

    active = True

    def route(self, change: Change) -> tuple[str | None, str | None, str | None]:
        return change.schema, change.table if change.seq % 2 else None, change.key


_change = st.builds(
    lambda offset, table, op, key, after, unchanged: (offset, table, op, key, after, unchanged),
    st.integers(-3_000, 3_000),  # LSNs around a 4 GiB boundary, not in order
    st.sampled_from(["a", "b", "Odd \"name\""]),
    st.sampled_from(["insert", "update", "delete", "truncate"]),
    st.one_of(st.none(), st.just('{"id":1}')),
    st.one_of(st.none(), st.just('{"id":1,"x":"é"}')),
    st.one_of(st.just(()), st.just(("big",)), st.just(("a", "b"))),
)
_txn = st.tuples(st.lists(_change, max_size=12), st.integers(0, 2**40), st.integers(0, 10**15))


def _events(txns: list[tuple[list[Any], int, int]]) -> list[Event]:
    events: list[Event] = []
    for xid, (changes, end, micros) in enumerate(txns):
        events.append(Begin(xid, _GIB4))
        for seq, (offset, table, op, key, after, unchanged) in enumerate(changes):
            events.append(Change(_GIB4 + offset, seq, "public", table, op, key, None, after,
                                 unchanged))
        events.append(Commit(xid, end, _EPOCH + timedelta(microseconds=micros)))
    return events


def _expected(events: list[Event], route: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    pending: list[Change] = []
    for event in events:
        if isinstance(event, Begin):
            pending = []
        elif isinstance(event, Change):
            pending.append(event)
        else:
            commit_lsn = format_lsn(event.end_lsn)
            for c in pending:
                rows.append({
                    "lsn": format_lsn(c.lsn), "commit_lsn": commit_lsn, "xid": event.xid,
                    "commit_ts": event.commit_ts, "seq": c.seq, "schema": c.schema,
                    "table": c.table, "op": c.op, "key": c.key, "before": c.before,
                    "after": c.after, "unchanged": list(c.unchanged),
                    "id": f"{commit_lsn}:{c.seq}",
                    "stream": c.schema if route else None,
                    "topic": (c.table if c.seq % 2 else None) if route else None,
                    "partition_key": c.key if route else None,
                    "position": {"commit_lsn": event.end_lsn, "seq": c.seq},
                })
    return rows


@settings(max_examples=60, deadline=None)
@given(st.lists(_txn, max_size=8), st.integers(1, 9), st.integers(1, 5), st.booleans())
def test_batches_hold_the_contract_rows_in_order(
    txns: list[tuple[list[Any], int, int]], batch_rows: int, spill_rows: int, route: bool
) -> None:
    events = _events(txns)
    batches = list(record_batches(transactions(events, spill_rows),
                                  _Route() if route else _NoRoute(),  # type: ignore[arg-type]
                                  batch_rows))
    assert all(b.schema.equals(ARROW_SCHEMA) for b in batches)
    assert all(0 < b.num_rows <= batch_rows for b in batches)
    assert [row for b in batches for row in b.to_pylist()] == _expected(events, route)


def test_lsn_texts_of_a_batch_across_a_4_gib_boundary() -> None:
    lsns = [_GIB4 - 1, _GIB4, 5 * _GIB4 + 0xABC, 0x16B3748]
    events: list[Event] = [Begin(1, 0)]
    events += [Change(lsn, i, "s", "t", "insert", None, None, "{}", ()) for i, lsn in
               enumerate(lsns)]
    events.append(Commit(1, 6 * _GIB4, _EPOCH))
    (batch,) = record_batches(transactions(events, 100), _NoRoute(), 100)  # type: ignore[arg-type]
    assert batch.column("lsn").to_pylist() == ["0/FFFFFFFF", "1/0", "5/ABC", "0/16B3748"]
    assert batch.column("id").to_pylist() == [f"6/0:{i}" for i in range(4)]


# A stream as Postgres decodes it: transactions and lone messages at increasing LSNs; a lone
# message may start exactly where the transaction before it ends.
_unit = st.one_of(
    st.tuples(st.just("txn"), st.integers(1, 12), st.integers(0, 2**33)),
    st.tuples(st.just("lone"), st.just(0), st.integers(0, 2**33)),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_unit, max_size=10), st.integers(2**32 - 50, 2**62), st.integers(1, 7))
def test_positions_increase_strictly_in_stream_order(
    units: list[tuple[str, int, int]], start: int, batch_rows: int
) -> None:
    """``position`` orders rows exactly as the stream delivers them, and is what
    :func:`position` makes of the row's ``commit_lsn`` text, ``seq`` and ``op``."""
    events: list[Event] = []
    lsn = start
    for xid, (kind, changes, gap) in enumerate(units):
        if kind == "lone":  # at the end of the commit record before it, or later
            lone = isinstance(events[-1], LoneMessage) if events else False
            lsn += gap + 1 if lone else gap % 2 * gap
            events.append(LoneMessage(None, message_change(lsn, None, "p", b"x")))
            continue
        events.append(Begin(xid, lsn))
        events += [Change(lsn, seq, "s", "t", "insert", None, None, "{}", ())
                   for seq in range(changes)]
        lsn += gap + 1
        events.append(Commit(xid, lsn, _EPOCH))
    rows = [row for b in record_batches(transactions(events, 5), _NoRoute(),  # type: ignore[arg-type]
                                        batch_rows) for row in b.to_pylist()]
    positions = [(r["position"]["commit_lsn"], r["position"]["seq"]) for r in rows]
    assert positions == sorted(set(positions))  # strictly increasing
    for row in rows:
        assert row["position"] == position(row["commit_lsn"], row["seq"], row["op"])
        assert row["position"]["commit_lsn"] == parse_lsn(row["commit_lsn"])
        if row["seq"] is None:
            assert row["position"]["seq"] == LONE_MESSAGE_SEQ


def test_a_commit_lsn_a_long_cannot_hold_fails_rather_than_wraps() -> None:
    events: list[Event] = [Begin(1, 0), Change(1, 0, "s", "t", "insert", None, None, "{}", ()),
                           Commit(1, 1 << 63, _EPOCH)]
    with pytest.raises(DecodeError, match=r"LSN 80000000/0 is beyond .* Spark long"):
        list(record_batches(transactions(events, 10), _NoRoute(), 10))  # type: ignore[arg-type]


@pytest.mark.parametrize(("commit_lsn", "seq", "op", "expected"), [
    ("16/B374D848", 3, "update", {"commit_lsn": 0x16_B374D848, "seq": 3}),
    ("0/A", None, "read", {"commit_lsn": 10, "seq": READ_SEQ}),
    ("0/A", None, "message", {"commit_lsn": 10, "seq": LONE_MESSAGE_SEQ}),
    (None, None, "read", None),  # a polled row
])
def test_position_of_a_row_without_one(
    commit_lsn: str | None, seq: int | None, op: str, expected: dict[str, int] | None
) -> None:
    assert position(commit_lsn, seq, op) == expected
    assert READ_SEQ > 2**31 - 1  # past every seq (an int)


def test_a_spilled_transaction_keeps_json_values_of_unchanged_toast_updates() -> None:
    """A change with an unchanged TOAST column keeps its new row's values (for reselect), a
    jsonb column's as an ``orjson.Fragment``, which pickle cannot take by itself: the spill of
    a transaction longer than ``spill_rows`` failed with a TypeError."""
    doc = orjson.Fragment('{"a": [1, 2.50]}')
    changes = [Change(0x100 + i, i, "s", "t", UPDATE, '{"id":1}', None, '{"id":1}', ("big",),
                      None, {"id": 1, "doc": doc, "big": UNCHANGED}) for i in range(3)]
    events = [Begin(7, 0x100), *changes, Commit(7, 0x200, None)]
    ((_, chunks),) = list(transactions(events, spill_rows=2))
    back = [change for chunk in chunks for change in chunk]
    assert [c.lsn for c in back] == [0x100, 0x101, 0x102]
    assert back[0].new_row is not None and back[0].new_row["big"] is UNCHANGED
    assert orjson.dumps(back[0].new_row["doc"]) == b'{"a": [1, 2.50]}'
