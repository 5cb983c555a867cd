"""Offsets as Spark checkpoints them, and the pure planning over them: no I/O here.

A position is ``(topic, partition)``; an offset map gives each position the *next* offset to
read (one past the last message read), so a range ``[start, end)`` is empty when they are equal.
Spark compares offsets as JSON strings, so :func:`to_json` always writes topics in name order
and partitions in numeric order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "Position",
    "Range",
    "admit",
    "behind",
    "from_json",
    "parse_ending_spec",
    "parse_offset_spec",
    "resolve",
    "split",
    "to_json",
]

EARLIEST = -2
"""In an offsets option: the oldest message the partition still holds (Kafka's convention)."""
LATEST = -1
"""In an offsets option: one past the newest message when the query plans."""


class Position(NamedTuple):
    """One Iggy partition of one topic of the source's stream."""

    topic: str
    partition: int


class Range(NamedTuple):
    """Messages ``[start, end)`` of one position: one Spark partition's work."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class OffsetSpec:
    """A parsed ``starting_offsets`` / ``ending_offsets``: ``default`` for every position the
    ``explicit`` map leaves out (``None``: the caller's fallback)."""

    default: int | None
    explicit: Mapping[Position, int] = field(default_factory=dict)


def parse_offset_spec(text: str) -> OffsetSpec:
    """``earliest``, ``latest`` or ``{"topic": {"partition": offset}}``; :class:`ValueError`
    says what is wrong (the option machinery names the option)."""
    word = text.strip().lower()
    if word == "earliest":
        return OffsetSpec(EARLIEST)
    if word == "latest":
        return OffsetSpec(LATEST)
    try:
        document = json.loads(text)
    except ValueError:
        raise ValueError(
            'expected earliest, latest or a JSON map like {"topic": {"0": 42}}'
        ) from None
    return OffsetSpec(None, from_json(document, minimum=EARLIEST))


def parse_ending_spec(text: str) -> OffsetSpec:
    """``ending_offsets``: ``latest`` or a map as :func:`parse_offset_spec` reads it, without
    ``earliest`` (``-2``): a read that ends where the partition begins reads nothing, which is
    never what was meant."""
    spec = parse_offset_spec(text)
    if spec.default == EARLIEST or EARLIEST in spec.explicit.values():
        raise ValueError('expected latest or a JSON map like {"topic": {"0": 42}} of offsets to '
                         "stop before (-1 for latest); earliest cannot end a read")
    return spec


def from_json(document: Any, *, minimum: int = 0) -> dict[Position, int]:
    """An offset map from its JSON form; :class:`ValueError` for any other shape."""
    if not isinstance(document, dict):
        raise ValueError('an offsets map must be a JSON object like {"topic": {"0": 42}}')
    offsets: dict[Position, int] = {}
    for topic, partitions in document.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"topic {topic!r}: expected an object of partition: offset")
        for key, offset in partitions.items():
            if not (isinstance(key, str) and key.isascii() and key.isdigit()):
                raise ValueError(f"topic {topic!r}: partition {key!r} is not a number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < minimum:
                raise ValueError(
                    f"topic {topic!r} partition {key}: offset {offset!r} is not an integer "
                    f">= {minimum}"
                )
            offsets[Position(topic, int(key))] = offset
    return offsets


def to_json(offsets: Mapping[Position, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON form: topics by name, partitions by number."""
    document: dict[str, dict[str, int]] = {}
    for position in sorted(offsets):
        document.setdefault(position.topic, {})[str(position.partition)] = offsets[position]
    return document


def resolve(
    spec: OffsetSpec,
    earliest: Mapping[Position, int],
    latest: Mapping[Position, int],
    fallback: int,
) -> dict[Position, int]:
    """Concrete offsets for every position of ``latest`` (its next offsets); ``earliest``
    leaves out partitions that hold nothing (emptied by retention, say), which begin at their
    end.

    Raises :class:`ValueError` for an explicit offset past a partition's end or for a position
    the subscription does not have (a typo in a topic name must not be ignored).
    """
    unknown = sorted(set(spec.explicit) - set(latest))
    if unknown:
        topic, partition = unknown[0]
        raise ValueError(f"topic {topic!r} partition {partition} is not subscribed or does "
                         "not exist")
    resolved: dict[Position, int] = {}
    for position, end in latest.items():
        wanted = spec.explicit.get(position, fallback if spec.default is None else spec.default)
        if wanted == EARLIEST:
            wanted = earliest.get(position, end)  # holding nothing: it begins at its end
        elif wanted == LATEST:
            wanted = end
        elif wanted > end:
            raise ValueError(f"offset {wanted} of topic {position.topic!r} partition "
                             f"{position.partition} is past its end ({end})")
        resolved[position] = wanted
    return resolved


def admit(
    start: Mapping[Position, int],
    latest: Mapping[Position, int],
    budget: int | None,
    cost: Mapping[Position, int] | None = None,
) -> dict[Position, int]:
    """How far the next micro-batch reads: ``latest``, or at most ``budget`` more than ``start``
    shared fairly (water-filling: no partition gets less than an even share unless it has less
    waiting), so one busy partition cannot starve the others.

    Without ``cost`` the budget counts messages; with it, each message of a position costs
    ``cost[position]`` (its bytes, at least 1) and only whole messages are admitted. A batch
    always makes progress: when not even one message fits the budget, the first message of the
    position with the least waiting is admitted alone (as Spark's file source admits one file
    larger than ``maxBytesPerTrigger``).

    Positions of ``latest`` missing from ``start`` start at 0 here; callers put new positions'
    earliest offsets into ``start`` first.
    """
    costs = cost or {}

    def unit(position: Position) -> int:
        return max(1, costs.get(position, 1))

    backlog = {p: max(0, end - start.get(p, 0)) for p, end in latest.items()}
    weight = {p: n * unit(p) for p, n in backlog.items()}
    if budget is None or sum(weight.values()) <= budget:
        return dict(latest)
    # the water level: partitions needing less than an even share of what is left get all they
    # need, the others the same `level`, in whole messages
    waiting = sorted((p for p in backlog if backlog[p]), key=lambda p: (weight[p], p))
    remaining, level = budget, 0
    for index, position in enumerate(waiting):
        level = remaining // (len(waiting) - index)
        if weight[position] > level:
            break
        remaining -= weight[position]
    granted = {p: min(backlog[p], level // unit(p)) for p in backlog}
    # what flooring to whole messages left over goes, a message at a time, to the partition
    # held back the most, while its next message fits (never past it: that would be unfair)
    left = budget - sum(granted[p] * unit(p) for p in backlog)
    while short := [p for p in waiting if granted[p] < backlog[p]]:
        position = min(short, key=lambda p: (granted[p] * unit(p), p))
        if unit(position) > left:
            break
        granted[position] += 1
        left -= unit(position)
    if not any(granted.values()):
        granted[waiting[0]] = 1  # a message larger than the whole budget: admitted alone
    return {p: (start.get(p, 0) + granted[p] if backlog[p] else end) for p, end in latest.items()}


def split(
    start: Mapping[Position, int], end: Mapping[Position, int], max_messages: int
) -> list[Range]:
    """The non-empty ranges between two offset maps, none longer than ``max_messages``, in
    position then offset order (the order Spark numbers its partitions)."""
    ranges: list[Range] = []
    for position in sorted(end):
        first, stop = start.get(position, 0), end[position]
        ranges.extend(
            Range(position.topic, position.partition, low, min(low + max_messages, stop))
            for low in range(first, stop, max_messages)
        )
    return ranges



def behind(end: Mapping[Position, int], latest: Mapping[Position, int]) -> dict[Position, int]:
    """Messages each partition has that a query at ``end`` has not read (its lag); a partition
    it has not seen yet counts from 0."""
    return {p: max(0, stop - end.get(p, 0)) for p, stop in latest.items()}
