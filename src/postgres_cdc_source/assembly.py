"""Turn decoded events into whole transactions, and whole transactions into Arrow batches.

Every output row needs its transaction's commit LSN, which both plugins report only at the end
of the transaction. Changes therefore wait for their COMMIT: the first ``spill_rows`` of a
transaction in memory, the rest in a temporary file, so a million-change transaction costs disk,
not memory. Rows leave in Arrow batches of ``batch_rows``.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

import pyarrow as pa

from postgres_cdc_source.decoding import Begin, Change, Commit
from postgres_cdc_source.lsn import format_lsn
from postgres_cdc_source.routing import Router
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

    def drain(self) -> Iterator[Change]:
        """Yield every spilled change, then delete the file."""
        try:
            self._file.seek(0)
            for _ in range(self.chunks):
                yield from pickle.load(self._file)
        finally:
            self._file.close()


def _committed(spill: Spill | None, pending: list[Change]) -> Iterator[Change]:
    if spill is not None:
        yield from spill.drain()
    yield from pending


def transactions(
    events: Iterable[Begin | Change | Commit], spill_rows: int
) -> Iterator[tuple[Commit, Iterator[Change]]]:
    """Group events into ``(commit, changes)`` in commit order, spilling large transactions.

    The caller must exhaust each ``changes`` iterator before asking for the next transaction.
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


def record_batches(
    txns: Iterable[tuple[Commit, Iterator[Change]]], router: Router, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Rows in :data:`~postgres_cdc_source.schema.ARROW_SCHEMA` order, ``batch_rows`` at a time."""
    rows: list[tuple[object, ...]] = []
    route = router.route if router.active else None
    no_destination = (None, None, None)
    for commit, changes in txns:
        commit_lsn = format_lsn(commit.end_lsn)
        xid, ts = commit.xid, commit.commit_ts
        for c in changes:
            rows.append(
                (
                    format_lsn(c.lsn),
                    commit_lsn,
                    xid,
                    ts,
                    c.seq,
                    c.schema,
                    c.table,
                    c.op,
                    c.key,
                    c.before,
                    c.after,
                    list(c.unchanged),
                    f"{commit_lsn}:{c.seq}",
                    *(route(c) if route else no_destination),
                )
            )
            if len(rows) >= batch_rows:
                yield _to_batch(rows)
                rows = []
    if rows:
        yield _to_batch(rows)


def _to_batch(rows: list[tuple[object, ...]]) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=field.type) for col, field in zip(columns, ARROW_SCHEMA, strict=True)],
        schema=ARROW_SCHEMA,
    )
