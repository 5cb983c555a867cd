"""Where the backfills of a query stand, as Spark's offsets record it.

A stream offset (:class:`~postgres_cdc_source.stream.offset.StreamOffset`) with backfills
pending carries them under ``backfill``::

    {"lsn": "0/1A2B3C0",
     "backfill": {"queue": [{"id": "9f..", "tables": [["public", "t"]], "where": null,
                             "after": ["41"], "chunks": 3}],
                  "chunk": {"id": "9f..", "nonce": "c1..", "table": ["public", "t"],
                            "lo": ["41"], "hi": ["82"]},
                  "scanned": "0/1A2B3C0"}}

``queue`` holds the requests in the order they were found; the first is running: the rows of
its first table with a key up to ``after`` are delivered (``chunks`` chunks). ``chunk`` is the
chunk the batch ending at this offset delivers (its marker lies in the batch's WAL range), so a
replayed batch reads the same key range; the next planning counts it as delivered.
``scanned`` is how far the WAL was searched for requests.

Spark 4.0 and 4.1 never ask the reader for its report (:mod:`postgres_cdc_source.health`), but
every progress event shows the batch's ``endOffset``: :meth:`Backfills.from_progress` reads this
state back from it, so a listener still sees the requests pending and each chunk delivered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from connector_common.lsn import format_lsn, parse_lsn
from postgres_cdc_source.snapshot.offsets import Creation, Key, key_from_json, key_json

__all__ = ["Backfills", "ChunkPlan", "Request", "TableProgress"]

@dataclass(frozen=True)
class Request:
    """A backfill request: ``tables`` still to read (the first is being read), the rows of the
    first one with a key up to ``after`` delivered. ``created``: the event trigger's request
    for a table's first rows (:class:`Creation`); as nobody changed them since, a table without
    a primary key is read too, in ``ctid`` ranges."""

    id: str
    tables: tuple[tuple[str, str], ...]
    where: str | None = None
    after: Key | None = None
    chunks: int = 0
    created: Creation | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"id": self.id, "tables": [list(t) for t in self.tables], "where": self.where,
                "after": key_json(self.after), "chunks": self.chunks}
        return data if self.created is None else {**data, "created": self.created.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Request:
        return cls(str(data["id"]), tuple((str(s), str(t)) for s, t in data["tables"]),
                   data.get("where"), key_from_json(data.get("after")), int(data.get("chunks", 0)),
                   Creation.from_json(data.get("created")))


@dataclass(frozen=True)
class ChunkPlan:
    """The chunk a batch delivers: keys in ``(lo, hi]`` of ``table`` (``hi`` ``None``: to the
    end), spliced into the stream where the marker with ``nonce`` was decoded."""

    id: str
    nonce: str
    table: tuple[str, str]
    lo: Key | None
    hi: Key | None
    where: str | None
    created: Creation | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"id": self.id, "nonce": self.nonce, "table": list(self.table),
                "lo": key_json(self.lo), "hi": key_json(self.hi), "where": self.where}
        return data if self.created is None else {**data, "created": self.created.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChunkPlan:
        schema, table = data["table"]
        return cls(str(data["id"]), str(data["nonce"]), (str(schema), str(table)),
                   key_from_json(data.get("lo")), key_from_json(data.get("hi")), data.get("where"),
                   Creation.from_json(data.get("created")))


@dataclass(frozen=True)
class Backfills:
    """The ``backfill`` part of an offset; empty when nothing is pending."""

    queue: tuple[Request, ...] = ()
    chunk: ChunkPlan | None = None
    scanned: int = 0

    def kept_at(self, lsn: int) -> bool:
        """Whether an offset at ``lsn`` keeps this state: something is queued or planned, or
        the WAL was searched past ``lsn`` (a search up to ``lsn`` says nothing: the next batch
        reads from there anyway)."""
        return bool(self.queue) or self.chunk is not None or self.scanned > lsn

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"queue": [r.to_json() for r in self.queue]}
        if self.chunk is not None:
            data["chunk"] = self.chunk.to_json()
        if self.scanned:
            data["scanned"] = format_lsn(self.scanned)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Backfills:
        chunk = data.get("chunk")
        return cls(tuple(Request.from_json(r) for r in data.get("queue", ())),
                   ChunkPlan.from_json(chunk) if chunk else None,
                   parse_lsn(data["scanned"]) if data.get("scanned") else 0)

    @classmethod
    def from_progress(cls, end: str | None) -> Backfills | None:
        """The state in a source's ``endOffset`` from a progress event (:attr:`chunk`: the chunk
        that batch delivered), or ``None`` when it is not a ``pg_cdc`` stream offset."""
        try:
            data = json.loads(end) if end else None
            if not isinstance(data, dict) or not isinstance(data.get("lsn"), str):
                return None  # another source's offset, or a polling one
            backfill = data.get("backfill")
            return cls.from_json(backfill) if backfill else cls()
        except (ValueError, KeyError, TypeError):
            return None

    def delivered(self) -> Backfills:
        """The state once the batch carrying :attr:`chunk` is committed: the running request
        moved past it (to its next table, or done)."""
        chunk = self.chunk
        if chunk is None:
            return self
        queue = list(self.queue)
        if queue and queue[0].id == chunk.id and queue[0].tables[:1] == (chunk.table,):
            head = queue[0]
            if chunk.hi is None:  # the table is done
                head = replace(head, tables=head.tables[1:], after=None, chunks=head.chunks + 1)
            else:
                head = replace(head, after=chunk.hi, chunks=head.chunks + 1)
            queue[0] = head
            if not head.tables:
                queue.pop(0)
        return replace(self, queue=tuple(queue), chunk=None)

    def requested(self, requests: list[Request], cancels: set[str], scanned: int) -> Backfills:
        """Requests found in the WAL up to ``scanned`` added behind the queue (a request for a
        table that a queued request will read is kept: it reads the table again, with its own
        ``where``), ``cancels`` removed."""
        known = {r.id for r in self.queue}
        queue = [r for r in self.queue if r.id not in cancels]
        queue += [r for r in requests if r.id not in known and r.id not in cancels]
        return replace(self, queue=tuple(queue), scanned=max(self.scanned, scanned))

    def without_table(self, table: tuple[str, str]) -> Backfills:
        """The running request without its current ``table`` (refused at pick-up)."""
        head = self.queue[0]
        rest = replace(head, tables=head.tables[1:], after=None)
        return replace(self, queue=((rest,) if rest.tables else ()) + self.queue[1:])


@dataclass(frozen=True)
class TableProgress:
    """A table's backfill as the planner of this process saw it, for monitoring: ``rows`` in
    the key ranges of the ``chunks`` it planned (before a request's ``where``), the last chunk
    holding ``last_rows``; the first and the last planned at ``first`` and ``last`` (monotonic
    seconds)."""

    rows: int = 0
    chunks: int = 0
    last_rows: int = 0
    first: float = 0.0
    last: float = 0.0

    def planned(self, rows: int, now: float) -> TableProgress:
        """With one more chunk of ``rows`` planned at ``now``."""
        return TableProgress(self.rows + rows, self.chunks + 1, rows,
                             now if self.chunks == 0 else self.first, now)

    @property
    def rows_per_second(self) -> float:
        """The rate of the chunks before the last: a chunk is delivered before the next is
        planned, so they took the time from the first planning to the last (0 until then)."""
        if self.last <= self.first:
            return 0.0
        return (self.rows - self.last_rows) / (self.last - self.first)
