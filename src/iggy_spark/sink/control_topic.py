"""A query's state in Iggy: its control topic, read and appended by the driver and every task
through a :class:`ControlTopic` (the I/O; what the records are and mean, without any, is
:mod:`iggy_spark.sink.control_records`).

Where a checkpoint lives (a local folder, ``s3a://``, ``abfss://``) and which host a task runs
on do not matter: every task already reaches Iggy with the sink's own connection. Each query
has one topic, ``<state_stream>/query-<query id>``, with one partition, holding the records of
:mod:`iggy_spark.sink.control_records`. Costs per task: one topic lookup, one poll of the tail
back to the newest ledger (usually a page), one append; per committed batch: the same read and
one append of the ledger. Nothing is ever updated in place, so a crash between two writes loses
nothing: the newest ledger stays the newest until a newer one has landed whole.

Retention: records older than the newest ledger are never read again. The topic grows by one
ledger plus one small record per task and per breaker probe for every batch, and is created
bounded by size, never by age (a quiet query must keep its ledger): segments of
:data:`SEGMENT_SIZE`, at most :data:`MAX_SIZE` in all. Iggy's retention deletes whole sealed
segments, oldest first, while the topic is over its size, and never the open one. The newest
ledger's segment goes only when it and the segments after it exceed the bound; it holds at
most one segment plus one record (a ledger is one message of at most ``MAX_MESSAGE_BYTES``),
and what follows it is one batch's small records (a few MB even for thousands of tasks
retried many times), so a ``MAX_SIZE`` above three segments and the largest message can never
drop it, whether the server counts the open segment in the size or only the sealed ones.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connector_common.checkpoints import local_checkpoint
from iggy_spark import names
from iggy_spark.errors import StateError
from iggy_spark.failures import retrying
from iggy_spark.sink import sending
from iggy_spark.sink.admission import Destination
from iggy_spark.sink.control_records import (
    Admit,
    Claim,
    LedgerRecord,
    Record,
    StateView,
    decode,
    encode,
    fold,
)
from iggy_spark.sink.options import TopicDefaults

if TYPE_CHECKING:
    import apache_iggy

    from iggy_spark.connection import IggyConnection

__all__ = ["MAX_SIZE", "SEGMENT_SIZE", "TOPIC_PREFIX", "ControlTopic", "checkpoint_query_id"]

TOPIC_PREFIX = "query-"
_PAGE = 64
SEGMENT_SIZE = 16 * 2**20
"""The control topic's segment size: 16 MiB (a 512-byte multiple within Iggy's 1 MiB to
1 GiB)."""
MAX_SIZE = 2**30
"""The control topic's bound: 1 GiB, above three segments and the largest message (see the
module's docstring), so the newest ledger is always kept; and not below the servers' default
segment size, which a server may hold a topic's bound to."""
_TOPIC = TopicDefaults(partitions_count=1, message_expiry="never", max_size=MAX_SIZE,
                       segment_size=SEGMENT_SIZE)


def checkpoint_query_id(location: str) -> str | None:
    """Spark's query id from ``<checkpoint>/metadata``, for a checkpoint on a local filesystem
    (a path or a ``file:`` URI); ``None`` if there is none, or the location is remote (pass the
    query id itself then: ``StreamingQuery.id``)."""
    root = local_checkpoint(location)
    if root is None:
        return None
    try:
        first = (root / "metadata").read_text().splitlines()[0]
        return str(json.loads(first)["id"]) or None
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class _Partition:
    stream_id: int
    topic_id: int
    id: int
    end: int  # the offset after its last message


_partitions: dict[Destination, _Partition] = {}
"""Where each control topic's one partition is, as this process last found it (for appends)."""


async def _partition(client: apache_iggy.IggyClient, topic: Destination) -> _Partition | None:
    """The control topic's partition, its stream found by name (``state_stream`` may be a name
    of digits, which the SDK would read as another stream's id); the topic's name, ``query-``
    and Spark's id, is never read as an id."""
    stream = await names.stream_id(client, topic.stream)
    if stream is None:
        return None
    details = await client.get_topic(stream, topic.topic)
    if details is None or str(details.name) != topic.topic:
        return None
    [p] = details.partitions  # created with one: see _TOPIC
    return _Partition(stream, int(details.id), int(p.id),
                      int(p.current_offset) + 1 if p.messages_count else 0)


async def _poll(
    client: apache_iggy.IggyClient, topic: Destination, p: _Partition, start: int, count: int
) -> list[tuple[int, Record | None]]:
    import apache_iggy

    messages = await client.poll_messages(
        p.stream_id, p.topic_id, consumer=apache_iggy.Consumer.Single("iggy-spark-state"),
        polling_strategy=apache_iggy.PollingStrategy.Offset(start), count=count,
        auto_commit=False, partition_id=p.id)
    return [(int(m.offset()), decode(m.payload())) for m in messages]


