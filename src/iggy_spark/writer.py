"""The ``iggy_routed`` streaming writer: Spark's contract, the per-batch delivery plan, reports.

Each write task routes and admits its rows (:mod:`iggy_spark.task`) and sends them from its
outbox (:mod:`iggy_spark.outbox`); this module is what Spark calls. Contract with Spark
(pyspark 4.3): a writer is built on the driver per micro-batch and pickled to its tasks;
:meth:`IggyRoutedStreamWriter.write` runs once per task on an executor and returns a
:class:`~iggy_spark.report.TaskReport`; :meth:`commit` runs on the driver side after every task
succeeded, :meth:`abort` after one failed.

Delivery: a task returns only after every message it accepted was acknowledged by Iggy, or
was parked as ``on_admission_failure`` says. Fault isolation: a send that one destination
refuses is retried with backoff while the other destinations proceed; every failure counts
against that destination's circuit breaker, and once it opens the destination's remaining
rows follow ``on_admission_failure`` (``dlq``/``drop`` let the batch commit, ``error`` fails
it). A lost connection (every destination at once) or a refused login never counts: it fails
the task, Spark does not commit the batch and the source does not move past it, so the batch
is replayed. With ``delivery_guarantee=effectively_once`` (the default) the replay sends only
what did not land the first time (:mod:`iggy_spark.delivery`); with ``at_least_once`` it sends
everything again, and stable ids let consumers drop the duplicates.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from iggy_spark import delivery, sending
from iggy_spark.admission import Destination
from iggy_spark.breaker import BreakerBoard, BreakerSnapshot, Claim, Clock
from iggy_spark.connection import IggyConnection
from iggy_spark.delivery import BatchPlan, Origin
from iggy_spark.logs import log, log_batch, warn
from iggy_spark.options import RoutedOptions
from iggy_spark.report import Ledger, TaskReport
from iggy_spark.task import RoutingTask, known_topics

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["IggyRoutedStreamWriter", "prewarm_once"]


_prewarmed: set[tuple[Any, ...]] = set()
_prewarm_lock = threading.Lock()


def prewarm_once(options: RoutedOptions) -> None:
    """Create or look up the allowlist's literal destinations once per query (driver side).

    Spark builds the writer for every micro-batch in one long-lived driver-side process, so
    the first call does the work and later ones return at once. Bounded by
    ``prewarm_deadline``; failures are logged, never raised: the first batch will try again
    (and count failures against the breakers) when rows need those destinations.
    """
    destinations = options.prewarm
    key = (options.url, destinations, options.create_destinations)
    with _prewarm_lock:
        if not destinations or key in _prewarmed:
            return
        _prewarmed.add(key)
    conn = IggyConnection.shared(options.url)
    started = time.monotonic()
    outcome = conn.run(sending.prewarm(
        conn, destinations, create=options.create_destinations,
        defaults=options.topic_defaults, deadline=options.prewarm_deadline))
    ready = {d: r for d, r in outcome.items() if isinstance(r, sending.Topic)}
    known_topics(options.url, ready)
    for destination, result in outcome.items():
        if not isinstance(result, sending.Topic):
            log.warning("iggy_routed prewarm: %s not ready: %s", destination, result)
    log_batch(f"iggy_routed prewarm: {len(ready)} of {len(destinations)} allowlisted destinations "
              f"ready in {time.monotonic() - started:.2f}s")


def _probe_claims(directory: Path | None) -> Claim | None:
    """The claim that lets exactly one task of a batch send a destination's probe.

    The first task to create the destination's file in the batch's own ``directory`` wins
    (``O_EXCL`` is atomic). File names are hashes: a stream may be called ``..``. Without a
    local ledger there is nowhere to arbitrate, and every task may probe.
    """
    if directory is None:
        return None

    def claim(destination: Destination) -> bool:
        directory.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(str(destination).encode()).hexdigest()[:32]
        try:
            os.close(os.open(directory / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        return True

    return claim


class IggyRoutedStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch's rows to the Iggy destinations they name."""

    def __init__(
        self,
        options: RoutedOptions,
        admitted: frozenset[Destination],
        ledger: Path | None,
        breakers: Mapping[Destination, BreakerSnapshot] | None = None,
        clock: Clock = time.time,
        plan: BatchPlan | None = None,
    ) -> None:
        self.options = options
        self.admitted = admitted
        self.ledger = ledger
        self.breakers = dict(breakers or {})
        self.clock = clock  # wall clock: breaker opening times travel between processes
        self.probes = None if ledger is None else ledger.parent / "probes" / uuid.uuid4().hex
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        origin: Origin | None = None
        scan = False
        if self.plan is not None:
            start = _task_start(self.plan)
            if start is None:
                return TaskReport()  # the ledger holds the whole batch: it all landed
            origin, scan = start
        board = BreakerBoard(self.options.breaker, self.clock, self.breakers,
                             _probe_claims(self.probes))
        task = RoutingTask(self.options, self.admitted, board, origin, scan)
        for batch in iterator:
            task.route(batch)
        return task.finish()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task of ``batchId`` succeeded: fold their reports into the ledger, log a line."""
        if self.plan is not None and self.plan.batch != batchId:
            warn(f"iggy_routed: the writer was planned for batch {self.plan.batch} but Spark "
                 f"commits batch {batchId}; tasks used Spark's id")
        line = Ledger(self.ledger).apply(
            batchId, [m for m in messages if isinstance(m, TaskReport)]
        )
        self._forget_probes()
        if line is not None:
            log_batch(line)

    def _forget_probes(self) -> None:
        if self.probes is not None:
            shutil.rmtree(self.probes, ignore_errors=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._forget_probes()
        log_batch(f"iggy_routed batch {batchId} failed; Spark will not commit it and the "
                  "source will replay it")


class _TaskStart(NamedTuple):
    origin: Origin | None
    scan: bool  # look for what an earlier attempt landed


def _task_start(plan: BatchPlan) -> _TaskStart | None:
    """This task's origin and whether it must look for what landed; ``None`` when the ledger
    holds the whole batch (every message of it landed): send nothing.

    Spark's own batch id (the ``streaming.sql.batchId`` local property every task of the batch
    gets) is the one trusted: a wrong id could make a task skip what it never sent. Without it
    the task falls back to at-least-once (no origin), with a warning.
    """
    identity = delivery.task_identity()
    if identity is None or identity.batch is None:
        warn("iggy_routed: the write task cannot read Spark's batch id; sending at-least-once")
        return _TaskStart(None, False)
    batch, scan = identity.batch, plan.replay or identity.retry
    if batch != plan.batch:
        warn(f"iggy_routed: task {identity.partition}: the driver planned batch {plan.batch}, "
             f"Spark runs {batch}; reading partition tails to find what landed")
        scan = True
    if batch <= plan.last_delivered:
        log_batch(f"iggy_routed batch {batch}, task {identity.partition}: already delivered "
                  "(the ledger holds it); sending nothing")
        return None
    return _TaskStart(Origin(plan.query, batch, identity.partition, 0), scan)
