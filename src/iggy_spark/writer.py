"""The ``iggy_routed`` streaming writer: group rows by destination, admit, create, send, report.

Contract with Spark (pyspark 4.3): a writer is built on the driver per micro-batch and pickled
to its tasks; :meth:`IggyRoutedStreamWriter.write` runs once per task on an executor and returns
a :class:`~iggy_spark.report.TaskReport`; :meth:`commit` runs on the driver side after every
task succeeded, :meth:`abort` after one failed.

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

import asyncio
import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from iggy_spark import delivery, sending
from iggy_spark.admission import Destination, Reason, check_partition_id, rejection
from iggy_spark.breaker import BreakerBoard, BreakerSnapshot, BreakerState, Claim, Clock
from iggy_spark.connection import IggyConnection
from iggy_spark.delivery import ORIGIN_HEADER, BatchPlan, Origin
from iggy_spark.encoding import EncodedBatch, encode_batch
from iggy_spark.errors import (
    DestinationError,
    EncodingError,
    PayloadTooLarge,
    SendError,
    ServerError,
    UnknownDestination,
)
from iggy_spark.options import FailurePolicy, RoutedOptions
from iggy_spark.partitioning import partition_for_key
from iggy_spark.report import Ledger, TaskReport

if TYPE_CHECKING:
    import apache_iggy
    import pyarrow as pa

__all__ = ["IggyRoutedStreamWriter", "prewarm_once"]

log = logging.getLogger("iggy_spark")

_MESSAGES_PER_SEND = 5000
_BACKOFF_FIRST, _BACKOFF_MAX = 0.1, 2.0  # seconds between retries of a refused send
_HEADER_LIMIT = 255
_DLQ_REASON, _DLQ_STREAM, _DLQ_TOPIC = "iggy_spark.reason", "iggy_spark.stream", "iggy_spark.topic"
_DLQ_ERROR = "iggy_spark.error"

# Worker processes outlive tasks: known topics persist across batches in them. Breakers do not:
# the driver keeps them in the ledger and seeds every task's board (see breaker.py).
_topics: dict[tuple[Any, ...], sending.Topic] = {}
_state_lock = threading.Lock()

Group = tuple[Destination, int | None]
Headers = dict[str, str | bytes]
Message = tuple[bytes, Headers | None, int]  # payload, user headers, id (0: none)


def _backoff(attempt: int) -> float:
    """Pause before retry ``attempt`` (from 1): doubling, capped."""
    return float(min(_BACKOFF_FIRST * 2 ** (attempt - 1), _BACKOFF_MAX))


@dataclass
class _Outcome:
    """How one group's sends ended: ``sent`` messages acknowledged, the rest ``refused`` by an
    open breaker, or a task-fatal ``error`` (disconnection, refused login, a failing DLQ)."""

    sent: int = 0
    refused: list[Message] = field(default_factory=list)
    error: BaseException | None = None
    resumed: int = 0  # of ``sent``: found already landed when a send was retried
    undecided: bool = False  # a retry could not tell what landed and sent it all again


_prewarmed: set[tuple[Any, ...]] = set()


def prewarm_once(options: RoutedOptions) -> None:
    """Create or look up the allowlist's literal destinations once per query (driver side).

    Spark builds the writer for every micro-batch in one long-lived driver-side process, so
    the first call does the work and later ones return at once. Bounded by
    ``prewarm_deadline``; failures are logged, never raised: the first batch will try again
    (and count failures against the breakers) when rows need those destinations.
    """
    destinations = options.prewarm
    key = (options.url, destinations, options.create_destinations)
    with _state_lock:
        if not destinations or key in _prewarmed:
            return
        _prewarmed.add(key)
    conn = IggyConnection.shared(options.url)
    started = time.monotonic()
    outcome = conn.run(sending.prewarm(
        conn, destinations, create=options.create_destinations,
        defaults=options.topic_defaults, deadline=options.prewarm_deadline))
    ready = 0
    for destination, result in outcome.items():
        if isinstance(result, sending.Topic):
            ready += 1
            with _state_lock:
                _topics[(options.url, destination)] = result
        else:
            log.warning("iggy_routed prewarm: %s not ready: %s", destination, result)
    _log_batch(f"iggy_routed prewarm: {ready} of {len(destinations)} allowlisted destinations "
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


def _header_value(value: str | None) -> str | None:
    """A row value fit for an Iggy header (1-255 bytes), cut at a character boundary."""
    if not value:
        return None
    encoded = value.encode()[:_HEADER_LIMIT]
    return encoded.decode(errors="ignore") or None


class _Task:
    """One ``write`` call: routes every row, buffers per destination, flushes, reports."""

    def __init__(
        self,
        options: RoutedOptions,
        admitted: frozenset[Destination],
        board: BreakerBoard,
        origin: Origin | None = None,
        scan: bool = False,
    ) -> None:
        import apache_iggy

        self.options = options
        self.conn = IggyConnection.shared(options.url)
        self.board = board
        self.admission = options.new_admission(admitted)
        self.report = TaskReport()
        # Messages are built once, when buffered (the event loop then only sends); the raw
        # parts stay beside them in case the destination's breaker opens and they must be
        # dead-lettered (an SDK message cannot be read back).
        self.groups: dict[Group, list[apache_iggy.SendMessage]] = defaultdict(list)
        self.raw: dict[Group, list[Message]] = defaultdict(list)
        self.buffered = 0
        self.verdicts: dict[Destination, Reason | None] = {}
        self.touched: dict[Destination, sending.Topic] = {}
        self.listed: set[str] = set()  # streams whose topics this task has listed
        self.destinations: dict[tuple[str, str], Destination] = {}
        self._message = apache_iggy.SendMessage
        # Effectively-once delivery: each group numbers the messages it sends; in a replay
        # (``scan``) each group first reads what landed before, skips it and numbers on.
        self.origin = origin
        self.scan = scan
        self.prefix = None if origin is None else f"{origin.query}:{origin.batch}:{origin.task}:"
        self.keyed = False  # rows carry message ids: a replay skips by id, not by count
        self.seqs: dict[Group, int] = {}
        self.rows: dict[Group, int] = defaultdict(int)  # rows of the group routed so far
        self.landed: dict[Group, delivery.Landed] = {}
        self.first_seq: dict[Group, int] = {}

    # -- admission -----------------------------------------------------------------------------

    def topic(self, destination: Destination) -> sending.Topic:
        """The destination's topic facts, ensuring it exists on first touch in this process.

        Raises :class:`UnknownDestination` for a missing topic the sink may not create; other
        :class:`DestinationError`s are failures of the destination, for :meth:`verdict`.
        """
        known = self.touched.get(destination)
        if known is not None:
            return known
        key = (self.options.url, destination)
        with _state_lock:
            known = _topics.get(key)
        if known is None and destination.stream not in self.listed:
            known = self._list_stream(destination, key)
        if known is None:
            options = self.options
            started = time.monotonic()
            known = self.conn.run(sending.ensure_topic(
                self.conn, destination, create=options.create_destinations,
                defaults=options.topic_defaults, timeout=options.send_timeout,
            ))
            if known.created:
                self.report.created.append(str(destination))
                self.report.create_seconds.append(time.monotonic() - started)
            with _state_lock:
                _topics[key] = known
        self.touched[destination] = known
        return known

    def _list_stream(self, destination: Destination, key: tuple[Any, ...]) -> sending.Topic | None:
        """Learn every topic of the destination's stream in one request (once per stream per
        task) and return the destination's, if it exists; ``None`` leaves it to
        :func:`sending.ensure_topic`, which creates what is missing and counts failures."""
        stream = destination.stream
        self.listed.add(stream)
        try:
            topics = self.conn.run(sending.list_topics(
                self.conn, stream, timeout=self.options.send_timeout))
        except (ServerError, RuntimeError):  # RuntimeError: the SDK's own errors
            return None  # ensure_topic tries again, with the breaker's accounting
        # sending.Disconnected (the broker unreachable for send_timeout) ends the task, as it
        # would have from ensure_topic: waiting twice would only double the outage's cost
        with _state_lock:
            for name, partitions in topics.items():
                _topics.setdefault((self.options.url, Destination(stream, name)),
                                   sending.Topic(partitions, False))
            return _topics.get(key)

    def verdict(self, destination: Destination) -> Reason | None:
        """Name, list and cap checks, then the breaker, then the topic itself; decided once per
        destination per task.

        Looking the topic up or creating it is retried with backoff like a send; every failure
        counts against the breaker, and once it opens the verdict is ``circuit_open``. A topic
        that is missing while ``create_destinations=false`` is ``unknown``: no breaker count.
        """
        try:
            return self.verdicts[destination]
        except KeyError:
            pass
        reason = self.admission.check(*destination)
        if reason is None and not self.board.allow(destination):
            reason = Reason.CIRCUIT_OPEN
        attempt = 0
        while reason is None:
            try:
                self.topic(destination)
                break
            except UnknownDestination:
                reason = Reason.UNKNOWN
            except DestinationError as exc:
                attempt += 1
                if self._count_failure(destination, exc, attempt):
                    reason = Reason.CIRCUIT_OPEN
                else:
                    time.sleep(_backoff(attempt))
        self.verdicts[destination] = reason
        return reason

    def _count_failure(self, destination: Destination, exc: BaseException, attempt: int) -> bool:
        """Count one failure of ``destination``; whether its breaker is now open.

        ``attempt`` failures in a row of one operation open it even when successes elsewhere
        (another partition of the same topic) keep resetting the consecutive count.
        """
        self.board.record_failure(destination, counts=True, error=str(exc))
        if attempt >= self.options.breaker.failure_threshold:
            self.board.trip(destination, str(exc))
        return self.board.state(destination) is BreakerState.OPEN

    # -- routing -------------------------------------------------------------------------------

    def route(self, batch: pa.RecordBatch) -> None:
        """Admit or reject every row of ``batch`` and buffer it in its group.

        This loop runs once per message, so per row it only looks things up in per-task dicts
        (the ``Destination`` of a ``(stream, topic)`` pair, its verdict) and appends the
        message; everything else is decided once per destination.
        """
        enc = encode_batch(batch, self.options)
        self.keyed = enc.keyed
        missing = self.options.missing
        by_id = self.options.partition_key_encoding.value == "partition_id"
        known = self.destinations
        verdicts = self.verdicts
        add = self.add
        rows = zip(enc.streams, enc.topics, enc.partitioning, enc.payloads, enc.headers, enc.ids,
                   strict=True)
        invalid = enc.invalid
        for i, (stream, topic, part, payload, headers, message_id) in enumerate(rows):
            if invalid and i in invalid:
                self.dead_letter_invalid(enc, i, invalid[i])
                continue
            if stream is None or topic is None:
                self.report.missing[missing.policy.value] += 1
                resolved = missing.resolve(stream, topic)  # raises under policy 'error'
                if resolved is None:
                    self.report.dropped += 1
                    continue
                destination = resolved
            else:
                found = known.get((stream, topic))
                destination = found if found is not None else known.setdefault(
                    (stream, topic), Destination(stream, topic))
            reason = verdicts[destination] if destination in verdicts else self.verdict(
                destination)
            partition: int | None = None
            if reason is None and part is not None:
                count = self.touched[destination].partitions_count
                if by_id:
                    assert isinstance(part, int)
                    reason = check_partition_id(part, count)
                    partition = part
                else:
                    assert isinstance(part, bytes)
                    partition = partition_for_key(part, count)
            if reason is not None:
                self.reject(destination, reason, enc, i)
                continue
            add((destination, partition), payload, headers, message_id)

    def add(
        self, group: Group, payload: bytes, headers: Headers | None, message_id: int
    ) -> None:
        """Buffer one message in its group; send everything once ``max_batch_bytes`` is reached."""
        if self.prefix is not None:
            if self.scan and self._landed_before(group, message_id):
                self.report.resumed += 1
                self.report.routed[str(group[0])] += 1
                return
            seq = self.seqs.get(group, 0)
            self.seqs[group] = seq + 1
            if group not in self.groups:
                self.first_seq[group] = seq
        self.groups[group].append(self._message(payload, headers, message_id or None))
        self.raw[group].append((payload, headers, message_id))
        self.buffered += len(payload)
        if self.buffered >= self.options.max_batch_bytes:
            self.flush()

    def _landed_before(self, group: Group, message_id: int) -> bool:
        """Whether this row of a replay landed in an earlier attempt (see
        :mod:`iggy_spark.delivery`): by id when rows carry ids, else by its place in the group.
        """
        landed = self.landed.get(group)
        if landed is None:
            landed = self.landed[group] = self._read_landed(group)
            self.seqs[group] = landed.count  # the group's numbering goes on after what landed
        if self.keyed:
            return landed.take(message_id)
        row = self.rows[group]
        self.rows[group] = row + 1
        return row < landed.count

    def _read_landed(self, group: Group) -> delivery.Landed:
        """What ``group`` landed in earlier attempts (read once per group per task)."""
        assert self.origin is not None
        destination, partition = group
        limit = self.options.delivery_scan_messages
        found = self.conn.run(sending.landed(
            self.conn, destination, partition, self.origin, limit=limit,
            timeout=self.options.send_timeout, ids=self.keyed))
        where = (f"replay of batch {self.origin.batch}, task {self.origin.task}, "
                 f"{destination} partition {partition}")
        if found is None or not found.trusted:
            self.report.at_least_once += 1
            _warn(f"iggy_routed: {where}: cannot tell what landed within the last {limit} "
                  "messages (delivery_scan_messages), or a later batch of this query is "
                  "there already; sending the group again in full (at-least-once)")
            return delivery.Landed()
        if self.keyed and not found.complete:
            self.report.at_least_once += 1
            _warn(f"iggy_routed: {where}: found {len(found.covered)} of the {found.count} "
                  f"messages that landed within the last {limit} (delivery_scan_messages); "
                  "the others are sent again (at-least-once)")
        return found

    def reject(self, destination: Destination, reason: Reason, enc: EncodedBatch, i: int) -> None:
        """Apply ``on_admission_failure`` to a refused row."""
        self.refuse(destination, reason, [(enc.payloads[i], enc.headers[i], enc.ids[i])])

    def dead_letter_invalid(self, enc: EncodedBatch, i: int, error: EncodingError) -> None:
        """A row that cannot become a message goes to the DLQ (only collected when one exists).

        Its payload may be what is wrong with it (empty, too large): then the dead letter
        carries a small JSON note instead; the reason and the error are in its headers.
        """
        reason = Reason.TOO_LARGE if isinstance(error, PayloadTooLarge) else Reason.INVALID_ROW
        payload = enc.payloads[i]
        if not payload or len(payload) > self.options.max_message_bytes:
            payload = orjson.dumps({_DLQ_ERROR: str(error)})
        self.refuse(Destination(enc.streams[i] or "", enc.topics[i] or ""), reason,
                    [(payload, enc.headers[i], enc.ids[i])], error=str(error))

    def refuse(
        self, destination: Destination, reason: Reason, messages: list[Message],
        error: str | None = None,
    ) -> None:
        """Apply ``on_admission_failure`` to messages refused a destination."""
        self.report.rejected[reason.value] += len(messages)
        policy = self.options.on_admission_failure
        if policy is FailurePolicy.ERROR:
            raise rejection(destination.stream, destination.topic, reason)
        if policy is FailurePolicy.DROP:
            self.report.dropped += len(messages)
            return
        dlq = self.options.dlq
        assert dlq is not None
        self.topic(dlq)
        extra: Headers = {_DLQ_REASON: reason.value}
        for name, value in ((_DLQ_STREAM, destination.stream), (_DLQ_TOPIC, destination.topic),
                            (_DLQ_ERROR, error)):
            fitted = _header_value(value)
            if fitted is not None:
                extra[name] = fitted
        self.report.dead_lettered += len(messages)
        for payload, headers, message_id in messages:
            self.add((dlq, None), payload, {**(headers or {}), **extra}, message_id)

    # -- sending -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Send every buffered group and wait for all acknowledgements (or fail the task).

        Messages refused because their destination's breaker opened meanwhile follow
        ``on_admission_failure``; dead-lettered ones are sent (and acknowledged) before this
        returns, so the task never reports a message that is not safely somewhere.
        """
        if not self.groups:
            return
        groups, raw, first = self.groups, self.raw, self.first_seq
        self.groups, self.raw, self.buffered = defaultdict(list), defaultdict(list), 0
        self.first_seq = {}
        outcomes = self.conn.run(self._send_all(groups, raw, first))
        failure: BaseException | None = None
        refused: dict[Destination, list[Message]] = defaultdict(list)
        for (destination, _), outcome in zip(groups, outcomes, strict=True):
            if outcome.sent:
                self.report.routed[str(destination)] += outcome.sent
            self.report.resumed += outcome.resumed
            self.report.at_least_once += outcome.undecided
            if outcome.error is not None or outcome.refused:
                with _state_lock:  # the topic may have changed (deleted, repartitioned)
                    _topics.pop((self.options.url, destination), None)
            failure = failure or outcome.error
            if outcome.refused:
                refused[destination].extend(outcome.refused)
        if failure is not None:
            raise failure
        for destination, messages in refused.items():
            self.verdicts[destination] = Reason.CIRCUIT_OPEN  # the rest of this task's rows too
            self.refuse(destination, Reason.CIRCUIT_OPEN, messages)
        self.flush()  # the dead letters, if any

    async def _send_all(
        self, groups: dict[Group, list[apache_iggy.SendMessage]], raw: dict[Group, list[Message]],
        first: dict[Group, int],
    ) -> list[_Outcome]:
        gate = asyncio.Semaphore(self.options.max_concurrent_destinations)
        # A destination on probation (half-open) sends one group at a time: the first is the
        # probe, and the others go only once it closed the breaker.
        probing = {d: asyncio.Lock() for d, _ in groups
                   if self.board.state(d) is BreakerState.HALF_OPEN}
        return list(await asyncio.gather(*(
            self._send_group(d, p, m, raw[d, p], gate, probing.get(d) or nullcontext(),
                             first.get((d, p)))
            for (d, p), m in groups.items()
        )))

    async def _send_group(
        self, destination: Destination, partition: int | None,
        messages: list[apache_iggy.SendMessage], raw: list[Message],
        gate: asyncio.Semaphore, probe: AbstractAsyncContextManager[Any],
        first_seq: int | None = None,
    ) -> _Outcome:
        """Send one group in order, chunk by chunk, retrying a refused chunk with backoff.

        Only what the destination refuses is retried here (disconnections are retried inside
        :func:`sending.send` and end the task when they outlast ``send_timeout``). Order holds:
        a chunk goes only after the previous one was acknowledged, and once the breaker opens
        the group's unsent tail is refused as a whole, never sent out of order.
        """
        timeout = self.options.send_timeout
        outcome, attempt = _Outcome(), 0
        async with probe:
            while outcome.sent < len(messages):
                if self.board.state(destination) is BreakerState.OPEN:
                    outcome.refused = raw[outcome.sent:]
                    break
                chunk = messages[outcome.sent:outcome.sent + _MESSAGES_PER_SEND]
                first = (None if self.origin is None or first_seq is None
                         else self.origin._replace(seq=first_seq + outcome.sent))
                if first is not None:
                    chunk = self._marked(chunk, raw[outcome.sent + len(chunk) - 1],
                                         first.seq + len(chunk) - 1)
                try:
                    async with gate:
                        resumed, undecided = await sending.send(
                            self.conn, destination, partition, chunk, timeout=timeout,
                            first=first, scan_limit=self.options.delivery_scan_messages)
                except SendError as exc:
                    attempt += 1
                    if destination == self.options.dlq:
                        outcome.error = exc  # nowhere left to park these rows
                        break
                    if not self._count_failure(destination, exc, attempt):
                        await asyncio.sleep(_backoff(attempt))
                    continue
                except (sending.Disconnected, ServerError) as exc:
                    self.board.record_failure(destination, counts=False, error=str(exc))
                    outcome.error = exc
                    break
                self.board.record_success(destination)
                outcome.sent += len(chunk)
                outcome.resumed += resumed
                outcome.undecided = outcome.undecided or undecided
                attempt = 0
        return outcome

    def _marked(
        self, chunk: list[apache_iggy.SendMessage], last: Message, seq: int
    ) -> list[apache_iggy.SendMessage]:
        """``chunk`` with its last message carrying the origin header (``seq``: its number in
        the group; then the chunk's length). One header per send is enough: a send lands whole
        and contiguous, so the header tells which messages before it are the send's; on every
        message it cost 0.76x the sink's speed (the SDK converts each message's headers)."""
        assert self.prefix is not None
        payload, headers, message_id = last
        origin: Headers = {ORIGIN_HEADER: f"{self.prefix}{seq}:{len(chunk)}"}
        return [*chunk[:-1], self._message(payload, {**headers, **origin} if headers else origin,
                                           message_id or None)]

    def finish(self) -> TaskReport:
        self.flush()
        self.report.admitted = [tuple(d) for d in self.admission.newly_admitted]  # type: ignore[misc]
        snapshots = self.board.snapshot()
        for destination in self.board.recorded:
            self.report.breakers[str(destination)] = snapshots[destination].to_dict()
        return self.report


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
            decided = _task_origin(self.plan)
            if decided == _SEND_NOTHING:
                return TaskReport()  # the ledger holds the whole batch: it all landed
            assert isinstance(decided, tuple)
            origin, scan = decided
        board = BreakerBoard(self.options.breaker, self.clock, self.breakers,
                             _probe_claims(self.probes))
        task = _Task(self.options, self.admitted, board, origin, scan)
        for batch in iterator:
            task.route(batch)
        return task.finish()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task of ``batchId`` succeeded: fold their reports into the ledger, log a line."""
        if self.plan is not None and self.plan.batch != batchId:
            _warn(f"iggy_routed: the writer was planned for batch {self.plan.batch} but Spark "
                  f"commits batch {batchId}; tasks used Spark's id")
        line = Ledger(self.ledger).apply(
            batchId, [m for m in messages if isinstance(m, TaskReport)]
        )
        self._forget_probes()
        if line is not None:
            _log_batch(line)

    def _forget_probes(self) -> None:
        if self.probes is not None:
            shutil.rmtree(self.probes, ignore_errors=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._forget_probes()
        _log_batch(f"iggy_routed batch {batchId} failed; Spark will not commit it and the "
                   "source will replay it")


_SEND_NOTHING = "send nothing"


def _task_origin(plan: BatchPlan) -> tuple[Origin | None, bool] | str:
    """This task's origin and whether it must look for what landed, or :data:`_SEND_NOTHING`.

    Spark's own batch id (the ``streaming.sql.batchId`` local property every task of the batch
    gets) is the one trusted: a wrong id could make a task skip what it never sent. Without it
    the task falls back to at-least-once (no origin), with a warning.
    """
    identity = delivery.task_identity()
    if identity is None or identity.batch is None:
        _warn("iggy_routed: the write task cannot read Spark's batch id; sending at-least-once")
        return None, False
    batch, scan = identity.batch, plan.replay or identity.retry
    if batch != plan.batch:
        _warn(f"iggy_routed: task {identity.partition}: the driver planned batch {plan.batch}, "
              f"Spark runs {batch}; reading partition tails to find what landed")
        scan = True
    if batch <= plan.last_delivered:
        _log_batch(f"iggy_routed batch {batch}, task {identity.partition}: already delivered "
                   "(the ledger holds it); sending nothing")
        return _SEND_NOTHING
    return Origin(plan.query, batch, identity.partition, 0), scan


def _warn(line: str) -> None:
    _ensure_handler()
    log.warning(line)


def _ensure_handler() -> None:
    """In Spark's worker processes nobody configures logging: add a handler."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def _log_batch(line: str) -> None:
    """Log at INFO (see :func:`_ensure_handler`)."""
    _ensure_handler()
    log.info(line)
