"""Arrow batches from decoded events, against rows built one by one from the output contract.

The assembly builds columns in bulk (one transposition per batch, transaction values repeated by
Arrow, LSN texts formatted in one operation); the oracle here builds each row field by field
with :func:`format_lsn`, so any shortcut that changes a byte shows up.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from connector_common.change_rows import ARROW_SCHEMA
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.decoding import Begin, Change, Commit, Event
from postgres_cdc_source.lsn import format_lsn

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
