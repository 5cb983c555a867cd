"""What each write task reports, and the driver's running account of every destination.

Tasks return a :class:`TaskReport` (Spark's commit message). The driver's ``commit`` folds the
reports of a micro-batch into a :class:`Ledger` and appends it to the query's control topic in
Iggy (:mod:`iggy_spark.sink.control_topic`): per-destination message counts, breaker state (with its
wall-clock opening time) and last error, rejection and missing-destination counters, the
destination-creation latency histogram, and the set of admitted destinations that makes
``admission.max_destinations`` hold for the whole query. Every task of the next batch reads
the newest ledger back for the admitted set and the breakers, and :func:`iggy_spark.destinations`
and :func:`pg_to_iggy.serve_metrics` read it too. Spark may commit one batch id twice (a replay
after a crash); the ledger remembers the last batch it applied and ignores repeats, so counts
are not doubled.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from connector_common.checkpoints import local_checkpoint
from iggy_spark.sink.admission import Destination
from iggy_spark.sink.breaker import BreakerSnapshot, BreakerState, merge_snapshots

__all__ = ["LEDGER_FILE", "Ledger", "TaskReport", "ledger_path"]

log = logging.getLogger("iggy_spark")

LEDGER_FILE = "iggy_routed/destinations.json"
_VERSION = 1
CREATE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the destination-creation latency histogram kept in the ledger."""


@dataclass
class TaskReport(WriterCommitMessage):
    """Counters of one write task; every key is a plain string so it pickles small."""

    routed: Counter[str] = field(default_factory=Counter)  # "stream/topic" -> messages sent
    rejected: Counter[str] = field(default_factory=Counter)  # reason -> rows
    missing: Counter[str] = field(default_factory=Counter)  # on_missing_destination action -> rows
    dropped: int = 0
    dead_lettered: int = 0
    created: list[str] = field(default_factory=list)
    create_seconds: list[float] = field(default_factory=list)  # how long each creation took
    admitted: list[tuple[str, str]] = field(default_factory=list)
    breakers: dict[str, dict[str, Any]] = field(default_factory=dict)  # BreakerSnapshot.to_dict
    last_error: str | None = None
    resumed: int = 0  # messages of a replay found already landed, not sent again
    at_least_once: int = 0  # groups a replay could not decide on, sent again in full
    query: str | None = None  # Spark's query id: the driver's commit learns it from here
    state_lost: int = 0  # tasks that found the query's control topic gone or without a ledger


def ledger_path(checkpoint_location: str | None) -> Path | None:
    """Where versions before the control topic kept the ledger, for a checkpoint; ``None`` if
    the checkpoint is not on a local filesystem (those versions kept none there)."""
    root = local_checkpoint(checkpoint_location) if checkpoint_location else None
    return None if root is None else root / LEDGER_FILE


def _destination_key(destination: Iterable[str]) -> str:
    return "/".join(destination)


