"""The sort step of ``in_key_order`` (the shuffle and the LSN columns are Spark's: the order
through Spark and Iggy is tested in test_parallel_order.py)."""

from __future__ import annotations

import random

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pg_to_iggy.ordering import _HIGH, _LOW, sort_in_commit_order

# few distinct LSNs and seqs, so ties (snapshot rows: one LSN, no seq) are common
ROW = st.tuples(st.sampled_from([0, 1]), st.sampled_from([0, 9, 10, 2**32 - 1]),
                st.none() | st.integers(0, 2))
Row = tuple[int, int, "int | None", str]


@settings(deadline=None)
@given(keys=st.lists(ROW, max_size=40), seed=st.integers())
def test_rows_leave_in_commit_order_whatever_order_they_arrive_in(
    keys: list[tuple[int, int, int | None]], seed: int
) -> None:
    """Sorted by commit LSN as a number, then seq (none last), then id (snapshot rows share
    an LSN and have no seq); the helper columns are gone; a reshuffled input gives the same
    output."""
    rows: list[Row] = [(*k, f"id{n:03d}") for n, k in enumerate(keys)]

    def batches(order: list[Row]) -> list[pa.RecordBatch]:
        table = pa.table({"seq": pa.array([r[2] for r in order], pa.int32()),
                          "id": [r[3] for r in order],
                          _HIGH: pa.array([r[0] for r in order], pa.int64()),
                          _LOW: pa.array([r[1] for r in order], pa.int64())})
        return table.to_batches(max_chunksize=7)

    shuffled = rows[:]
    random.Random(seed).shuffle(shuffled)
    out = list(sort_in_commit_order(iter(batches(shuffled))))
    if not rows:
        assert out == []
        return
    table = pa.Table.from_batches(out)
    assert table.column_names == ["seq", "id"]
    expected = sorted(rows, key=lambda r: (r[0], r[1], r[2] is None, r[2] or 0, r[3]))
    assert table.column("id").to_pylist() == [r[3] for r in expected]
    assert list(sort_in_commit_order(iter(batches(rows)))) == out
