"""The executor's part of a backfill: a chunk's rows placed in the stream at its marker."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import orjson
import pyarrow as pa

from postgres_cdc_source.assembly import record_batches
from postgres_cdc_source.backfill.progress import ChunkPlan
from postgres_cdc_source.backfill.visibility import wait_until_visible
from postgres_cdc_source.decoding import MESSAGE, Change, Commit, message_prefix
from postgres_cdc_source.decoding.blocks import ChangeBlock, Chunk
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.options import MARKER_PREFIX, CdcOptions
from postgres_cdc_source.rows import RowFormat
from postgres_cdc_source.rows.json.format import JSON_ROWS
from postgres_cdc_source.snapshot import SnapshotPartition, SnapshotTable, read_chunk

__all__ = ["ChunkRead", "is_marker", "spliced"]

Unit = tuple[Commit, Iterator[Chunk]]


@dataclass(frozen=True)
class ChunkRead:
    """A planned chunk with what reading it needs (looked up on the driver)."""

    plan: ChunkPlan
    table: SnapshotTable


def is_marker(prefix: str) -> bool:
    return prefix == MARKER_PREFIX


def _marker_nonce(change: Change) -> str | None:
    if change.op != MESSAGE or message_prefix(change) != MARKER_PREFIX:
        return None
    after = orjson.loads(change.after or "{}")
    return str(after.get("content"))


def spliced(
    units: Iterable[Unit], chunk: ChunkRead, options: CdcOptions, router: Router,
    rows: RowFormat = JSON_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The stream's rows with the chunk's rows right after the transaction of its marker
    (markers themselves are left out). Without its marker in this range, no chunk rows. The
    chunk is read once the transactions before the marker are visible
    (:mod:`~postgres_cdc_source.backfill.visibility`). ``rows``: the query's row format."""
    schema = rows.schemas()[1]
    rest = iter(units)
    found: list[int] = []
    before: set[int] = set()

    def head() -> Iterator[Unit]:
        for commit, chunks in rest:
            yield commit, _without_markers(chunks, chunk.plan.nonce, commit, found)
            if found:
                return
            if commit.xid is not None and commit.commit_ts is not None:
                before.add(commit.xid)  # not a lone message's: its transaction may still run

    yield from record_batches(head(), router, options.batch_rows, schema)
    if found:
        plan = chunk.plan
        wait_until_visible(options, before, ".".join(plan.table))
        yield from read_chunk(options, SnapshotPartition(
            chunk.table, plan.lo, plan.hi, None, found[0], where=plan.where or "true",
            created=plan.created), rows)
    yield from record_batches(rest, router, options.batch_rows, schema)


def _without_markers(
    chunks: Iterator[Chunk], nonce: str, commit: Commit, found: list[int]
) -> Iterator[Chunk]:
    for changes in chunks:
        if isinstance(changes, ChangeBlock):  # row changes only: no marker among them
            yield changes
            continue
        kept = []
        for change in changes:
            marker = _marker_nonce(change)
            if marker is None:
                kept.append(change)
            elif marker == nonce:
                found.append(commit.end_lsn)
        if kept:
            yield kept
