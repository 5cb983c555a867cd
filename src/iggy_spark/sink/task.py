"""One ``iggy_routed`` write task: route every row, admit its destination, park what is refused.

Per row the task finds the destination (``missing`` policy for a row that names none), asks
admission (names, allowlist/denylist, cap), the breaker and the topic itself (created on first
touch), picks the partition, and hands the message to its :class:`~iggy_spark.sink.outbox.Outbox`.
Rows refused, or refused later by a breaker that opened while sending, follow
``on_admission_failure``: fail, drop, or go to the dead-letter queue with headers saying why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from iggy_spark.connection import IggyConnection
from iggy_spark.errors import (
    DestinationError,
    EncodingError,
    PayloadTooLarge,
    ServerError,
    UnknownDestination,
)
from iggy_spark.sink import sending
from iggy_spark.sink.admission import Destination, Reason, check_partition_id, rejection
from iggy_spark.sink.breaker import BreakerBoard
from iggy_spark.sink.delivery import Origin
from iggy_spark.sink.encoding import EncodedBatch, encode_batch
from iggy_spark.sink.options import FailurePolicy, RoutedOptions
from iggy_spark.sink.outbox import Headers, Message, Outbox, backoff
from iggy_spark.sink.partitioning import partition_for_key
from iggy_spark.sink.report import TaskReport

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RoutingTask", "known_topics"]

_HEADER_LIMIT = 255
_DLQ_REASON, _DLQ_STREAM, _DLQ_TOPIC = "iggy_spark.reason", "iggy_spark.stream", "iggy_spark.topic"
_DLQ_ERROR = "iggy_spark.error"

# Worker processes outlive tasks: known topics persist across batches in them. Breakers do not:
# the driver keeps them in the ledger and seeds every task's board (see breaker.py).
_topics: dict[tuple[Any, ...], sending.Topic] = {}
_state_lock = threading.Lock()


def known_topics(url: Any, found: dict[Destination, sending.Topic]) -> None:
    """Remember topics found ready elsewhere in this process (the driver's prewarm)."""
    with _state_lock:
        for destination, topic in found.items():
            _topics[(url, destination)] = topic


def _header_value(value: str | None) -> str | None:
    """A row value fit for an Iggy header (1-255 bytes), cut at a character boundary."""
    if not value:
        return None
    encoded = value.encode()[:_HEADER_LIMIT]
    return encoded.decode(errors="ignore") or None


class RoutingTask:
    """One ``write`` call: routes every row, buffers it in the outbox, flushes, reports."""

    def __init__(
        self,
        options: RoutedOptions,
        admitted: frozenset[Destination],
        board: BreakerBoard,
        origin: Origin | None = None,
        scan: bool = False,
        admit: Callable[[Destination], bool] | None = None,
    ) -> None:
        self.options = options
        self.conn = IggyConnection.shared(options.url)
        self.board = board
        self.admission = options.new_admission(admitted, admit)
        self.report = TaskReport()
        self.outbox = Outbox(options, board, self.report, origin, scan,
                             refused=self._refused_by_breaker, forget=self._forget)
        self.verdicts: dict[Destination, Reason | None] = {}
        self.touched: dict[Destination, sending.Topic] = {}
        self.listed: set[str] = set()  # streams whose topics this task has listed
        self.destinations: dict[tuple[str, str], Destination] = {}

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
        # Disconnected (the broker unreachable for send_timeout) ends the task, as it
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
                if self.board.record_failed_attempt(destination, str(exc), attempt):
                    reason = Reason.CIRCUIT_OPEN
                else:
                    time.sleep(backoff(attempt))
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
        self.outbox.keyed = enc.keyed
        missing = self.options.missing
        by_id = self.options.partition_key_encoding.value == "partition_id"
        known = self.destinations
        verdicts = self.verdicts
        add = self._add
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

    def _add(
        self, group: tuple[Destination, int | None], payload: bytes, headers: Headers | None,
        message_id: int,
    ) -> None:
        self.outbox.add(group, payload, headers, message_id)
        self._flush_if_full()

    def _flush_if_full(self) -> None:
        """Send a full outbox before buffering more: ``max_batch_bytes`` bounds a task's memory,
        dead letters included."""
        if self.outbox.full:
            self.outbox.flush()

    def reject(self, destination: Destination, reason: Reason, enc: EncodedBatch, i: int) -> None:
        """Apply ``on_admission_failure`` to a refused row."""
        self.refuse(destination, reason, [(enc.payloads[i], enc.headers[i], enc.ids[i])])
        self._flush_if_full()

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
        self._flush_if_full()

    def refuse(
        self, destination: Destination, reason: Reason, messages: list[Message],
        error: str | None = None,
    ) -> None:
        """Apply ``on_admission_failure`` to messages refused a destination. Dead letters are
        only buffered: the caller flushes (routing when the outbox is full, a flush in its
        loop)."""
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
            self.outbox.add((dlq, None), payload, {**(headers or {}), **extra}, message_id)

    def _refused_by_breaker(self, destination: Destination, messages: list[Message]) -> None:
        self.verdicts[destination] = Reason.CIRCUIT_OPEN  # the rest of this task's rows too
        self.refuse(destination, Reason.CIRCUIT_OPEN, messages)

    def _forget(self, destination: Destination) -> None:
        with _state_lock:  # the topic may have changed (deleted, repartitioned)
            _topics.pop((self.options.url, destination), None)

    def finish(self) -> TaskReport:
        self.outbox.flush()
        self.report.admitted = [tuple(d) for d in self.admission.newly_admitted]  # type: ignore[misc]
        snapshots = self.board.snapshot()
        for destination in self.board.recorded:
            self.report.breakers[str(destination)] = snapshots[destination].to_dict()
        return self.report


