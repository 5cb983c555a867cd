"""Fault injection around the CDC pipeline: a killable job, its checkpoint, a slot watch.

The reliability tests and benchmarks crash the pipeline on purpose and then ask two questions
the oracle (:mod:`iggy_spark_testing.oracle`) cannot answer alone:

* *Was the replication slot ever ahead of what Spark had durably committed?* If it was, a crash
  at that moment loses changes for good. :class:`SlotWatch` samples the slot's
  ``confirmed_flush_lsn`` while the run goes and compares each sample with the end offset of
  the last batch in the checkpoint's ``commits/`` (read *after* the slot, so a batch committing
  in between can only make the check more lenient, never raise a false alarm).
* *Are the duplicates only those of batches in flight at a fault?* :func:`read_checkpoint`
  gives every batch's LSN range and when it was planned (``offsets/N`` written) and committed
  (``commits/N`` written); :func:`in_flight` picks the batches a fault hit and
  :func:`unexplained_duplicates` lists duplicated changes outside all of them. Spark keeps only
  the last 100 batches in the checkpoint, so a long run takes them from
  :meth:`SlotWatch.batches`, which remembers every batch it saw.

:class:`~iggy_spark_testing.job.PipelineJob` is the job these faults are applied to; it
uses this module's reading of the checkpoint, never the reverse.

Nothing here hooks into the connectors: faults are applied from outside (signals, stopping
servers), or by test-only data source subclasses.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector_common.lsn import format_lsn, parse_lsn
from iggy_spark_testing.workload import Workload
from postgres_cdc_source.stream.offset import StreamOffset


def prepare_capture(
    dsn: str, name: str, *, seed: int, options: Mapping[str, str] | None = None
) -> tuple[Workload, dict[str, str]]:
    """A workload on empty tables in schema ``name``, slot ``name`` created on them *before* any
    change (so the pipeline sees them all), and the ``pg_cdc`` options that route each table to
    its own topic in stream ``name``, partitioned by row (``id``), plus ``options`` (which the
    slot is created with too, e.g. ``failover``)."""
    from postgres_cdc_source.options import CdcOptions
    from postgres_cdc_source.replication.lifecycle import ensure_slot

    work = Workload(dsn, name, seed=seed)
    work.setup()
    source = {
        "include_tables": f"{name}\\..*",
        "topic_from": "table",
        "partition_key_from": "id",
        "default_stream": name,
        **(options or {}),
    }
    ensure_slot(CdcOptions.from_options({"dsn": dsn, "slot": name, **source}))
    return work, source

__all__ = [
    "Batch",
    "SlotSample",
    "SlotWatch",
    "committed_end",
    "flush_lsn",
    "in_flight",
    "last_offset_in_snapshot",
    "offsets_end",
    "prepare_capture",
    "read_checkpoint",
    "slot_exists",
    "snapshot_finished",
    "unexplained_duplicates",
    "wait_until",
]


# -- the checkpoint -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One micro-batch as Spark's checkpoint records it; times are ``time.time()`` seconds."""

    id: int
    start: int | None
    """End of the previous batch (``None`` for the first one: its start is not recorded)."""
    end: int
    planned_at: float
    committed_at: float | None

    def holds(self, commit_lsn: int) -> bool:
        return (self.start or 0) < commit_lsn <= self.end


def _numbered(directory: Path) -> dict[int, Path]:
    """Spark's log files are named by batch id; skip ``.crc`` and temporary files."""
    if not directory.is_dir():
        return {}
    return {int(p.name): p for p in directory.iterdir() if p.name.isdigit()}


def read_checkpoint(checkpoint: str | os.PathLike[str]) -> list[Batch]:
    """Every batch in ``offsets/``, with its commit time from ``commits/`` when it has one.

    Spark writes both logs atomically (temporary file, then rename), so a file is either
    absent or whole: this is safe to call while the query runs.
    """
    root = Path(checkpoint)
    commits = _numbered(root / "commits")
    batches: list[Batch] = []
    previous: int | None = None
    for batch_id, path in sorted(_numbered(root / "offsets").items()):
        try:
            text = path.read_text()
            planned_at = path.stat().st_mtime
            committed = commits.get(batch_id)
            committed_at = committed.stat().st_mtime if committed is not None else None
        except FileNotFoundError:  # purged by Spark's log cleanup while we looked
            continue
        end = offsets_end(text)
        batches.append(Batch(batch_id, previous, end, planned_at, committed_at))
        previous = end
    return batches


