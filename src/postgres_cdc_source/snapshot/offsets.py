"""Where a snapshot stands, and the chunks a batch pinned, as Spark's offsets record them (see
:mod:`postgres_cdc_source.snapshot` for the format, :mod:`postgres_cdc_source.stream.offset` for
the whole offset)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Key", "PlannedChunk", "Position", "chunk_from_json", "chunk_json"]

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

    def to_json(self) -> dict[str, Any]:
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


def chunk_json(chunk: PlannedChunk) -> list[Any]:
    """A pinned chunk as an offset writes it: ``[schema, table, lo, hi]``."""
    (schema, table), lo, hi = chunk
    return [schema, table, _key_json(lo), _key_json(hi)]


def chunk_from_json(data: list[Any]) -> PlannedChunk:
    schema, name, lo, hi = data
    return (str(schema), str(name)), _key(lo), _key(hi)
