"""The split of a batch's WAL range into the sub-ranges its Spark tasks decode."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postgres_cdc_source.stream.splitting import partition_count, sub_ranges

LSN = st.integers(min_value=0, max_value=2**64 - 2**40)


@given(start=LSN, length=st.integers(1, 2**40), count=st.integers(1, 512))
def test_sub_ranges_tile_the_batch_exactly_in_nearly_equal_parts(
    start: int, length: int, count: int
) -> None:
    end = start + length
    if length < count:
        with pytest.raises(ValueError, match="cannot cut"):
            sub_ranges(start, end, count)
        return
    ranges = sub_ranges(start, end, count)
    assert len(ranges) == count
    assert ranges[0][0] == start and ranges[-1][1] == end
    assert all(lo < hi for lo, hi in ranges)  # none empty
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))  # no gap, no overlap
    sizes = [hi - lo for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert sub_ranges(start, end, count) == ranges  # a replay is split the same way


@given(start=LSN, length=st.integers(1, 2**36), partitions=st.integers(1, 256),
       min_bytes=st.integers(1, 2**30))
def test_partition_count_respects_the_cap_and_the_minimum_size(
    start: int, length: int, partitions: int, min_bytes: int
) -> None:
    count = partition_count(start, start + length, partitions, min_bytes)
    assert 1 <= count <= partitions
    if count > 1:
        assert length // count >= min_bytes  # every part at least min_bytes
    # as many as allowed: one more would be too small, or over the cap
    assert count == partitions or length // (count + 1) < min_bytes


def test_small_batches_stay_one_partition() -> None:
    mb = 1024 * 1024
    assert partition_count(0, 31 * mb, 8, 16 * mb) == 1
    assert partition_count(0, 32 * mb, 8, 16 * mb) == 2
    assert partition_count(0, 10_000 * mb, 8, 16 * mb) == 8
    with pytest.raises(ValueError, match="partitions and min_bytes must be positive"):
        partition_count(0, mb, 0, 1)
