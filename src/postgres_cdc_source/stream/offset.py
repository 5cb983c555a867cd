"""``mode=cdc``'s offsets: where a query stands, as Spark's checkpoint records it.

An offset is a JSON object. ``lsn`` is always there: the slot's position, where the next batch
starts. What else it holds depends on what the query is doing::

    {"lsn": "0/1A2B3C0"}                                          streaming
    {"lsn": "0/1505AE0", "snapshot": {...}, "planned": [...]}     reading a snapshot
    {"lsn": "0/1505AE0", "reselect_until": "pending", "planned": [...]}   a snapshot just done
    {"lsn": "0/1A2B3C0", "backfill": {...}, "reselect_until": "0/16B3F28"}
    {"lsn": "0/1A2B3C0", "columns": [["public", "t", [["id", 23, -1, true]]]]}

``snapshot`` and ``planned``: :mod:`postgres_cdc_source.snapshot`; ``backfill``:
:mod:`postgres_cdc_source.backfill.progress`; ``reselect_until``: the LSN up to which the stream
completes unchanged TOAST values after a snapshot that was not exact
(:mod:`postgres_cdc_source.stream.reselect`), ``pending`` until the first planning after the
snapshot decides; ``columns``: with ``include_schema_changes``, each captured table's columns
as of ``lsn`` (:mod:`postgres_cdc_source.decoding.schema_changes`), for the tables the stream
has read a change of.

Spark compares offsets as JSON text, so :meth:`StreamOffset.to_json` writes the keys in this
one order and leaves out what is empty: an offset read from a checkpoint is written back as the
same text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from connector_common.lsn import format_lsn, parse_lsn
from postgres_cdc_source.backfill.progress import Backfills
from postgres_cdc_source.decoding.schema_changes import ColumnState, state_from_json, state_json
from postgres_cdc_source.snapshot.offsets import (
    PlannedChunk,
    Position,
    chunk_from_json,
    chunk_json,
)

__all__ = ["PENDING", "StreamOffset"]

PENDING: Final = "pending"
"""``reselect_until`` of a snapshot just finished: the next planning decides."""


@dataclass(frozen=True)
class StreamOffset:
    """One offset of a ``pg_cdc`` stream (``mode=cdc``); see the module docstring."""

    lsn: int
    snapshot: Position | None = None
    """How far the snapshot being read got; ``None`` when no snapshot is running."""
    backfill: Backfills = Backfills()
    reselect_until: int | Literal["pending"] | None = None
    planned: tuple[PlannedChunk, ...] = ()
    """The chunks a snapshot batch ending here was planned with, in order (empty: none pinned,
    as in offsets written before offsets pinned their chunks)."""
    columns: ColumnState = ()
    """``include_schema_changes``: the captured tables' columns as of ``lsn`` (empty: none
    known yet, or the option is off)."""

    def __post_init__(self) -> None:
        if not self.backfill.kept_at(self.lsn):  # says nothing here: one value for "nothing"
            object.__setattr__(self, "backfill", Backfills())

    @classmethod
    def snapshot_start(cls, consistent_point: int) -> StreamOffset:
        """The start of a snapshot of the slot's ``consistent_point``: nothing read yet."""
        return cls(consistent_point, Position(None, None, 0))

    @classmethod
    def snapshot_batch(
        cls, consistent_point: int, reached: Position | None, chunks: tuple[PlannedChunk, ...]
    ) -> StreamOffset:
        """The end of a snapshot batch that read ``chunks`` and got to ``reached`` (``None``:
        the snapshot is finished, and whether the stream must complete unchanged values is
        decided when the next batch is planned, once every chunk has been read)."""
        return cls(consistent_point, reached, reselect_until=PENDING if reached is None else None,
                   planned=chunks)

    def to_json(self) -> dict[str, Any]:
        """The JSON object Spark stores: keys in one fixed order, the empty ones left out."""
        offset: dict[str, Any] = {"lsn": format_lsn(self.lsn)}
        if self.snapshot is not None:
            offset["snapshot"] = self.snapshot.to_json()
        if self.backfill != Backfills():
            offset["backfill"] = self.backfill.to_json()
        if isinstance(self.reselect_until, int):
            offset["reselect_until"] = format_lsn(self.reselect_until)
        elif self.reselect_until is not None:
            offset["reselect_until"] = self.reselect_until
        if self.planned:
            offset["planned"] = [chunk_json(chunk) for chunk in self.planned]
        if self.columns:
            offset["columns"] = state_json(self.columns)
        return offset

    @classmethod
    def from_json(cls, offset: Mapping[str, Any]) -> StreamOffset:
        """Parse an offset Spark hands back (or a checkpoint's ``offsets/`` line)."""
        backfill, reselect = offset.get("backfill"), offset.get("reselect_until")
        return cls(
            parse_lsn(str(offset["lsn"])),
            Position.from_json(offset["snapshot"]) if "snapshot" in offset else None,
            Backfills.from_json(backfill) if backfill else Backfills(),
            PENDING if reselect == PENDING else None if reselect is None else parse_lsn(reselect),
            tuple(chunk_from_json(chunk) for chunk in offset.get("planned") or ()),
            state_from_json(offset.get("columns") or ()),
        )
