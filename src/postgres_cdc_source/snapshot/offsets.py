"""Where a snapshot stands, as Spark's offsets record it (see :mod:`postgres_cdc_source.snapshot`
for the format)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from postgres_cdc_source.lsn import format_lsn

__all__ = [
    "Key", "PlannedChunk", "Position", "in_progress", "start_offset", "offset_of", "position_of",
    "offset_key", "planned_bounds", "RESELECT_UNTIL", "PENDING", "PLANNED",
]

Key = tuple[str, ...]
"""A chunk bound: the chunk key's values as their output text (``ctid`` as ``(block,0)``)."""

PlannedChunk = tuple[tuple[str, str], Key | None, Key | None]
"""A chunk as an offset pins it: ``((schema, table), lo, hi)``."""


def _key_json(key: Key | None) -> list[str] | None:
    return None if key is None else list(key)


def _key(value: Any) -> Key | None:
    return None if value is None else tuple(str(v) for v in value)


@dataclass(frozen=True)
class Position:
    """How far a snapshot got; see the module docstring."""

    table: tuple[str, str] | None
    after: Key | None
    chunks: int

    def as_json(self) -> dict[str, Any]:
        return {
            "after": _key_json(self.after),
            "chunks": self.chunks,
            "table": list(self.table) if self.table is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        table, after = data.get("table"), data.get("after")
        return cls(
            (str(table[0]), str(table[1])) if table else None,
            _key(after),
            int(data.get("chunks", 0)),
        )

    def describe(self) -> str:
        if self.table is None:
            return "not started"
        where = ".".join(self.table)
        return f"{self.chunks} chunks, {where} done" if self.after is None else (
            f"{self.chunks} chunks, {where} up to key {list(self.after)}"
        )


def in_progress(offset: dict[str, Any]) -> bool:
    """Whether ``offset`` is one of a snapshot still running."""
    return "snapshot" in offset


def start_offset(consistent_point: int) -> dict[str, Any]:
    return offset_of(consistent_point, Position(None, None, 0))


RESELECT_UNTIL = "reselect_until"
PENDING = "pending"
PLANNED = "planned"


def offset_of(
    consistent_point: int, position: Position | None, chunks: Sequence[PlannedChunk] = ()
) -> dict[str, Any]:
    """The offset at ``position``, reached by reading ``chunks``. ``None``: the snapshot is
    finished, and whether the stream must complete unchanged values
    (:mod:`postgres_cdc_source.stream.reselect`) is decided when the next batch is planned,
    once every chunk has been read."""
    offset: dict[str, Any] = {"lsn": format_lsn(consistent_point)}
    if position is not None:
        offset["snapshot"] = position.as_json()
    else:
        offset[RESELECT_UNTIL] = PENDING
    if chunks:
        offset[PLANNED] = [[schema, table, _key_json(lo), _key_json(hi)]
                           for (schema, table), lo, hi in chunks]
    return offset


def planned_bounds(offset: dict[str, Any]) -> list[PlannedChunk] | None:
    """The ``(table, lo, hi)`` of the chunks ``offset`` pins, in order; ``None`` for an offset
    that pins none (written before offsets pinned their chunks)."""
    planned = offset.get(PLANNED)
    if planned is None:
        return None
    return [((str(schema), str(name)), _key(lo), _key(hi)) for schema, name, lo, hi in planned]


def position_of(offset: dict[str, Any]) -> Position | None:
    return Position.from_json(offset["snapshot"]) if in_progress(offset) else None


def offset_key(offset: dict[str, Any]) -> str:
    """Canonical JSON of an offset, as Spark compares them."""
    return orjson.dumps(offset, option=orjson.OPT_SORT_KEYS).decode()
