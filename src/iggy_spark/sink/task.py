"""One ``iggy_routed`` write task: route every row, admit its destination, park what is refused.

Per row the task finds the destination (``missing`` policy for a row that names none), asks
admission (names, the sink's own destinations, allowlist/denylist, cap), the breaker and the
topic itself (created on first touch), picks the partition, and hands the message to its
:class:`~iggy_spark.sink.outbox.Outbox`. Rows refused, or refused later by a breaker that opened
while sending, follow ``on_admission_failure``: fail, drop, or go to the dead-letter queue with
headers saying why.

Streams and topics are found by name and sent to by the ids the server gave those names
(:mod:`iggy_spark.sink.sending`), looked up afresh by every task: a topic deleted and its id
given to another is never written by an id a worker process kept from an earlier batch. A
destination found at the id of the state stream or of the dead-letter topic is refused
(``reserved``), whatever its name.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from itertools import accumulate, islice, repeat
from typing import TYPE_CHECKING, cast

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
from iggy_spark.sink.admission import Destination, ReservedIds
from iggy_spark.sink.breaker import BreakerBoard
from iggy_spark.sink.delivery import Origin
from iggy_spark.sink.encoding import EncodedBatch, encode_batch
from iggy_spark.sink.options import FailurePolicy, RoutedOptions
from iggy_spark.sink.outbox import Group, Headers, Message, Outbox, backoff
from iggy_spark.sink.partitioning import partition_for_key
from iggy_spark.sink.refusals import DeliveryReason, Reason, check_partition_id, rejection
from iggy_spark.sink.report import TaskReport

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RoutingTask"]

_HEADER_LIMIT = 255
_DLQ_REASON, _DLQ_STREAM, _DLQ_TOPIC = "iggy_spark.reason", "iggy_spark.stream", "iggy_spark.topic"
_DLQ_ERROR = "iggy_spark.error"

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
                             refused=self._refused_by_breaker, where=self.topic)
        self.verdicts: dict[Destination, Reason | None] = {}
        self.touched: dict[Destination, sending.Topic] = {}
        self.listed: dict[str, dict[str, sending.Topic]] = {}  # each stream's topics, by name
        self.destinations: dict[tuple[str, str], Destination] = {}
        self.reserved: ReservedIds | None = None

    # -- admission -----------------------------------------------------------------------------

    def topic(self, destination: Destination) -> sending.Topic:
        """The destination's topic facts, ensuring it exists on first touch in this task.

        Raises :class:`UnknownDestination` for a missing topic the sink may not create; other
        :class:`DestinationError`s are failures of the destination, for :meth:`verdict`.
        """
        known = self.touched.get(destination)
        if known is not None:
            return known
        listed = self.listed.get(destination.stream)
        if listed is None:
            listed = self.listed[destination.stream] = self._list_stream(destination.stream)
        known = listed.get(destination.topic)
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
        self.touched[destination] = known
        return known

    def _list_stream(self, stream: str) -> dict[str, sending.Topic]:
        """Every topic of ``stream`` in one listing (once per stream per task); empty when the
        listing fails, which leaves each topic to :func:`sending.ensure_topic`, which creates
        what is missing and counts failures."""
        try:
            return self.conn.run(sending.list_topics(
                self.conn, stream, timeout=self.options.send_timeout))
        except (ServerError, RuntimeError):  # RuntimeError: the SDK's own errors
            return {}  # ensure_topic tries again, with the breaker's accounting
        # Disconnected (the broker unreachable for send_timeout) ends the task, as it
        # would have from ensure_topic: waiting twice would only double the outage's cost

    def reserved_ids(self) -> ReservedIds:
        """The ids of the state stream and the dead-letter topic, looked up by name once per
        task; what does not exist yet is created by name later and so cannot be at the id of
        a destination found before."""
        if self.reserved is None:
            options, conn = self.options, self.conn
            state = conn.run(sending.find_stream(conn, options.state_stream,
                                                 timeout=options.send_timeout))
            dlq = None if options.dlq is None else conn.run(sending.find_topic(
                conn, options.dlq, timeout=options.send_timeout))
            self.reserved = ReservedIds(
                state, None if dlq is None else (dlq.stream_id, dlq.topic_id))
        return self.reserved

    def verdict(self, destination: Destination) -> Reason | None:
        """Name, list and cap checks, then the breaker, then the topic itself; decided once per
        destination per task.

        Looking the topic up or creating it is retried with backoff like a send; every failure
        counts against the breaker, and once it opens the verdict is ``circuit_open``. A topic
        that is missing while ``create_destinations=false`` is ``unknown``: no breaker count.
        A topic found at the state stream's or the dead-letter topic's ids is ``reserved``.
        """
        try:
            return self.verdicts[destination]
        except KeyError:
            pass
        reason: Reason | None = self.admission.check(*destination)
        if reason is None and not self.board.allow(destination):
            reason = DeliveryReason.CIRCUIT_OPEN
        attempt = 0
        while reason is None:
            try:
                found = self.topic(destination)
                reason = self.reserved_ids().check(found.stream_id, found.topic_id)
                break
            except UnknownDestination:
                reason = DeliveryReason.UNKNOWN
            except DestinationError as exc:
                attempt += 1
                if self.board.record_failed_attempt(destination, str(exc), attempt):
                    reason = DeliveryReason.CIRCUIT_OPEN
                else:
                    time.sleep(backoff(attempt))
        self.verdicts[destination] = reason
        return reason

    def default_verdict(self, destination: Destination) -> Reason | None:
        """The verdict on a destination the defaults completed: the dead-letter topic, when the
        options make it the default, takes rows without a destination as they are (the options
        chose it, not the rows); any other is checked as rows' own destinations are."""
        if destination == self.options.dlq:
            self.topic(destination)
            return None
        if destination in self.verdicts:
            return self.verdicts[destination]
        return self.verdict(destination)

    # -- routing -------------------------------------------------------------------------------

    def route(self, batch: pa.RecordBatch) -> None:
        """Admit or reject every row of ``batch`` and buffer it in its group: a stretch of rows
        at a time while that is the same as row by row (:meth:`_route_admitted`), the rest row
        by row (:meth:`_route_rows`)."""
        enc = encode_batch(batch, self.options)
        self.outbox.keyed, self.outbox.text = enc.keyed, enc.text
        self._route_rows(enc, self._route_admitted(enc))

    def _route_rows(self, enc: EncodedBatch, start: int) -> None:
        """Route the rows of ``enc`` from ``start`` one at a time.

        This loop runs once per message, so per row it only looks things up in per-task dicts
        (the ``Destination`` of a ``(stream, topic)`` pair, its verdict) and appends the
        message; everything else is decided once per destination.
        """
        missing = self.options.missing
        by_id = self.options.partition_key_encoding.value == "partition_id"
        known = self.destinations
        verdicts = self.verdicts
        add = self._add
        rows = zip(enc.streams, enc.topics, enc.partitioning, enc.payloads, enc.headers, enc.ids,
                   strict=True)
        invalid = enc.invalid
        for i, (stream, topic, part, payload, headers, message_id) in enumerate(
                islice(rows, start, None), start):
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
                reason = self.default_verdict(destination)
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

    def _route_admitted(self, enc: EncodedBatch) -> int:
        """Route ``enc``'s rows a stretch at a time, while that is what :meth:`_route_rows`
        would do row by row: every row a valid message of an admitted destination, not a
        replay (which checks each row against what landed). The stretches end where a row fills
        the outbox, which is then flushed, as row by row: the same groups, order, numbering
        and flushes. Returns the row it stopped at: 0 when the batch is not such, an earlier row
        than the last when a flush opened a destination's breaker (its rows are refused from
        then on, row by row)."""
        if enc.invalid or self.outbox.scan or None in enc.streams or None in enc.topics:
            return 0
        streams, topics = cast("list[str]", enc.streams), cast("list[str]", enc.topics)
        known = self.destinations
        pairs = {pair: known.get(pair) or known.setdefault(pair, Destination(*pair))
                 for pair in dict.fromkeys(zip(streams, topics, strict=True))}  # in row order
        if any(self.verdict(destination) is not None for destination in pairs.values()):
            return 0
        partitions = self._partitions(enc.partitioning, zip(streams, topics, strict=True),
                                      pairs)
        if partitions is None:
            return 0
        rows = len(enc)
        if len(pairs) == 1 and isinstance(partitions, repeat):
            groups: list[Group] = [(next(iter(pairs.values())), None)] * rows
        else:
            groups = [(pairs[stream, topic], partition) for stream, topic, partition
                      in zip(streams, topics, partitions, strict=False)]  # partitions may repeat
        outbox, limit = self.outbox, self.options.max_batch_bytes
        payloads, headers, ids = enc.payloads, enc.headers, enc.ids
        ends = list(accumulate(map(len, payloads), initial=0))  # ends[i]: bytes before row i
        start = 0
        while start < rows:
            # the row whose payload fills the outbox ends the stretch: then it is flushed
            end = min(bisect_left(ends, ends[start] + limit - outbox.buffered, start + 1,
                                  rows + 1), rows)
            outbox.add_rows(groups[start:end], payloads[start:end], headers[start:end],
                            ids[start:end])
            start = end
            if outbox.full:
                outbox.flush()
                if any(self.verdicts[d] is not None for d in pairs.values()):
                    return start
        return start

    def _partitions(self, parts: list[bytes | int | None], named: Iterable[tuple[str, str]],
                    pairs: dict[tuple[str, str], Destination]) -> Iterable[int | None] | None:
        """Each row's partition, as :meth:`_route_rows` picks it (``named``: each row's
        stream and topic); ``None`` when a row's partition id is refused (row by row then)."""
        if parts.count(None) == len(parts):
            return repeat(None)
        counts = {pair: self.touched[d].partitions_count for pair, d in pairs.items()}
        if self.options.partition_key_encoding.value == "partition_id":
            ids = cast("list[int | None]", parts)
            if any(p is not None and check_partition_id(p, counts[pair]) is not None
                   for p, pair in zip(ids, named, strict=True)):
                return None
            return ids
        keys = cast("list[bytes | None]", parts)
        return [None if key is None else partition_for_key(key, counts[pair])
                for key, pair in zip(keys, named, strict=True)]

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
        reason: Reason = (DeliveryReason.TOO_LARGE if isinstance(error, PayloadTooLarge)
                          else DeliveryReason.INVALID_ROW)
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
        self.verdicts[destination] = DeliveryReason.CIRCUIT_OPEN  # the rest of this task's rows
        self.refuse(destination, DeliveryReason.CIRCUIT_OPEN, messages)

    def finish(self) -> TaskReport:
        self.outbox.flush()
        self.report.admitted = [tuple(d) for d in self.admission.newly_admitted]  # type: ignore[misc]
        snapshots = self.board.snapshot()
        for destination in self.board.recorded:
            self.report.breakers[str(destination)] = snapshots[destination].to_dict()
        return self.report