async def _read_back(client: apache_iggy.IggyClient, topic: Destination) -> StateView | None:
    """Pages of the tail, newest first, until one holds a ledger (or the start)."""
    p = await _partition(client, topic)
    if p is None:
        return None
    pages: list[list[tuple[int, Record | None]]] = []
    end = p.end
    while end > 0:
        start = max(0, end - _PAGE)
        page = [r for r in await _poll(client, topic, p, start, end - start) if r[0] < end]
        if not page:
            break  # below the oldest record kept
        pages.append(page)
        end = page[0][0]
        if any(isinstance(record, LedgerRecord) for _, record in page):
            break
    view = fold(r for page in reversed(pages) for r in page)
    view.end = max(view.end, p.end)
    return view


async def _read_on(client: apache_iggy.IggyClient, topic: Destination, view: StateView) -> None:
    """Fold every record after ``view.end`` into ``view``."""
    p = await _partition(client, topic)
    if p is None:
        raise StateError(str(topic), "was deleted while the batch used it")
    while view.end < p.end:
        page = await _poll(client, topic, p, view.end, min(_PAGE * 16, p.end - view.end))
        if not page:
            break
        fold(page, view)


@dataclass(frozen=True)
class ControlTopic:
    """The control topic of one query, used on ``conn``: every call blocks until it is done,
    retrying what fails for at most ``timeout`` seconds (:func:`~iggy_spark.failures.retrying`).
    """

    conn: IggyConnection
    topic: Destination
    timeout: float

    @classmethod
    def of_query(
        cls, conn: IggyConnection, state_stream: str, query_id: str, *, timeout: float
    ) -> ControlTopic:
        """The control topic of the query ``query_id`` (Spark's id, stable across restarts):
        ``<state_stream>/query-<query id>``."""
        return cls(conn, Destination(state_stream, TOPIC_PREFIX + query_id), timeout)

    def __str__(self) -> str:
        return str(self.topic)

    def read(self) -> StateView | None:
        """The query's state as its control topic says; ``None`` if the topic does not exist."""
        return self.conn.run(retrying(self.conn, lambda client: _read_back(client, self.topic),
                                      self.timeout))

    def create(self) -> None:
        """Create the control topic (and its stream) if missing; a parallel creator is fine."""
        self.conn.run(sending.ensure_topic(self.conn, self.topic, create=True, defaults=_TOPIC,
                                           timeout=self.timeout))

    def append(self, record: Record) -> None:
        """Append one record. A retried append may land twice: every reader tolerates that.

        The partition is looked up once per process and topic; a send that fails looks the
        topic up again, so a deleted topic is still reported as such (and not by the server's
        message text)."""
        self.conn.run(self._append(record))

    def claim(self, view: StateView, run: str, batch: int, destination: Destination) -> bool:
        """Whether this task won the probe of ``destination`` in ``batch`` of the query's
        ``run``.

        Appends a claim, then reads the topic on from ``view`` to see whose claim came first.
        """
        mine = Claim(run, batch, str(destination), uuid.uuid4().hex)
        if (mine.run, mine.batch, mine.destination) in view.claims:
            return False
        self.conn.run(self._append_and_read_on(mine, view))
        return view.won(mine)

    def admit(
        self, view: StateView, seeded: frozenset[str], destination: Destination, cap: int
    ) -> bool:
        """Whether ``destination`` may count against the query's cap of ``cap`` destinations.

        Appends an ``admit``, then reads the topic on from ``view``: the destinations the ledger
        admitted (``seeded``) and those of earlier ``admit`` records take the places before it.
        """
        key = str(destination)
        if key not in view.admits:
            self.conn.run(self._append_and_read_on(Admit(key), view))
        return view.admitted_within(key, seeded, cap)

    async def _append(self, record: Record) -> None:
        import apache_iggy

        topic = self.topic
        message = apache_iggy.SendMessage(encode(record))

        async def send(client: apache_iggy.IggyClient) -> Any:
            p = _partitions.get(topic)
            if p is None:
                p = await _found(client, topic)
            try:
                return await client.send_messages(
                    p.stream_id, p.topic_id, apache_iggy.Partitioning.partition_id(p.id),
                    [message])
            except Exception:
                _partitions.pop(topic, None)
                await _found(client, topic)  # StateError when the topic is gone
                raise

        await retrying(self.conn, send, self.timeout)

    async def _append_and_read_on(self, record: Record, view: StateView) -> None:
        """Append ``record``, then fold every record after ``view.end`` into ``view``."""
        await self._append(record)
        await retrying(self.conn, lambda client: _read_on(client, self.topic, view),
                       self.timeout)


async def _found(client: apache_iggy.IggyClient, topic: Destination) -> _Partition:
    p = await _partition(client, topic)
    if p is None:
        raise StateError(str(topic), "was deleted while the batch used it")
    _partitions[topic] = p
    return p
