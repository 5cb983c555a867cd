"""Split one batch's WAL range into sub-ranges that Spark tasks decode in parallel.

A batch ``(start, end]`` holds the transactions whose commit record starts in ``[start, end)``.
For any points ``start < m1 < ... < mk < end`` the sub-ranges ``(start, m1], (m1, m2], ...,
(mk, end]`` split those transactions exactly (each belongs to the sub-range holding the start
of its commit record), whether or not a point falls on a commit boundary: so the split is by
WAL bytes alone, computed from the two LSNs the planner already has, with no look at the WAL.

The split depends only on ``start``, ``end`` and the two options, so a replayed batch is split
the same way (given the same options).
"""

from __future__ import annotations

import itertools

__all__ = ["partition_count", "sub_ranges"]


def partition_count(start: int, end: int, partitions: int, min_bytes: int) -> int:
    """How many sub-ranges ``(start, end]`` is read in: at most ``partitions``, each at least
    ``min_bytes`` of WAL, and at least one."""
    if partitions < 1 or min_bytes < 1:
        raise ValueError("partitions and min_bytes must be positive")
    return max(1, min(partitions, (end - start) // min_bytes))


def sub_ranges(start: int, end: int, count: int) -> list[tuple[int, int]]:
    """``(start, end]`` cut into ``count`` contiguous sub-ranges of (nearly) equal WAL bytes."""
    if count < 1 or end - start < count:
        raise ValueError(f"cannot cut {end - start} bytes into {count} ranges")
    points = [start + (end - start) * i // count for i in range(count + 1)]
    return list(itertools.pairwise(points))
