"""What ``pg_cdc`` reports about its slot for monitoring, and how a listener reads it back.

The reader runs in a Python worker process on the driver; a ``StreamingQueryListener`` runs in
the user's process. The only channel between them is the source's ``latestOffset`` in Spark's
progress events (``reportLatestOffset``, shown there and never stored as an offset). This type
is the contract on both ends: the reader writes it with :meth:`SourceHealth.as_progress`, a
listener (:func:`pg_to_iggy.serve_metrics`) reads it with :meth:`SourceHealth.from_progress`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SlotHealth", "SourceHealth", "TableBackfill"]


@dataclass(frozen=True)
class SlotHealth:
    """The slot as ``pg_replication_slots`` shows it."""

    slot_active: bool
    slot_lag_bytes: int
    """WAL between the server's flush position and the slot's confirmed position."""
    retained_wal_bytes: int
    """WAL the slot keeps on the server (flush position minus ``restart_lsn``)."""
    wal_status: str | None = None
    """``pg_replication_slots.wal_status``: ``reserved`` or ``extended`` (safe), ``unreserved``
    (the next checkpoint removes WAL the slot needs unless it catches up), ``lost``."""
    safe_wal_bytes: int | None = None
    """``safe_wal_size``: WAL that may still be written before the slot is lost; ``None``
    when ``max_slot_wal_keep_size`` is unlimited (-1)."""
    reread_wal_bytes: int = 0
    """WAL every read decodes again before its first change (confirmed position minus
    ``restart_lsn``): large while a long-open transaction holds the restart point back."""

    @property
    def at_risk(self) -> bool:
        """The slot is about to be lost (``unreserved``) or is lost."""
        return self.wal_status in ("unreserved", "lost")


@dataclass(frozen=True)
class TableBackfill:
    """A table's backfill since this driver process started
    (:class:`~postgres_cdc_source.backfill.progress.TableProgress`)."""

    rows: int
    """Rows in the key ranges of the chunks planned (before a request's ``where``)."""
    chunks: int
    rows_per_second: float


@dataclass(frozen=True)
class SourceHealth:
    """The slot's health (``None`` while the slot cannot be found) and the reader's own."""

    slot: SlotHealth | None
    commit_failures: int
    """Consecutive commits that could not advance the slot."""
    degraded: bool
    backfill_requests: int = 0
    """Backfill requests queued or running."""
    backfills: dict[str, TableBackfill] = field(default_factory=dict)
    """Per table (``schema.table``) backfilled since the process started."""
    skipped_requests: int = 0
    """Backfill request messages skipped since the process started: forged (no row of the
    requests table placed them) or malformed; each was logged with its LSN."""
    compiled_core: bool = False
    """Whether the driver's process decodes with the compiled core (iggy-spark-core): the
    pure-Python path is the fallback where it is not installed."""

    def as_progress(self) -> dict[str, Any]:
        """The keys merged into the reader's ``reportLatestOffset``."""
        report = {"commit_failures": self.commit_failures, "degraded": self.degraded,
                  "backfill_requests": self.backfill_requests,
                  "backfills": {t: asdict(b) for t, b in self.backfills.items()},
                  "skipped_requests": self.skipped_requests,
                  "compiled_core": self.compiled_core}
        return {**(asdict(self.slot) if self.slot is not None else {}), **report}

    @classmethod
    def from_progress(cls, latest: str | None) -> SourceHealth | None:
        """A source's ``latestOffset`` from a progress event, if ``pg_cdc`` wrote it."""
        try:
            data = json.loads(latest) if latest else None
        except ValueError:
            return None
        if not isinstance(data, dict) or "commit_failures" not in data:
            return None  # another source's offset
        slot = None
        if "slot_lag_bytes" in data:
            safe = data.get("safe_wal_bytes")
            status = data.get("wal_status")
            slot = SlotHealth(bool(data.get("slot_active")), int(data["slot_lag_bytes"]),
                              int(data.get("retained_wal_bytes", 0)),
                              str(status) if status is not None else None,
                              int(safe) if safe is not None else None,
                              int(data.get("reread_wal_bytes", 0)))
        backfills = {str(t): TableBackfill(int(b["rows"]), int(b["chunks"]),
                                           float(b["rows_per_second"]))
                     for t, b in (data.get("backfills") or {}).items()}
        return cls(slot, int(data["commit_failures"]), bool(data.get("degraded")),
                   int(data.get("backfill_requests", 0)), backfills,
                   int(data.get("skipped_requests", 0)), bool(data.get("compiled_core")))
