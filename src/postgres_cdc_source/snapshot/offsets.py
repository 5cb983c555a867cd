"""Where a snapshot stands, and the chunks a batch pinned, as Spark's offsets record them (see
:mod:`postgres_cdc_source.snapshot` for the format, :mod:`postgres_cdc_source.stream.offset` for
the whole offset)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Creation", "Key", "PlannedChunk", "Position", "chunk_from_json", "chunk_json",
           "key_from_json", "key_json"]

Key = tuple[str, ...]
"""A chunk bound: the chunk key's values as their output text (``ctid`` as ``(block,0)``)."""

PlannedChunk = tuple[tuple[str, str], Key | None, Key | None]
"""A chunk as an offset pins it: ``((schema, table), lo, hi)``."""


def key_json(key: Key | None) -> list[str] | None:
    """``key`` as offsets write it."""
    return None if key is None else list(key)


def key_from_json(value: Any) -> Key | None:
    """A key as :func:`key_json` wrote it."""
    return None if value is None else tuple(str(v) for v in value)


@dataclass(frozen=True)
class Creation:
    """The rows a table's creating transaction ``xmin`` wrote before its command ``cid`` added
    the table to the publications (``CREATE TABLE AS``, ``SELECT INTO``): pgoutput never sent
    them, and nobody changed them since. A read selects them with both numbers as parameters."""

    xmin: int
    cid: int

    def to_json(self) -> dict[str, int]:
        return {"xmin": self.xmin, "cid": self.cid}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Creation | None:
        return None if data is None else cls(int(data["xmin"]), int(data["cid"]))


@dataclass(frozen=True)
class Position:
    """How far a snapshot got; see the module docstring."""

    table: tuple[str, str] | None
    after: Key | None
    chunks: int

    def to_json(self) -> dict[str, Any]:
        return {
            "after": key_json(self.after),
            "chunks": self.chunks,
            "table": list(self.table) if self.table is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        table, after = data.get("table"), data.get("after")
        return cls(
            (str(table[0]), str(table[1])) if table else None,
            key_from_json(after),
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
    return [schema, table, key_json(lo), key_json(hi)]


def chunk_from_json(data: list[Any]) -> PlannedChunk:
    schema, name, lo, hi = data
    return (str(schema), str(name)), key_from_json(lo), key_from_json(hi)
