"""Effectively-once delivery: a replayed micro-batch sends only what did not land yet.

Iggy 0.9 does not deduplicate, so the sink does. The last message of every send carries one
user header, :data:`ORIGIN_HEADER`, naming the query that wrote it, the batch, the Spark task
(its partition id) and its sequence number within that task's (destination, partition) group:
``<query>:<batch>:<task>:<seq>``. Within a group the sink sends in order, a send goes only once
the previous one was acknowledged, and a send lands whole, so what landed of a group is a
prefix of it ending at a marked message: the highest sequence number found in the partition's
tail says how long the prefix is. (A header on every message cost 0.76x the sink's speed.)

Three cases, decided without touching Iggy in the common one:

* **A new batch** (the driver found no "started" marker for it): tasks send everything, with
  the headers. The only cost is one header per send.
* **A batch the ledger already holds** (``commit`` ran for it: every message was acknowledged,
  then the crash came before Spark wrote ``commits/N``): tasks send nothing.
* **A replay** (the marker exists: the batch was planned before, maybe sent in part; or Spark
  retries a task): each group reads its partition's tail backwards (at most
  ``delivery_scan_messages`` messages) and skips the prefix that landed.

What "effectively once" rests on: a replayed task gets the same rows in the same order (true
for ``pg_cdc``, which replays a batch from the same offsets, and for deterministic
transformations of it), and this query's messages in a partition are only ever written by this
sink. Where it cannot decide (tail longer than the scan bound, no local checkpoint, a batch id
it cannot confirm), it says so in a warning and sends the group in full: at-least-once, never
loss.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "ORIGIN_HEADER",
    "Origin",
    "BatchPlan",
    "TaskIdentity",
    "landed_in_tail",
    "plan_batch",
    "STARTED_DIR",
]

log = logging.getLogger("iggy_spark")

ORIGIN_HEADER = "iggy_spark.origin"
STARTED_DIR = "started"
"""Directory (next to the ledger) of per-batch markers written before a batch's tasks run."""


class Origin(NamedTuple):
    """Who wrote a message: query, batch id, Spark task partition, sequence in its group."""

    query: str
    batch: int
    task: int
    seq: int

    def encode(self) -> str:
        return f"{self.query}:{self.batch}:{self.task}:{self.seq}"

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
        if len(parts) != 4 or not parts[0]:
            return None
        try:
            batch, task, seq = (int(p) for p in parts[1:])
        except ValueError:
            return None
        if not all(p.isascii() and p.isdigit() for p in parts[1:]):
            return None
        return cls(parts[0], batch, task, seq)


def landed_in_tail(newest_first: Iterable[Origin | None], me: Origin) -> int | None:
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


@dataclass(frozen=True)
class BatchPlan:
    """What the driver decided for one micro-batch, handed to every task (pickled)."""

    query: str
    batch: int
    """The batch id the driver found in ``offsets/``; tasks confirm it with Spark's own."""
    last_delivered: int
    """The ledger's last batch: every message of it, and of the batches before, landed."""
    replay: bool
    """This batch was planned before (a restart replays it): look for what landed."""
    scan_limit: int


class TaskIdentity(NamedTuple):
    """What Spark tells a write task about itself."""

    partition: int
    batch: int | None
    """Spark's ``streaming.sql.batchId`` local property, if it reached the task."""
    retry: bool
    """A task attempt after the first: the earlier attempt may have sent a prefix."""


def _query_id(checkpoint: Path) -> str | None:
    """Spark's query id (stable across restarts), from ``<checkpoint>/metadata``."""
    try:
        first = (checkpoint / "metadata").read_text().splitlines()[0]
        return str(json.loads(first)["id"]).replace("-", "")[:16] or None
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return None


def _planned_batch(checkpoint: Path) -> int | None:
    """The highest batch id in ``offsets/``: Spark writes ``offsets/N`` before it builds batch
    N's writer, and a restart replays the last one from there."""
    try:
        ids = [int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return max(ids) if ids else None


def plan_batch(
    checkpoint: Path | None, ledger_dir: Path | None, last_delivered: int, scan_limit: int
) -> BatchPlan | None:
    """Driver side, when a batch's writer is built: which batch this is, and is it a replay?

    Writes the batch's "started" marker (durably) if it is not there yet; a marker already
    there means the batch was planned before. ``None`` when the checkpoint cannot tell (not on
    a local filesystem, no metadata yet): the batch is sent at-least-once, with a warning.
    """
    if checkpoint is None or ledger_dir is None:
        log.warning("iggy_routed: delivery_guarantee=effectively_once needs a checkpoint on a "
                    "local filesystem; this batch is sent at-least-once")
        return None
    query, batch = _query_id(checkpoint), _planned_batch(checkpoint)
    if query is None or batch is None:
        log.warning("iggy_routed: the checkpoint at %s has no query id or planned batch yet; "
                    "this batch is sent at-least-once", checkpoint)
        return None
    started = ledger_dir / STARTED_DIR
    started.mkdir(parents=True, exist_ok=True)
    marker = started / str(batch)
    replay = marker.exists()
    if not replay:
        with open(marker, "w") as f:
            f.flush()
            os.fsync(f.fileno())
        dir_fd = os.open(started, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    for old in started.iterdir():  # markers of committed batches are of no further use
        if old.name.isdigit() and int(old.name) < batch:
            old.unlink(missing_ok=True)
    return BatchPlan(query, batch, last_delivered, replay, scan_limit)


def task_identity() -> TaskIdentity | None:
    """This write task's partition id, Spark's batch id and whether it is a retry."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    raw = context.getLocalProperty("streaming.sql.batchId")
    batch = int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None
    return TaskIdentity(context.partitionId(), batch, context.attemptNumber() > 0)
