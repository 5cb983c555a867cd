"""The ``iggy_routed`` streaming writer: Spark's contract, the per-batch delivery plan, reports.

Each write task routes and admits its rows (:mod:`iggy_spark.sink.task`) and sends them from its
outbox (:mod:`iggy_spark.sink.outbox`); this module is what Spark calls. Contract with Spark
(pyspark 4.0+): a writer is built on the driver per micro-batch and pickled to its tasks;
:meth:`IggyRoutedStreamWriter.write` runs once per task on an executor and returns a
:class:`~iggy_spark.sink.report.TaskReport`; :meth:`commit` runs on the driver side after every task
succeeded, :meth:`abort` after one failed.

Delivery: a task returns only after every message it accepted was acknowledged by Iggy, or
was parked as ``on_admission_failure`` says. Fault isolation: a send that one destination
refuses is retried with backoff while the other destinations proceed; every failure counts
against that destination's circuit breaker, and once it opens the destination's remaining
rows follow ``on_admission_failure`` (``dlq``/``drop`` let the batch commit, ``error`` fails
it). A lost connection (every destination at once) or a refused login never counts: it fails
the task, Spark does not commit the batch and the source does not move past it, so the batch
is replayed. With ``delivery_guarantee=effectively_once`` (the default) the replay sends only
what did not land the first time (:mod:`iggy_spark.sink.delivery`); with ``at_least_once`` it sends
everything again, and stable ids let consumers drop the duplicates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from pyspark.sql.datasource import WriterCommitMessage

from connector_common.spark_versions import ArrowStreamWriter, arrow_batches
from iggy_spark.connection import IggyConnection
from iggy_spark.sink import delivery, sending
from iggy_spark.sink.admission import Destination
from iggy_spark.sink.breaker import BreakerBoard, Claim, Clock
from iggy_spark.sink.control_records import LedgerRecord, Start, StateView
from iggy_spark.sink.control_topic import ControlTopic
from iggy_spark.sink.delivery import Origin
from iggy_spark.sink.logs import log, log_batch, warn
from iggy_spark.sink.options import DeliveryGuarantee, RoutedOptions
from iggy_spark.sink.report import Ledger, TaskReport
from iggy_spark.sink.task import RoutingTask

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Row
    from pyspark.sql.types import StructType

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
    for destination, result in outcome.items():
        if not isinstance(result, sending.Topic):
            log.warning("iggy_routed prewarm: %s not ready: %s", destination, result)
    log_batch(f"iggy_routed prewarm: {len(ready)} of {len(destinations)} allowlisted destinations "
              f"ready in {time.monotonic() - started:.2f}s")


class IggyRoutedStreamWriter(ArrowStreamWriter):
    """Writes each micro-batch's rows to the Iggy destinations they name.

    Small and picklable: options and the input's schema only (pyspark 4.0 hands a stream writer
    Rows, turned back into Arrow batches with it; 4.1+ hands Arrow batches). Each task finds its
    query, batch and state itself (Spark's local properties, the control topic), so neither the
    checkpoint location nor a driver-side plan has to reach it.
    """

    def __init__(
        self,
        options: RoutedOptions,
        schema: StructType | None = None,
        clock: Clock = time.time,
        identify: Callable[[], delivery.TaskIdentity | None] = delivery.task_identity,
    ) -> None:
        self.options = options
        self.schema = schema
        self.clock = clock  # wall clock: breaker opening times travel between processes
        self.identify = identify  # Spark's TaskContext; tests that play Spark pass their own

    def write(self, iterator: Iterator[pa.RecordBatch | Row]) -> TaskReport:
        identity = self.identify()
        if identity is None or identity.query is None or identity.batch is None:
            warn("iggy_routed: the write task cannot read Spark's query and batch ids; sending "
                 "at-least-once, without the query's admitted destinations and breakers")
            board = BreakerBoard(self.options.breaker, self.clock)
            task = RoutingTask(self.options, frozenset(), board)
        else:
            start = _task_start(self.options, identity)
            if start is None:
                return TaskReport(query=identity.query)  # the ledger holds the whole batch
            board = BreakerBoard(self.options.breaker, self.clock, start.ledger.breakers,
                                 start.claim)
            task = RoutingTask(self.options, start.ledger.admitted, board, start.origin,
                               start.scan, start.admit)
            task.report.query, task.report.state_lost = identity.query, int(start.lost)
        for batch in arrow_batches(iterator, self.schema):
            task.route(batch)
        return task.finish()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task of ``batchId`` succeeded: fold their reports into the ledger and append
        it to the control topic (once: a batch id Spark commits again is not appended again),
        log a line."""
        reports = [m for m in messages if isinstance(m, TaskReport)]
        query = next((r.query for r in reports if r.query), None)
        if query is None:
            log_batch(f"iggy_routed batch {batchId}: no task knew the query id; the ledger "
                      "is not updated")
            return
        options = self.options
        control = ControlTopic.of_query(IggyConnection.shared(options.url), options.state_stream,
                                        query, timeout=options.send_timeout)
        view = control.read()
        if view is None:
            control.create()
        ledger = Ledger(None if view is None else view.ledger)
        line = ledger.apply(batchId, reports)
        if ledger.last_batch == batchId:  # not a repeat: the ledger moved
            control.append(LedgerRecord(ledger.data))
        if line is not None:
            log_batch(line)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log_batch(f"iggy_routed batch {batchId} failed; Spark will not commit it and the "
                  "source will replay it")


class _TaskStart(NamedTuple):
    ledger: Ledger
    origin: Origin | None  # effectively_once: this task's origin header
    scan: bool  # look for what an earlier attempt landed
    claim: Claim
    admit: Claim  # whether a new destination has a place within the query's cap
    lost: bool  # the control topic was gone, or held no ledger, in a batch after the first


def _task_start(options: RoutedOptions, identity: delivery.TaskIdentity) -> _TaskStart | None:
    """Read the query's state for this task; ``None`` when the ledger holds the whole batch
    (every message of it landed): send nothing.

    A ``start`` record of this (batch, task) already there, or a retried attempt, means an
    earlier attempt may have sent a prefix: with ``effectively_once`` the task reads the
    partition tails for what landed. A control topic that is gone, or holds no ledger, in any
    batch after the first means the state was lost: the task says so, recreates the topic and
    reads the tails too (the origin headers there are the ground truth), and the cap and the
    breakers start again from empty.
    """
    assert identity.query is not None and identity.batch is not None
    control = ControlTopic.of_query(IggyConnection.shared(options.url), options.state_stream,
                                    identity.query, timeout=options.send_timeout)
    batch = identity.batch
    view = control.read()
    if view is None:
        control.create()
        view = StateView()
    lost = batch > 0 and view.ledger is None
    if lost:
        warn(f"iggy_routed batch {batch}, task {identity.partition}: the control topic {control} "
             f"holds no ledger (deleted, or its retention dropped it); the query's admitted "
             f"destinations and breakers start again from empty, and this task reads the "
             f"partition tails to find what landed")
    if batch <= view.last_batch:
        log_batch(f"iggy_routed batch {batch}, task {identity.partition}: already delivered "
                  "(the ledger holds it); sending nothing")
        return None
    ledger = Ledger(view.ledger)
    origin, scan = None, False
    if options.delivery is DeliveryGuarantee.EFFECTIVELY_ONCE:
        scan = identity.retry or lost or view.started(batch, identity.partition)
        control.append(Start(batch, identity.partition, identity.attempt))
        origin = Origin(delivery.query_key(identity.query), batch, identity.partition, 0)
    run = identity.run or ""

    def claim(destination: Destination) -> bool:
        return control.claim(view, run, batch, destination)

    seeded = frozenset(str(d) for d in ledger.admitted)
    cap = options.admission.max_destinations

    def admit(destination: Destination) -> bool:
        return control.admit(view, seeded, destination, cap)

    return _TaskStart(ledger, origin, scan, claim, admit, lost)
