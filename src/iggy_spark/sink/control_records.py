"""The records of a query's control topic, and what a reader concludes from them (no I/O).

The sink keeps its query state in Iggy (:class:`~iggy_spark.sink.control_topic.ControlTopic`
reads and appends): one topic per query with one partition, so the partition's order is the
one total order every task and the driver agree on. Three kinds of record, small JSON objects:

* ``ledger``: the whole :class:`~iggy_spark.sink.report.Ledger` after batch ``batch``, appended by
  the driver's ``commit``. The newest one by batch is the query's state; anything older than
  it is never needed again.
* ``start``: a write task of ``batch`` (Spark partition ``task``) is about to send. A ``start``
  for the same (batch, task) already there means an earlier attempt may have sent a prefix.
* ``claim``: a task asks to send the probe of a half-open breaker. The first claim of a
  (run, batch, destination) in partition order wins: an append is the atomic
  create-if-absent the probe needs, which no object store offers.
* ``admit``: a task asks to count a destination against ``admission.max_destinations``. The
  ledger's admitted destinations come first, then each destination of an ``admit`` after the
  ledger in partition order; a destination is admitted if its place is within the cap, so tasks
  running at the same time never admit more than the cap between them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "EVERY_TASK",
    "Admit",
    "Claim",
    "LedgerRecord",
    "Record",
    "Start",
    "StateView",
    "decode",
    "encode",
    "fold",
]

EVERY_TASK = -1
"""A ``start``'s task when any task of the batch may have sent (a migrated "started" marker)."""


@dataclass(frozen=True)
class Start:
    """A write task of ``batch`` (Spark partition ``task``, attempt ``attempt``) starts sending."""

    batch: int
    task: int
    attempt: int


@dataclass(frozen=True)
class Claim:
    """A task of ``run`` asks for the probe of ``destination`` (``stream/topic``) in ``batch``;
    ``nonce`` tells the claimant apart from every other (retries and replays included)."""

    run: str
    batch: int
    destination: str
    nonce: str


@dataclass(frozen=True)
class Admit:
    """A task asks to count ``destination`` (``stream/topic``) against the query's cap."""

    destination: str


@dataclass(frozen=True)
class LedgerRecord:
    """The ledger's JSON data after batch ``data["last_batch"]``."""

    data: dict[str, Any]

    @property
    def batch(self) -> int:
        return int(self.data["last_batch"])


Record = Start | Claim | Admit | LedgerRecord


def encode(record: Record) -> bytes:
    """The record as the payload of one control message."""
    if isinstance(record, Start):
        return orjson.dumps({"k": "start", "batch": record.batch, "task": record.task,
                             "attempt": record.attempt})
    if isinstance(record, Claim):
        return orjson.dumps({"k": "claim", "run": record.run, "batch": record.batch,
                             "destination": record.destination, "nonce": record.nonce})
    if isinstance(record, Admit):
        return orjson.dumps({"k": "admit", "destination": record.destination})
    return orjson.dumps({"k": "ledger", "data": record.data})


def decode(payload: bytes) -> Record | None:
    """The record a payload holds; ``None`` for anything else (a message some other writer put
    in the topic, a kind a newer version writes): readers skip it."""
    try:
        raw = orjson.loads(payload)
        kind = raw["k"]
        if kind == "start":
            return Start(int(raw["batch"]), int(raw["task"]), int(raw["attempt"]))
        if kind == "claim":
            return Claim(str(raw["run"]), int(raw["batch"]), str(raw["destination"]),
                         str(raw["nonce"]))
        if kind == "admit":
            return Admit(str(raw["destination"]))
        if kind == "ledger" and isinstance(raw["data"], dict):
            int(raw["data"]["last_batch"])
            return LedgerRecord(raw["data"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        pass
    return None


@dataclass
class StateView:
    """What the records read so far say; fed oldest first by :func:`fold`."""

    ledger: dict[str, Any] | None = None
    """The newest ledger by batch (the last one appended on a tie: a retried append, or an
    operator's correction); ``None``: none read."""
    ledger_offset: int | None = None
    starts: set[tuple[int, int]] = field(default_factory=set)
    """(batch, task) of every ``start`` read."""
    claims: dict[tuple[str, int, str], str] = field(default_factory=dict)
    """(run, batch, destination) -> the nonce of its first claim."""
    admits: dict[str, None] = field(default_factory=dict)
    """Destinations of the ``admit`` records after the newest ledger, first one first."""
    end: int = 0
    """The offset after the last record read: where the next read goes on."""

    @property
    def last_batch(self) -> int:
        """The last batch the ledger holds (every message of it landed); -1: none."""
        return -1 if self.ledger is None else int(self.ledger["last_batch"])

    def add(self, offset: int, record: Record | None) -> None:
        self.end = max(self.end, offset + 1)
        if isinstance(record, LedgerRecord):
            if self.ledger is None or record.batch >= self.last_batch:
                # admits before it belong to a batch it holds, or to an attempt that failed
                self.ledger, self.ledger_offset, self.admits = record.data, offset, {}
        elif isinstance(record, Start):
            self.starts.add((record.batch, record.task))
        elif isinstance(record, Claim):
            self.claims.setdefault((record.run, record.batch, record.destination), record.nonce)
        elif isinstance(record, Admit):
            self.admits.setdefault(record.destination)

    def started(self, batch: int, task: int) -> bool:
        """Whether an earlier attempt of this task of ``batch`` appended its ``start`` (or a
        migrated marker says every task of the batch may have)."""
        return (batch, task) in self.starts or (batch, EVERY_TASK) in self.starts

    def admitted_within(self, destination: str, seeded: frozenset[str], cap: int) -> bool:
        """Whether ``destination`` has a place within ``cap``: the ``seeded`` destinations
        (the ledger's) first, then those of the ``admit`` records in partition order."""
        if destination in seeded:
            return True
        place = len(seeded)
        for admitted in self.admits:
            if admitted in seeded:
                continue
            if admitted == destination:
                return place < cap
            place += 1
        return False

    def won(self, claim: Claim) -> bool:
        """Whether ``claim`` is the first of its (run, batch, destination)."""
        return self.claims.get((claim.run, claim.batch, claim.destination)) == claim.nonce


def fold(records: Iterable[tuple[int, Record | None]], into: StateView | None = None) -> StateView:
    """Fold ``(offset, record)`` pairs, oldest first, into a view (a new one by default)."""
    view = StateView() if into is None else into
    for offset, record in records:
        view.add(offset, record)
    return view
