"""The sort step of ``in_key_order`` (the shuffle and the LSN columns are Spark's: the order
through Spark and Iggy is tested in test_parallel_order.py)."""

from __future__ import annotations

import random

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pg_to_iggy.ordering import _LSN, _SEQ, sort_in_commit_order

# few distinct positions, so ties (the rows of a snapshot share one) are common
ROW = st.tuples(st.sampled_from([0, 9, 2**32, 2**40 + 1]),
                st.sampled_from([0, 1, 2, 2**31, 2**31 + 1]))
Row = tuple[int, int, str]


@settings(deadline=None)
@given(keys=st.lists(ROW, max_size=40), seed=st.integers())
def test_rows_leave_in_commit_order_whatever_order_they_arrive_in(
    keys: list[tuple[int, int]], seed: int
) -> None:
    """Sorted by position (commit LSN, then seq), then id (snapshot rows share a position);
    the helper columns are gone; a reshuffled input gives the same output."""
    rows: list[Row] = [(*k, f"id{n:03d}") for n, k in enumerate(keys)]

    def batches(order: list[Row]) -> list[pa.RecordBatch]:
        table = pa.table({"id": [r[2] for r in order],
                          _LSN: pa.array([r[0] for r in order], pa.int64()),
                          _SEQ: pa.array([r[1] for r in order], pa.int64())})
        return table.to_batches(max_chunksize=7)

    shuffled = rows[:]
    random.Random(seed).shuffle(shuffled)
    out = list(sort_in_commit_order(iter(batches(shuffled))))
    if not rows:
        assert out == []
        return
    table = pa.Table.from_batches(out)
    assert table.column_names == ["id"]
    expected = sorted(rows)
    assert table.column("id").to_pylist() == [r[2] for r in expected]
    assert list(sort_in_commit_order(iter(batches(rows)))) == out
