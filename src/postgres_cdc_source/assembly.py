"""Turn decoded events into whole transactions, and whole transactions into Arrow batches.

Every output row needs its transaction's commit LSN, which both plugins report only at the end
of the transaction. Changes therefore wait for their COMMIT: the first ``spill_rows`` of a
transaction in memory, the rest in a temporary file, so a million-change transaction costs disk,
not memory. Rows leave in Arrow batches of ``batch_rows``, built column-wise: the transaction's
own values (commit LSN, xid, time) are repeated rather than copied into every row, and ``id`` is
joined by Arrow (the reader's Python work per change is its decoding, not its row building).
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc

from postgres_cdc_source.decoding import Begin, Change, Commit
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.lsn import format_lsn
from postgres_cdc_source.schema import ARROW_SCHEMA

__all__ = ["transactions", "record_batches", "Spill"]


class Spill:
    """Chunks of changes pickled to an unnamed temporary file, read back once in order."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="pg-cdc-spill-")  # noqa: SIM115 - closed by drain()
        self.chunks = 0

    def write(self, changes: list[Change]) -> None:
        pickle.dump(changes, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.chunks += 1

    def drain(self) -> Iterator[list[Change]]:
        """Yield every spilled chunk, in order, then delete the file."""
        try:
            self._file.seek(0)
            for _ in range(self.chunks):
                yield pickle.load(self._file)
        finally:
            self._file.close()


def _committed(spill: Spill | None, pending: list[Change]) -> Iterator[list[Change]]:
    if spill is not None:
        yield from spill.drain()
    if pending:
        yield pending


def transactions(
    events: Iterable[Begin | Change | Commit], spill_rows: int
) -> Iterator[tuple[Commit, Iterator[list[Change]]]]:
    """Group events into ``(commit, chunks of changes)`` in commit order, spilling large
    transactions.

    The caller must exhaust each chunk iterator before asking for the next transaction.
    """
    pending: list[Change] = []
    spill: Spill | None = None
    for event in events:
        kind = type(event)
        if kind is Change:
            pending.append(event)  # type: ignore[arg-type]
            if len(pending) >= spill_rows:
                spill = spill or Spill()
                spill.write(pending)
                pending = []
        elif kind is Commit:
            yield event, _committed(spill, pending)  # type: ignore[misc]
            pending, spill = [], None
        elif kind is Begin:
            pending, spill = [], None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_TIMESTAMP = ARROW_SCHEMA.field("commit_ts").type
_NAMES = ARROW_SCHEMA.field("unchanged").type


class _Columns:
    """One Arrow batch being filled, column by column.

    Rows arrive a transaction chunk at a time: the chunk's changes are transposed with one
    ``zip`` and appended to per-column lists, the transaction's own values (commit LSN, xid,
    time) are repeated, and ``id`` is joined by Arrow when the batch is built. Per change, Python
    only formats its LSN (and routes it, when routing is on).
    """

    def __init__(self) -> None:
        self.rows = 0
        self.lsn: list[str] = []
        self.commit_lsn: list[str] = []
        self.xid: list[int] = []
        self.micros: list[int] = []
        self.changes: list[list[object]] = [[] for _ in range(8)]  # seq .. unchanged
        self.destinations: list[tuple[str | None, str | None, str | None]] = []

    def add(
        self, changes: list[Change], commit_lsn: str, xid: int, micros: int,
        route: Callable[[Change], tuple[str | None, str | None, str | None]] | None,
    ) -> None:
        n = len(changes)
        lsns, *rest = zip(*changes, strict=True)
        del rest[len(self.changes):]  # Change.values is for the router only
        self.lsn.extend([f"{lsn >> 32:X}/{lsn & 0xFFFF_FFFF:X}" for lsn in lsns])
        self.commit_lsn.extend([commit_lsn] * n)
        self.xid.extend([xid] * n)
        self.micros.extend([micros] * n)
        for column, values in zip(self.changes, rest, strict=True):
            column.extend(values)
        if route is not None:
            self.destinations.extend(map(route, changes))
        self.rows += n

    def batch(self) -> pa.RecordBatch:
        seq, schema, table, op, key, before, after, unchanged = self.changes
        string = pa.string()
        commit_lsn = pa.array(self.commit_lsn, string)
        seq_array = pa.array(seq, pa.int32())
        if any(unchanged):
            names = pa.array(unchanged, _NAMES)
        else:  # the usual case: every row has an empty list
            names = pa.ListArray.from_arrays(pa.array([0] * (self.rows + 1), pa.int32()),
                                             pa.array([], string))
        if self.destinations:
            stream, topic, key_column = (
                pa.array(c, string) for c in zip(*self.destinations, strict=True))
        else:
            stream = topic = key_column = pa.nulls(self.rows, string)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.lsn, string),
                commit_lsn,
                pa.array(self.xid, pa.int64()),
                pa.array(self.micros, pa.int64()).view(_TIMESTAMP),
                seq_array,
                pa.array(schema, string),
                pa.array(table, string),
                pa.array(op, string),
                pa.array(key, string),
                pa.array(before, string),
                pa.array(after, string),
                names,
                pc.binary_join_element_wise(commit_lsn, seq_array.cast(string), ":"),
                stream,
                topic,
                key_column,
            ],
            schema=ARROW_SCHEMA,
        )


def record_batches(
    txns: Iterable[tuple[Commit, Iterator[list[Change]]]], router: Router, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Rows in :data:`~postgres_cdc_source.schema.ARROW_SCHEMA` order, ``batch_rows`` at a time."""
    route = router.route if router.active else None
    columns = _Columns()
    for commit, chunks in txns:
        commit_lsn = format_lsn(commit.end_lsn)
        micros = (commit.commit_ts - _EPOCH) // _MICROSECOND
        for chunk in chunks:
            start = 0
            while start < len(chunk):
                room = batch_rows - columns.rows
                part = chunk if start == 0 and len(chunk) <= room else chunk[start:start + room]
                columns.add(part, commit_lsn, commit.xid, micros, route)
                start += len(part)
                if columns.rows >= batch_rows:
                    yield columns.batch()
                    columns = _Columns()
    if columns.rows:
        yield columns.batch()
