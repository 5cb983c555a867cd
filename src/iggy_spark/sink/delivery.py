"""Effectively-once delivery: a replayed micro-batch sends only what did not land yet.

Iggy 0.9 does not deduplicate, so the sink does. The last message of every send carries one
user header, :data:`ORIGIN_HEADER`, naming the query that wrote it, the batch, the Spark task
(its partition id), its sequence number within that task's (destination, partition) group and
how many of the group's messages the send held: ``<query>:<batch>:<task>:<seq>:<run>``. Within
a group the sink sends in order, a send goes only once the previous one was acknowledged, and a
send lands whole and contiguous, so the ``run`` messages ending at a marked message are that
send's. (A header on every message would make the SDK convert every message's headers.)

Three cases, decided by each task from the query's control topic
(:mod:`iggy_spark.sink.control_topic`), whatever filesystem the checkpoint is on:

* **A new batch** (no ``start`` record of this batch and task yet): the task sends everything,
  with the headers. The only cost is one header per send.
* **A batch the ledger already holds** (``commit`` ran for it: every message was acknowledged,
  then the crash came before Spark wrote ``commits/N``): tasks send nothing.
* **A replay** (a ``start`` record is there: the batch was started before, maybe sent in part;
  Spark retries a task; or the control topic was lost): each group reads back what it landed
  before (:class:`TailScan`) and skips it.

What a replay skips is decided by what each message *is* when rows carry a message id (the
``id_column``; ``pg_cdc`` gives every change and snapshot row a stable one): a row is skipped
only if a message with its id landed from the same group before (counted, so a group holding an
id twice skips it at most twice). A replay need not give the same rows in the same order: a
snapshot chunk or a polled range read again after a crash sees the table as it is then (rows
deleted, inserted, updated in the range), and every row that did not land is sent. Without an
id column the skip is by count (the first ``n`` rows of the group), which is right only when a
replayed task gets the same rows in the same order (deterministic sources and transformations).

This query's messages in a partition are only ever written by this sink. Where it cannot decide
(tail longer than the scan bound, a task that cannot read Spark's query and batch ids), it says so
in a warning and sends what it cannot prove landed again: at-least-once, never loss.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "ORIGIN_HEADER",
    "Landed",
    "Origin",
    "TailScan",
    "TaskIdentity",
    "landed_count",
    "query_key",
]

log = logging.getLogger("iggy_spark")

ORIGIN_HEADER = "iggy_spark.origin"


def query_key(query_id: str) -> str:
    """The query's name in origin headers: 16 hex digits of its id (as they were always)."""
    return query_id.replace("-", "")[:16]


class Origin(NamedTuple):
    """Who wrote a message: query, batch id, Spark task partition, sequence in its group, and
    how many of the group's messages the send it ends held (0: not said, a header written
    before the sink said it)."""

    query: str
    batch: int
    task: int
    seq: int
    run: int = 1

    def encode(self) -> str:
        return f"{self.query}:{self.batch}:{self.task}:{self.seq}:{self.run}"

    @classmethod
    def decode(cls, value: object) -> Origin | None:
        """The origin a header value names, or ``None`` for anything else (another writer's
        header of the same name, a mangled value): such a message is simply not ours."""
        if isinstance(value, bytes):
            try:
                value = value.decode()
            except UnicodeDecodeError:
                return None
        if not isinstance(value, str):
            return None
        parts = value.split(":")
        if len(parts) not in (4, 5) or not parts[0]:
            return None
        if not all(p.isascii() and p.isdigit() for p in parts[1:]):
            return None
        batch, task, seq, *run = (int(p) for p in parts[1:])
        if run and not 1 <= run[0] <= seq + 1:
            return None
        return cls(parts[0], batch, task, seq, run[0] if run else 0)


def landed_count(newest_first: Iterable[Origin | None], me: Origin) -> int | None:
    """How many messages of ``me``'s group (same query, batch, task) already landed.

    ``newest_first`` is a partition's tail from its last message backwards (``None`` for a
    message without our header). ``me.seq`` is ignored. Returns ``seq + 1`` of the newest
    message of the group, ``0`` once a message this query wrote in an earlier batch shows
    that nothing of the group can be older, or ``None`` if the tail ended undecided (the
    caller knows whether that was the partition's start, meaning 0, or the scan bound).
    """
    for origin in newest_first:
        if origin is None or origin.query != me.query:
            continue  # another writer's message
        if origin.batch == me.batch:
            if origin.task == me.task:
                return origin.seq + 1
            continue  # another task of the same batch, interleaved
        if origin.batch < me.batch:
            return 0
        # A later batch of this query before ours: the checkpoint went back in time (restored
        # from a backup). Nothing here can be trusted.
        return None
    return None