class Ledger:
    """The query's account of its destinations: JSON-ready data, folded one batch at a time."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data: dict[str, Any] = data if data is not None else {
            "version": _VERSION, "last_batch": -1, "destinations": {}, "rejected": {},
            "missing": {}, "dropped": 0, "dead_lettered": 0, "last_error": None,
        }
        self.data.setdefault("delivery", {"resumed": 0, "at_least_once": 0})
        self.data["delivery"].setdefault("state_lost", 0)
        self.data.setdefault("create_latency", {
            "buckets": [0] * len(CREATE_BUCKETS), "sum": 0.0, "count": 0})

    @classmethod
    def from_file(cls, path: Path) -> Ledger:
        """The ledger a version before the control topic kept next to a local checkpoint."""
        return cls(json.loads(path.read_text()))

    @property
    def last_batch(self) -> int:
        return int(self.data["last_batch"])

    @property
    def open_breakers(self) -> int:
        """Destinations whose breaker is open: the sink is degraded while this is above 0."""
        return sum(1 for e in self.data["destinations"].values() if e["breaker"] != "closed")

    @property
    def breakers(self) -> dict[Destination, BreakerSnapshot]:
        """Breakers that are not plainly closed, to seed the next batch's tasks with."""
        seed: dict[Destination, BreakerSnapshot] = {}
        for d in self.data["destinations"].values():
            snapshot = BreakerSnapshot.from_dict({**d, "state": d.get("breaker", "closed")})
            if snapshot.state is not BreakerState.CLOSED or snapshot.consecutive_failures:
                seed[Destination(d["stream"], d["topic"])] = snapshot
        return seed

    @property
    def admitted(self) -> frozenset[Destination]:
        return frozenset(
            Destination(d["stream"], d["topic"]) for d in self.data["destinations"].values()
            if d.get("admitted")
        )

    def apply(self, batch_id: int, reports: Iterable[TaskReport | None]) -> str | None:
        """Fold one committed batch in; returns its log line (``None``: a repeat, or idle)."""
        if batch_id <= self.data["last_batch"]:
            return None
        destinations: dict[str, dict[str, Any]] = self.data["destinations"]
        batch = TaskReport()
        breakers: dict[str, list[BreakerSnapshot]] = {}
        for report in reports:
            if report is None:
                continue
            batch.routed.update(report.routed)
            batch.rejected.update(report.rejected)
            batch.missing.update(report.missing)
            batch.dropped += report.dropped
            batch.dead_lettered += report.dead_lettered
            batch.created += report.created
            batch.create_seconds += report.create_seconds
            batch.admitted += report.admitted
            for key, snapshot in report.breakers.items():
                breakers.setdefault(key, []).append(BreakerSnapshot.from_dict(snapshot))
            batch.last_error = report.last_error or batch.last_error
            batch.resumed += report.resumed
            batch.at_least_once += report.at_least_once
            batch.state_lost += report.state_lost

        def entry(key: str) -> dict[str, Any]:
            stream, _, topic = key.partition("/")
            return destinations.setdefault(key, {
                "stream": stream, "topic": topic, "messages": 0, "admitted": False,
                "created": False, "first_batch": batch_id, "last_batch": None,
                "breaker": "closed", "consecutive_failures": 0, "last_error": None,
                "opened_at": None,
            })

        for key, count in batch.routed.items():
            e = entry(key)
            e["messages"] += count
            e["last_batch"] = batch_id
        for key in batch.created:
            entry(key)["created"] = True
        for stream, topic in batch.admitted:
            entry(_destination_key((stream, topic)))["admitted"] = True
        for key, snapshots in breakers.items():
            merged = merge_snapshots(snapshots)
            e = entry(key)
            e["breaker"] = str(merged.state)
            e["consecutive_failures"] = merged.consecutive_failures
            e["opened_at"] = merged.opened_at
            e["last_error"] = merged.last_error or e["last_error"]
        for name, counter in (("rejected", batch.rejected), ("missing", batch.missing)):
            totals = Counter(self.data[name])
            totals.update(counter)
            self.data[name] = dict(totals)
        self.data["delivery"]["resumed"] += batch.resumed
        self.data["delivery"]["at_least_once"] += batch.at_least_once
        self.data["delivery"]["state_lost"] += batch.state_lost
        self.data["dropped"] += batch.dropped
        self.data["dead_lettered"] += batch.dead_lettered
        self.data["last_error"] = batch.last_error or self.data["last_error"]
        latency = self.data["create_latency"]
        for seconds in batch.create_seconds:
            latency["sum"] += seconds
            latency["count"] += 1
            for i, bound in enumerate(CREATE_BUCKETS):
                if seconds <= bound:
                    latency["buckets"][i] += 1
        self.data["last_batch"] = batch_id
        if not (batch.routed or batch.rejected or batch.missing or batch.dropped
                or batch.state_lost):
            return None  # an idle batch: folded in, but not worth a log line
        open_breakers = self.open_breakers
        status = f"DEGRADED ({open_breakers} open breakers)" if open_breakers else "ok"
        return (
            f"iggy_routed batch {batch_id}: {sum(batch.routed.values())} messages to "
            f"{len(batch.routed)} destinations ({len(batch.created)} created), rejected "
            f"{dict(batch.rejected) or 0}, missing destination {dict(batch.missing) or 0}, "
            f"dead-lettered {batch.dead_lettered}, dropped {batch.dropped}, "
            f"found landed by a replay {batch.resumed}, sent at-least-once {batch.at_least_once}, "
            f"open breakers {open_breakers}, tasks that found the control topic lost "
            f"{batch.state_lost}; status {status}"
        )

    def rows(self) -> list[dict[str, Any]]:
        """One dict per destination, for :func:`iggy_spark.destinations`."""
        return [dict(e) for _, e in sorted(self.data["destinations"].items())]