def offsets_end(text: str) -> int:
    """The ``pg_cdc`` end LSN in the text of a checkpoint's ``offsets/`` file (v1 format: the
    version line, the batch metadata, then one offset line per source)."""
    return StreamOffset.from_json(json.loads(text.splitlines()[2])).lsn


def committed_end(checkpoint: str | os.PathLike[str]) -> int | None:
    """End LSN of the last batch in ``commits/``: how far the slot may safely have moved."""
    committed = [b for b in read_checkpoint(checkpoint) if b.committed_at is not None]
    return committed[-1].end if committed else None


def snapshot_finished(checkpoint: str | os.PathLike[str]) -> bool:
    """Whether a committed batch of a ``snapshot=initial`` query ends with the snapshot done (an
    offset without ``"snapshot"``)."""
    root = Path(checkpoint)
    committed = {b.id for b in read_checkpoint(root) if b.committed_at is not None}
    return any('"snapshot"' not in (root / "offsets" / str(i)).read_text() for i in committed)


def last_offset_in_snapshot(checkpoint: str | os.PathLike[str]) -> bool:
    """Whether the last planned batch (committed or not) still reads the snapshot."""
    root = Path(checkpoint)
    batches = read_checkpoint(root)
    return bool(batches) and '"snapshot"' in (root / "offsets" / str(batches[-1].id)).read_text()


def slot_exists(dsn: str, slot: str) -> bool:
    import psycopg

    with psycopg.connect(dsn) as conn:
        query = "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s"
        return conn.execute(query, (slot,)).fetchone() is not None


def in_flight(
    batches: Iterable[Batch], faults: Iterable[float | tuple[float, float]]
) -> list[Batch]:
    """The batches planned but not committed at a fault instant, or during a fault window."""
    hit = []
    for batch in batches:
        done = batch.committed_at if batch.committed_at is not None else float("inf")
        for fault in faults:
            begin, end = fault if isinstance(fault, tuple) else (fault, fault)
            if batch.planned_at <= end and done >= begin:
                hit.append(batch)
                break
    return hit


def unexplained_duplicates(
    duplicated_commits: Sequence[int], suspects: Sequence[Batch], commits: Sequence[int]
) -> list[int]:
    """Commit LSNs of duplicated changes that no suspect batch can have written twice.

    A batch ``(start, end]`` holds the transactions whose commit record *starts* in it; the
    record may end past ``end``, so the first commit after ``end`` (in the sorted ``commits``
    delivered) counts as part of the batch too.
    """
    ordered = sorted(commits)
    stretched = []
    for batch in suspects:
        i = bisect.bisect_right(ordered, batch.end)
        stretched.append((batch.start or 0, ordered[i] if i < len(ordered) else batch.end))
    return [
        lsn for lsn in duplicated_commits
        if not any(start < lsn <= end for start, end in stretched)
    ]


# -- the slot -------------------------------------------------------------------------------------


