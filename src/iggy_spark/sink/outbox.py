"""A write task's outbox: messages buffered per (destination, partition) group, numbered for
effectively-once delivery, and sent in order.

Sending is the only thing done here. Which destination a row goes to, whether it is admitted,
and where refused messages go are the task's business (:mod:`iggy_spark.sink.task`): the outbox
hands back what a destination's breaker refused, and the task routes it (to the dead-letter
queue, or fails). Each group is sent chunk by chunk, a chunk only once the previous one was
acknowledged; a chunk a destination refuses is retried with backoff while the other groups go
on.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, nullcontext, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from iggy_spark.connection import IggyConnection
from iggy_spark.errors import SendError, ServerError
from iggy_spark.failures import Disconnected
from iggy_spark.sink import delivery, sending
from iggy_spark.sink.admission import Destination
from iggy_spark.sink.breaker import BreakerBoard, BreakerState
from iggy_spark.sink.delivery import ORIGIN_HEADER, Origin
from iggy_spark.sink.logs import warn
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.sink.report import TaskReport

if TYPE_CHECKING:
    import apache_iggy

__all__ = ["Group", "Headers", "Message", "Outbox", "backoff"]

MESSAGES_PER_SEND = 5000
_BACKOFF_FIRST, _BACKOFF_MAX = 0.1, 2.0  # seconds between retries of a refused send

Group = tuple[Destination, int | None]
Headers = dict[str, str | bytes]
Message = tuple[bytes, Headers | None, int]  # payload, user headers, id (0: none)
Refused = Callable[[Destination, list[Message]], None]


class _Kept:
    """A group's messages as they were buffered (payload, user headers, id), kept column by
    column: a stretch of rows is kept by three list extends where a tuple per row cost about
    as much as making its SDK message. Read back only where needed: the last message of each
    send (for the origin header) and a tail an open breaker refused."""

    __slots__ = ("headers", "ids", "payloads")

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.headers: list[Headers | None] = []
        self.ids: list[int] = []

    def __len__(self) -> int:
        return len(self.payloads)

    def __iter__(self) -> Iterator[Message]:
        return zip(self.payloads, self.headers, self.ids, strict=True)

    def __getitem__(self, index: int) -> Message:
        return self.payloads[index], self.headers[index], self.ids[index]

    def append(self, payload: bytes, headers: Headers | None, message_id: int) -> None:
        self.payloads.append(payload)
        self.headers.append(headers)
        self.ids.append(message_id)

    def extend(self, payloads: list[bytes], headers: list[Headers | None], ids: list[int]) -> None:
        self.payloads.extend(payloads)
        self.headers.extend(headers)
        self.ids.extend(ids)

    def since(self, start: int) -> list[Message]:
        """The messages from ``start`` on."""
        return list(zip(self.payloads[start:], self.headers[start:], self.ids[start:],
                        strict=True))


def backoff(attempt: int) -> float:
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


class Outbox:
    """One task's buffered messages, numbered per group, sent by :meth:`flush`.

    ``refused`` is called with the messages a destination's breaker refused during a flush;
    it may :meth:`add` them elsewhere (the DLQ), and the same flush sends those too.
    ``where`` gives each destination's :class:`~iggy_spark.sink.sending.Topic`, the ids its
    messages are sent to (the task found it by name when it admitted the destination).
    """

    def __init__(
        self,
        options: RoutedOptions,
        board: BreakerBoard,
        report: TaskReport,
        origin: Origin | None,
        scan: bool,
        refused: Refused,
        where: Callable[[Destination], sending.Topic],
    ) -> None:
        import apache_iggy

        self.options = options
        self.conn = IggyConnection.shared(options.url)
        self.board = board
        self.report = report
        self.refused = refused
        self.where = where
        # Messages are built once, when buffered (the event loop then only sends); the raw
        # parts stay beside them in case the destination's breaker opens and they must be
        # dead-lettered (an SDK message cannot be read back).
        self.groups: dict[Group, list[apache_iggy.SendMessage]] = defaultdict(list)
        self.raw: dict[Group, _Kept] = defaultdict(_Kept)
        self.buffered = 0
        self._message = apache_iggy.SendMessage
        # Effectively-once delivery: each group numbers the messages it sends; in a replay
        # (``scan``) each group first reads what landed before, skips it and numbers on.
        self.origin = origin
        self.scan = scan
        self.prefix = None if origin is None else f"{origin.query}:{origin.batch}:{origin.task}:"
        self.keyed = False  # rows carry message ids: a replay skips by id, not by count
        self.text = False  # payloads are UTF-8 text: the SDK's messages are made from str
        self.seqs: dict[Group, int] = {}
        self.rows: dict[Group, int] = defaultdict(int)  # rows of the group routed so far
        self.landed: dict[Group, delivery.Landed] = {}
        self.first_seq: dict[Group, int] = {}

    @property
    def full(self) -> bool:
        """``max_batch_bytes`` of payloads are buffered: time to :meth:`flush`."""
        return self.buffered >= self.options.max_batch_bytes

    def add(self, group: Group, payload: bytes, headers: Headers | None, message_id: int) -> None:
        """Buffer one message in its group (in a replay, count it instead if it landed)."""
        if self.prefix is not None:
            if self.scan and self._landed_before(group, message_id):
                self.report.resumed += 1
                self.report.routed[str(group[0])] += 1
                return
            seq = self.seqs.get(group, 0)
            self.seqs[group] = seq + 1
            if group not in self.groups:
                self.first_seq[group] = seq
        self.groups[group].append(self._message(self._data(payload), headers, message_id or None))
        self.raw[group].append(payload, headers, message_id)
        self.buffered += len(payload)

    def add_rows(self, groups: list[Group], payloads: list[bytes],
                 headers: list[Headers | None], ids: list[int]) -> None:
        """Buffer consecutive rows, each in its group (``groups``), as :meth:`add` one by one
        would (not in a replay, which checks each against what landed)."""
        assert not self.scan
        counts = Counter(groups)  # the groups in the order the rows name them
        if self.prefix is not None:
            for group, count in counts.items():
                seq = self.seqs.get(group, 0)
                self.seqs[group] = seq + count
                if group not in self.groups:
                    self.first_seq[group] = seq
        data: list[bytes] | list[str] = payloads
        if self.text:
            with suppress(UnicodeDecodeError):
                data = list(map(bytes.decode, payloads))
        messages = map(self._message, data, headers, [message_id or None for message_id in ids])
        if len(counts) == 1:
            self.groups[groups[0]].extend(messages)
            self.raw[groups[0]].extend(payloads, headers, ids)
        else:
            buffered, kept = self.groups, self.raw
            for group, message, payload, header, message_id in zip(
                    groups, messages, payloads, headers, ids, strict=True):
                buffered[group].append(message)
                parts = kept[group]  # _Kept.append inlined: a call per row costs more
                parts.payloads.append(payload)
                parts.headers.append(header)
                parts.ids.append(message_id)
        self.buffered += sum(map(len, payloads))

    def _data(self, payload: bytes) -> bytes | str:
        """A payload as the SDK's message takes it fastest: text as ``str``, which it sends as
        the same UTF-8 bytes (it tries ``str`` first: a ``bytes`` payload costs it a failed
        conversion, about 0.7 µs, most of what making a message costs)."""
        if self.text:
            try:
                return payload.decode()
            except UnicodeDecodeError:
                pass
        return payload

    def _landed_before(self, group: Group, message_id: int) -> bool:
        """Whether this row of a replay landed in an earlier attempt (see
        :mod:`iggy_spark.sink.delivery`): by id when rows carry ids, else by its place in the group.
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
            self.conn, destination, self.where(destination), partition, self.origin, limit=limit,
            timeout=self.options.send_timeout, ids=self.keyed))
        where = (f"replay of batch {self.origin.batch}, task {self.origin.task}, "
                 f"{destination} partition {partition}")
        if found is None or not found.trusted:
            self.report.at_least_once += 1
            warn(f"iggy_routed: {where}: cannot tell what landed within the last {limit} "
                 "messages (delivery_scan_messages), or a later batch of this query is "
                 "there already; sending the group again in full (at-least-once)")
            return delivery.Landed()
        if self.keyed and not found.complete:
            self.report.at_least_once += 1
            warn(f"iggy_routed: {where}: found {len(found.covered)} of the {found.count} "
                 f"messages that landed within the last {limit} (delivery_scan_messages); "
                 "the others are sent again (at-least-once)")
        return found

    def flush(self) -> None:
        """Send every buffered group and wait for all acknowledgements (or fail the task).

        Messages a destination's breaker refused meanwhile go to ``refused``; whatever that
        adds (dead letters) is sent in the same call, so the task never reports a message that
        is not safely somewhere.
        """
        while self.groups:
            groups, raw, first = self.groups, self.raw, self.first_seq
            self.groups, self.raw, self.buffered = defaultdict(list), defaultdict(_Kept), 0
            self.first_seq = {}
            where = {d: self.where(d) for d, _ in groups}  # before the loop: it may look up
            outcomes = self.conn.run(self._send_all(groups, raw, first, where))
            failure: BaseException | None = None
            refused: dict[Destination, list[Message]] = defaultdict(list)
            for (destination, _), outcome in zip(groups, outcomes, strict=True):
                if outcome.sent:
                    self.report.routed[str(destination)] += outcome.sent
                self.report.resumed += outcome.resumed
                self.report.at_least_once += outcome.undecided
                failure = failure or outcome.error
                if outcome.refused:
                    refused[destination].extend(outcome.refused)
            if failure is not None:
                raise failure
            for destination, messages in refused.items():
                self.refused(destination, messages)

    async def _send_all(
        self, groups: dict[Group, list[apache_iggy.SendMessage]], raw: dict[Group, _Kept],
        first: dict[Group, int], where: dict[Destination, sending.Topic],
    ) -> list[_Outcome]:
        gate = asyncio.Semaphore(self.options.max_concurrent_destinations)
        # A destination on probation (half-open) sends one group at a time: the first is the
        # probe, and the others go only once it closed the breaker.
        probing = {d: asyncio.Lock() for d, _ in groups
                   if self.board.state(d) is BreakerState.HALF_OPEN}
        return list(await asyncio.gather(*(
            self._send_group(d, where[d], p, m, raw[d, p], gate,
                             probing.get(d) or nullcontext(), first.get((d, p)))
            for (d, p), m in groups.items()
        )))

    async def _send_group(
        self, destination: Destination, topic: sending.Topic, partition: int | None,
        messages: list[apache_iggy.SendMessage], raw: _Kept,
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
                    outcome.refused = raw.since(outcome.sent)
                    break
                chunk = messages[outcome.sent:outcome.sent + MESSAGES_PER_SEND]
                first = (None if self.origin is None or first_seq is None
                         else self.origin._replace(seq=first_seq + outcome.sent))
                if first is not None:
                    chunk = self._marked(chunk, raw[outcome.sent + len(chunk) - 1],
                                         first.seq + len(chunk) - 1)
                try:
                    async with gate:
                        resumed, undecided = await sending.send(
                            self.conn, destination, topic, partition, chunk, timeout=timeout,
                            first=first, scan_limit=self.options.delivery_scan_messages)
                except SendError as exc:
                    attempt += 1
                    if destination == self.options.dlq:
                        outcome.error = exc  # nowhere left to park these rows
                        break
                    if not self.board.record_failed_attempt(destination, str(exc), attempt):
                        await asyncio.sleep(backoff(attempt))
                    continue
                except (Disconnected, ServerError) as exc:
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
        message it would cost the SDK a header conversion per message."""
        assert self.prefix is not None
        payload, headers, message_id = last
        origin: Headers = {ORIGIN_HEADER: f"{self.prefix}{seq}:{len(chunk)}"}
        return [*chunk[:-1], self._message(payload, {**headers, **origin} if headers else origin,
                                           message_id or None)]