@dataclass
class Landed:
    """What one group landed before, as read back from its partitions' tails."""

    count: int = 0
    """``seq + 1`` of the group's newest message found: where its numbering goes on."""
    ids: Counter[int] = field(default_factory=Counter)
    """The ids of the group's messages found, with how often each landed."""
    covered: set[int] = field(default_factory=set)
    """The sequence numbers of the group's messages found."""
    trusted: bool = True
    """``False``: a later batch of this query sits before this one (a checkpoint restored from
    a backup); nothing found can be relied on."""

    @property
    def complete(self) -> bool:
        """Every message of the group that landed was found (so every id is known)."""
        return self.trusted and len(self.covered) >= self.count

    def take(self, message_id: int) -> bool:
        """Whether a row with ``message_id`` landed and is not yet matched to an earlier row
        of the replay; matches it if so. Rows without an id (0) never match."""
        if not message_id or self.ids[message_id] <= 0:
            return False
        self.ids[message_id] -= 1
        return True


class TailScan:
    """Reads one partition's tail into a :class:`Landed`: the group's messages found there,
    each run attributed whole to the mark that ends it.

    Fed ``(origin, message id)`` pairs from the partition's last message backwards, a page at
    a time. A message inside a run is the group's whatever its headers say (a send lands
    contiguous). A mark from before runs were written down (``run`` 0) vouches for itself
    only; what it cannot vouch for is sent again.
    """

    def __init__(self, me: Origin, into: Landed) -> None:
        self.me = me
        self.into = into
        self.left = 0  # messages of the current run still to attribute, older than its mark
        self.seq = 0  # the sequence number of the next message attributed

    def feed(self, newest_first: Iterable[tuple[Origin | None, int]]) -> bool:
        """Whether the tail is read to its end for this group: a message this query wrote in
        an earlier batch (nothing of the group can be older), the run holding the group's
        first message, or an untrusted tail. ``False``: read on (or stop at the partition's
        start, or the scan bound)."""
        me, into = self.me, self.into
        for origin, message_id in newest_first:
            if self.left:
                into.ids[message_id] += 1
                into.covered.add(self.seq)
                self.left, self.seq = self.left - 1, self.seq - 1
                if not self.left and self.seq < 0:
                    return True  # the group's first message: nothing of it is older
                continue
            if origin is None or origin.query != me.query:
                continue  # another writer's message
            if origin.batch > me.batch:
                into.trusted = False  # the checkpoint went back in time: trust nothing here
                return True
            if origin.batch < me.batch:
                return True
            if origin.task != me.task:
                continue  # another task of the same batch, interleaved
            into.count = max(into.count, origin.seq + 1)
            into.ids[message_id] += 1
            into.covered.add(origin.seq)
            self.left, self.seq = max(origin.run, 1) - 1, origin.seq - 1
            if not self.left and self.seq < 0 and origin.run:
                return True
        return False


class TaskIdentity(NamedTuple):
    """What Spark tells a write task about itself (its local properties, pyspark 4.3)."""

    partition: int
    batch: int | None
    """Spark's ``streaming.sql.batchId`` local property, if it reached the task."""
    attempt: int
    """The task's attempt number: after the first, an earlier one may have sent a prefix."""
    query: str | None
    """``sql.streaming.queryId``: the query's id, stable across restarts."""
    run: str | None
    """``spark.jobGroup.id``: the query's run id (a restart gets a new one)."""

    @property
    def retry(self) -> bool:
        return self.attempt > 0


def task_identity() -> TaskIdentity | None:
    """This write task's partition id, attempt, Spark's batch, query and run ids."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    raw = context.getLocalProperty("streaming.sql.batchId")
    batch = int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None
    return TaskIdentity(context.partitionId(), batch, context.attemptNumber(),
                        context.getLocalProperty("sql.streaming.queryId") or None,
                        context.getLocalProperty("spark.jobGroup.id") or None)