def flush_lsn(dsn: str) -> int:
    """The server's WAL flush position now: a pipeline is caught up once it committed past it."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


@dataclass(frozen=True)
class SlotSample:
    """The slot, the server and the checkpoint at one moment (``None``: could not be read)."""

    at: float
    confirmed_flush: int | None
    restart_lsn: int | None
    wal_lsn: int | None
    committed_end: int | None
    connections: int | None

    @property
    def retained_wal(self) -> int | None:
        """WAL bytes the slot keeps from being recycled."""
        if self.wal_lsn is None or self.restart_lsn is None:
            return None
        return self.wal_lsn - self.restart_lsn


class SlotWatch:
    """Samples a slot against a checkpoint on a thread; rides out server restarts.

    Use as a context manager; :attr:`violations` lists the samples where the slot was ahead of
    the last committed batch (or, before the first commit, of where the slot started).
    """

    def __init__(
        self, dsn: str, slot: str, checkpoint: str | os.PathLike[str], *, interval: float = 0.25
    ) -> None:
        self.dsn = dsn
        self.slot = slot
        self.checkpoint = checkpoint
        self.interval = interval
        self.samples: list[SlotSample] = []
        self.initial: int | None = None
        self._batches: dict[int, Batch] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"slot-watch-{slot}", daemon=True)

    def __enter__(self) -> SlotWatch:
        self.initial = self.sample().confirmed_flush
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def batches(self) -> list[Batch]:
        """Every batch seen in the checkpoint during the watch, including those Spark has since
        purged from it (it keeps the last 100): what :func:`in_flight` should be given."""
        self._record(read_checkpoint(self.checkpoint))
        return [self._batches[i] for i in sorted(self._batches)]

    def _record(self, batches: list[Batch]) -> int | None:
        """Merge a checkpoint reading into the history; the end of the last committed batch."""
        for batch in batches:
            known = self._batches.get(batch.id)
            if known is None or (known.committed_at is None and batch.committed_at is not None):
                start = batch.start if batch.start is not None or known is None else known.start
                self._batches[batch.id] = Batch(batch.id, start, batch.end, batch.planned_at,
                                                batch.committed_at)
        committed = [b for b in batches if b.committed_at is not None]
        return committed[-1].end if committed else None

    @property
    def violations(self) -> list[SlotSample]:
        bad = []
        for s in self.samples:
            allowed = s.committed_end if s.committed_end is not None else self.initial
            slot = s.confirmed_flush
            if slot is not None and allowed is not None and slot > allowed:
                bad.append(s)
        return bad

    def describe(self, sample: SlotSample) -> str:
        def show(lsn: int | None) -> str:
            return "?" if lsn is None else format_lsn(lsn)

        return (f"slot {self.slot} at {show(sample.confirmed_flush)} while the last committed "
                f"batch ends at {show(sample.committed_end)}")

    def _run(self) -> None:
        conn = None
        while not self._stop.wait(self.interval):
            conn, sample = self._sample_on(conn)
            self.samples.append(sample)
        if conn is not None:
            conn.close()

    def sample(self) -> SlotSample:
        """One sample now, on a connection of its own (also after :meth:`stop`)."""
        conn, sample = self._sample_on(None)
        if conn is not None:
            conn.close()
        return sample

    def _sample_on(self, conn: Any) -> tuple[Any, SlotSample]:
        import psycopg

        now = time.time()
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=2,
                                       application_name="slot_watch")
            row = conn.execute(
                "SELECT confirmed_flush_lsn::text, restart_lsn::text, pg_current_wal_lsn()::text,"
                " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
                " FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            ).fetchone()
        except psycopg.OperationalError:  # the server is restarting: note the gap, go on
            if conn is not None:
                conn.close()
            return None, SlotSample(
                now, None, None, None, self._record(read_checkpoint(self.checkpoint)), None
            )
        confirmed, restart, wal, connections = row if row else (None, None, None, None)
        return conn, SlotSample(
            now,
            parse_lsn(confirmed) if confirmed else None,
            parse_lsn(restart) if restart else None,
            parse_lsn(wal) if wal else None,
            self._record(read_checkpoint(self.checkpoint)),  # after the slot: see the docstring
            int(connections) if connections is not None else None,
        )


# -- waiting -------------------------------------------------------------------------------------


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, *, every: float = 0.2,
    alive: Callable[[], bool] | None = None,
) -> float:
    """Poll ``condition`` until it holds (returns the seconds waited) or ``timeout`` passes.

    For what cannot signal completion, like a job in another process. ``alive`` is checked too,
    so a dead job fails the wait at once instead of at the timeout.
    """
    started = time.monotonic()
    while not condition():
        if alive is not None and not alive():
            raise RuntimeError(f"gave up waiting for {what}: the job is not running")
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:g}s")
        time.sleep(every)
    return time.monotonic() - started
