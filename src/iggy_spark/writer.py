"""The ``iggy_routed`` streaming writer: group rows by destination, admit, create, send, report.

Contract with Spark (pyspark 4.3): a writer is built on the driver per micro-batch and pickled
to its tasks; :meth:`IggyRoutedStreamWriter.write` runs once per task on an executor and returns
a :class:`~iggy_spark.report.TaskReport`; :meth:`commit` runs on the driver side after every
task succeeded, :meth:`abort` after one failed.

Delivery: a task returns only after every message it accepted was acknowledged by Iggy. Any
send failure fails the task, so Spark does not commit the batch and the source does not move
past it: the batch is replayed (duplicates possible, never loss). Stable ids let consumers drop
those duplicates.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from iggy_spark import sending
from iggy_spark.admission import Destination, Reason, check_partition_id, rejection
from iggy_spark.breaker import BreakerBoard
from iggy_spark.connection import IggyConnection
from iggy_spark.encoding import EncodedBatch, encode_batch
from iggy_spark.errors import DestinationError, SendError
from iggy_spark.options import FailurePolicy, RoutedOptions
from iggy_spark.partitioning import partition_for_key
from iggy_spark.report import Ledger, TaskReport

if TYPE_CHECKING:
    from pathlib import Path

    import apache_iggy
    import pyarrow as pa

__all__ = ["IggyRoutedStreamWriter"]

log = logging.getLogger("iggy_spark")

_MESSAGES_PER_SEND = 5000
_HEADER_LIMIT = 255
_DLQ_REASON, _DLQ_STREAM, _DLQ_TOPIC = "iggy_spark.reason", "iggy_spark.stream", "iggy_spark.topic"

# Worker processes outlive tasks: breakers and known topics persist across batches in them.
_boards: dict[tuple[Any, ...], BreakerBoard] = {}
_topics: dict[tuple[Any, ...], sending.Topic] = {}
_state_lock = threading.Lock()

Group = tuple[Destination, int | None]


def _board(options: RoutedOptions) -> BreakerBoard:
    key = (options.url, options.breaker)
    with _state_lock:
        board = _boards.get(key)
        if board is None:
            board = _boards[key] = options.new_breaker_board()
        return board


def _header_value(value: str | None) -> str | None:
    """A row value fit for an Iggy header (1-255 bytes), cut at a character boundary."""
    if not value:
        return None
    encoded = value.encode()[:_HEADER_LIMIT]
    return encoded.decode(errors="ignore") or None


class _Task:
    """One ``write`` call: routes every row, buffers per destination, flushes, reports."""

    def __init__(self, options: RoutedOptions, admitted: frozenset[Destination]) -> None:
        import apache_iggy

        self.options = options
        self.conn = IggyConnection.shared(options.url)
        self.board = _board(options)
        self.admission = options.new_admission(admitted)
        self.report = TaskReport()
        self.groups: dict[Group, list[apache_iggy.SendMessage]] = defaultdict(list)
        self.buffered = 0
        self.verdicts: dict[Destination, Reason | None] = {}
        self.touched: dict[Destination, sending.Topic] = {}
        self.destinations: dict[tuple[str, str], Destination] = {}
        self._message = apache_iggy.SendMessage

    # -- admission -----------------------------------------------------------------------------

    def topic(self, destination: Destination) -> sending.Topic:
        """The destination's topic facts, ensuring it exists on first touch in this process."""
        known = self.touched.get(destination)
        if known is not None:
            return known
        key = (self.options.url, destination)
        with _state_lock:
            known = _topics.get(key)
        if known is None:
            options = self.options
            try:
                known = self.conn.run(sending.ensure_topic(
                    self.conn, destination, create=options.create_destinations,
                    defaults=options.topic_defaults, timeout=options.send_timeout,
                ))
            except DestinationError as exc:
                self.board.record_failure(destination, counts=True, error=str(exc))
                self.report.breakers[str(destination)] = self._snapshot(destination)
                raise
            if known.created:
                self.report.created.append(str(destination))
            with _state_lock:
                _topics[key] = known
        self.touched[destination] = known
        return known

    def verdict(self, destination: Destination) -> Reason | None:
        """Name, list and cap checks, then the breaker; decided once per destination per task."""
        try:
            return self.verdicts[destination]
        except KeyError:
            pass
        reason = self.admission.check(*destination)
        if reason is None and not self.board.allow(destination):
            reason = Reason.CIRCUIT_OPEN
        if reason is None:
            self.topic(destination)
        self.verdicts[destination] = reason
        return reason

    # -- routing -------------------------------------------------------------------------------

    def route(self, batch: pa.RecordBatch) -> None:
        """Admit or reject every row of ``batch`` and buffer it in its group.

        This loop runs once per message, so per row it only looks things up in per-task dicts
        (the ``Destination`` of a ``(stream, topic)`` pair, its verdict) and appends the
        message; everything else is decided once per destination.
        """
        enc = encode_batch(batch, self.options)
        missing = self.options.missing
        by_id = self.options.partition_key_encoding.value == "partition_id"
        known = self.destinations
        verdicts = self.verdicts
        add = self.add
        rows = zip(enc.streams, enc.topics, enc.partitioning, enc.payloads, enc.headers, enc.ids,
                   strict=True)
        for i, (stream, topic, part, payload, headers, message_id) in enumerate(rows):
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
        self, group: Group, payload: bytes, headers: dict[str, str | bytes] | None, message_id: int
    ) -> None:
        """Buffer one message in its group; send everything once ``max_batch_bytes`` is reached."""
        self.groups[group].append(self._message(payload, headers, message_id or None))
        self.buffered += len(payload)
        if self.buffered >= self.options.max_batch_bytes:
            self.flush()

    def reject(self, destination: Destination, reason: Reason, enc: EncodedBatch, i: int) -> None:
        """Apply ``on_admission_failure`` to a refused row."""
        self.report.rejected[reason.value] += 1
        policy = self.options.on_admission_failure
        if policy is FailurePolicy.ERROR:
            raise rejection(destination.stream, destination.topic, reason)
        if policy is FailurePolicy.DROP:
            self.report.dropped += 1
            return
        dlq = self.options.dlq
        assert dlq is not None
        self.topic(dlq)
        headers: dict[str, str | bytes] = dict(enc.headers[i] or {})
        headers[_DLQ_REASON] = reason.value
        for name, value in ((_DLQ_STREAM, destination.stream), (_DLQ_TOPIC, destination.topic)):
            fitted = _header_value(value)
            if fitted is not None:
                headers[name] = fitted
        self.report.dead_lettered += 1
        self.add((dlq, None), enc.payloads[i], headers, enc.ids[i])

    # -- sending -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Send every buffered group and wait for all acknowledgements (or fail the task)."""
        if not self.groups:
            return
        groups, self.groups, self.buffered = self.groups, defaultdict(list), 0
        outcomes = self.conn.run(self._send_all(groups))
        failure: BaseException | None = None
        for (destination, _), outcome in zip(groups, outcomes, strict=True):
            if outcome is None:
                self.board.record_success(destination)
                continue
            failure = failure or outcome
            counts = not isinstance(outcome, sending.Disconnected)
            self.board.record_failure(destination, counts=counts, error=str(outcome))
            self.report.breakers[str(destination)] = self._snapshot(destination)
            with _state_lock:  # the topic may have changed (deleted, repartitioned)
                _topics.pop((self.options.url, destination), None)
        if failure is not None:
            raise failure
        for (destination, _), messages in groups.items():
            self.report.routed[str(destination)] += len(messages)

    async def _send_all(
        self, groups: dict[Group, list[apache_iggy.SendMessage]]
    ) -> list[BaseException | None]:
        gate = asyncio.Semaphore(self.options.max_concurrent_destinations)
        timeout = self.options.send_timeout

        async def one(destination: Destination, partition: int | None,
                      messages: list[apache_iggy.SendMessage]) -> BaseException | None:
            async with gate:
                try:
                    for start in range(0, len(messages), _MESSAGES_PER_SEND):
                        chunk = messages[start:start + _MESSAGES_PER_SEND]
                        await sending.send(self.conn, destination, partition, chunk,
                                           timeout=timeout)
                except (SendError, sending.Disconnected) as exc:
                    return exc
                return None

        return list(await asyncio.gather(*(one(d, p, m) for (d, p), m in groups.items())))

    def _snapshot(self, destination: Destination) -> dict[str, Any]:
        snap = self.board.snapshot().get(destination)
        if snap is None:
            return {"state": "closed", "consecutive_failures": 0}
        return {"state": str(snap.state), "consecutive_failures": snap.consecutive_failures,
                "last_error": snap.last_error}

    def finish(self) -> TaskReport:
        self.flush()
        self.report.admitted = [tuple(d) for d in self.admission.newly_admitted]  # type: ignore[misc]
        board = self.board.snapshot()
        for destination in self.verdicts:
            if destination in self.touched or destination in board:
                self.report.breakers[str(destination)] = self._snapshot(destination)
        return self.report


class IggyRoutedStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch's rows to the Iggy destinations they name."""

    def __init__(
        self, options: RoutedOptions, admitted: frozenset[Destination], ledger: Path | None
    ) -> None:
        self.options = options
        self.admitted = admitted
        self.ledger = ledger

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        task = _Task(self.options, self.admitted)
        for batch in iterator:
            task.route(batch)
        return task.finish()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task of ``batchId`` succeeded: fold their reports into the ledger, log a line."""
        line = Ledger(self.ledger).apply(
            batchId, [m for m in messages if isinstance(m, TaskReport)]
        )
        if line is not None:
            _log_batch(line)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_batch(f"iggy_routed batch {batchId} failed; Spark will not commit it and the "
                   "source will replay it")


def _log_batch(line: str) -> None:
    """Log at INFO; in Spark's worker processes nobody configures logging, so add a handler."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    log.info(line)
