"""The sink's conversation with Iggy: make sure a destination exists, and send to it.

A destination is named by a row, so its names are looked up and created as names
(:mod:`iggy_spark.names`) and every call after that is made with the numeric ids the server gave
them (:class:`Topic`): the SDK reads a name of digits given as text as an id, and ``"1"`` would
otherwise be the stream with id 1, whatever its name.

A *disconnection* is retried until ``send_timeout`` (:mod:`iggy_spark.failures`); the one
distinction of the sink's own is drawn here and nowhere else: *already exists* on create (by
the SDK error's code, :func:`iggy_spark.sdk.error_code`) is success, so tasks racing to create
one destination all win.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iggy_spark import names, sdk
from iggy_spark.connection import IggyConnection
from iggy_spark.errors import DestinationError, SendError, ServerError, UnknownDestination
from iggy_spark.failures import Disconnected, retrying
from iggy_spark.sink.admission import Destination
from iggy_spark.sink.delivery import ORIGIN_HEADER, Landed, Origin, TailScan, landed_count
from iggy_spark.sink.options import TopicDefaults
from iggy_spark.sink.topic_request import create_topic

if TYPE_CHECKING:
    import apache_iggy

__all__ = [
    "Topic", "ensure_topic", "find_stream", "find_topic", "landed", "list_topics", "prewarm",
    "send",
]


@dataclass(frozen=True)
class Topic:
    """What the sink needs to know about a destination topic: where it is, by the ids the
    server gave its names, and how many partitions it has."""

    stream_id: int
    topic_id: int
    partitions_count: int
    created: bool


async def _create(call: Awaitable[Any]) -> bool:
    """Run a create call; ``False`` if it already existed (someone else won the race)."""
    try:
        await call
    except RuntimeError as exc:
        if sdk.error_code(exc) in sdk.ALREADY_EXISTS:
            return False
        raise
    return True


async def list_topics(conn: IggyConnection, stream: str, *, timeout: float) -> dict[str, Topic]:
    """Every topic of the stream named ``stream`` by name, in two requests (empty when the
    stream does not exist): a task meeting many topics of one stream learns them all at once
    instead of one round trip each. Failures raise as from :func:`ensure_topic`'s lookups."""

    async def attempt(client: apache_iggy.IggyClient) -> dict[str, Topic]:
        found = await names.stream_id(client, stream)
        if found is None:
            return {}
        return {str(t.name): Topic(found, int(t.id), int(t.partitions_count), False)
                for t in await client.get_topics(found)}

    return await retrying(conn, attempt, timeout)


async def _find(client: apache_iggy.IggyClient, destination: Destination) -> Topic | None:
    stream = await names.stream_id(client, destination.stream)
    found = None if stream is None else await names.topic(client, stream, destination.topic)
    return None if stream is None or found is None else Topic(
        stream, found.id, found.partitions_count, False)


async def find_stream(conn: IggyConnection, stream: str, *, timeout: float) -> int | None:
    """The id of the stream named ``stream`` if it exists; never creates anything."""
    return await retrying(conn, lambda client: names.stream_id(client, stream), timeout)


async def find_topic(conn: IggyConnection, destination: Destination, *,
                     timeout: float) -> Topic | None:
    """The destination's topic if it exists, by name; never creates anything."""
    return await retrying(conn, lambda client: _find(client, destination), timeout)


async def ensure_topic(
    conn: IggyConnection,
    destination: Destination,
    *,
    create: bool,
    defaults: TopicDefaults,
    timeout: float,
) -> Topic:
    """The destination's topic, created (stream first) if missing and ``create`` allows it.

    Idempotent and race-free: *already exists* from a parallel task counts as success, and the
    ids and partition count are always read back from the server by name, whoever created the
    topic.
    """
    stream, topic = destination

    async def attempt(client: apache_iggy.IggyClient) -> Topic:
        found = await _find(client, destination)
        if found is not None:
            return found
        if not create:
            raise UnknownDestination(stream, topic, "does not exist and create_destinations "
                                   "is false: create it, or allow the sink to")
        stream_id = await names.stream_id(client, stream)
        if stream_id is None:
            await _create(client.create_stream(stream))  # takes a name, never an id
            stream_id = await names.stream_id(client, stream)
        found, created = None, False
        if stream_id is not None:
            created = await _create(create_topic(client, stream_id, topic, defaults))
            found = await _find(client, destination)
        if found is None:
            raise DestinationError(stream, topic, "was created but cannot be read back")
        return Topic(found.stream_id, found.topic_id, found.partitions_count, created)

    try:
        return await retrying(conn, attempt, timeout)
    except (DestinationError, Disconnected, ServerError):
        raise
    except Exception as exc:
        raise DestinationError(stream, topic, f"could not be created or read: {exc}") from exc


async def prewarm(
    conn: IggyConnection,
    destinations: Sequence[Destination],
    *,
    create: bool,
    defaults: TopicDefaults,
    deadline: float,
) -> dict[Destination, Topic | BaseException]:
    """:func:`ensure_topic` for every destination at once, for at most ``deadline`` seconds.

    Never raises: each destination maps to its topic or to what went wrong (a
    :class:`TimeoutError` for those not ready in time), for the caller to log.
    """
    tasks = {d: asyncio.ensure_future(ensure_topic(conn, d, create=create, defaults=defaults,
                                                   timeout=deadline))
             for d in destinations}
    if tasks:
        await asyncio.wait(tasks.values(), timeout=deadline)
    outcome: dict[Destination, Topic | BaseException] = {}
    for destination, task in tasks.items():
        if not task.done():
            task.cancel()
            outcome[destination] = TimeoutError(f"not ready within {deadline:g}s")
        elif task.exception() is not None:
            outcome[destination] = task.exception()  # type: ignore[assignment]
        else:
            outcome[destination] = task.result()
    return outcome


async def send(
    conn: IggyConnection,
    destination: Destination,
    where: Topic,
    partition: int | None,
    messages: Sequence[apache_iggy.SendMessage],
    *,
    timeout: float,
    first: Origin | None = None,
    scan_limit: int = 0,
) -> tuple[int, bool]:
    """Send ``messages`` in order to one partition (``None``: let the server balance) of
    ``destination``, found at ``where``.

    A send that failed with the connection may have landed all the same. With ``first`` (the
    origin of ``messages[0]``: effectively-once delivery) each retry first reads the
    partition's tail and sends nothing if the send landed (it lands whole or not at all);
    returns how many messages it so found already landed, and whether a retry could not decide
    within ``scan_limit`` (then it sent them again: at-least-once).
    """
    import apache_iggy

    partitioning = (apache_iggy.Partitioning.balanced() if partition is None
                    else apache_iggy.Partitioning.partition_id(partition))
    batch = list(messages)
    state = {"attempts": 0, "skipped": 0, "undecided": False}

    async def attempt(client: apache_iggy.IggyClient) -> None:
        state["attempts"] += 1
        if first is not None and state["attempts"] > 1:
            done = await _tail_count(client, where, partition, first, scan_limit)
            if done is None:
                state["undecided"] = True
            elif done >= first.seq + len(batch):  # a send lands whole: all of it, or none
                state["skipped"] = len(batch)
                return
        await client.send_messages(where.stream_id, where.topic_id, partitioning, batch)

    try:
        await retrying(conn, attempt, timeout)
    except (Disconnected, ServerError):
        raise
    except Exception as exc:
        raise SendError(destination.stream, destination.topic, str(exc)) from exc
    return int(state["skipped"]), bool(state["undecided"])

_SCAN_PAGE = 1000


def _origin(message: apache_iggy.ReceiveMessage) -> Origin | None:
    headers = message.user_headers()
    if not headers:
        return None
    return Origin.decode(headers.to_scalar_dict().get(ORIGIN_HEADER))


async def _tails(
    client: apache_iggy.IggyClient, where: Topic, partition: int | None, limit: int
) -> AsyncIterator[AsyncIterator[list[apache_iggy.ReceiveMessage]]]:
    """For each partition of the group (``None``: every partition), its tail as pages of at
    most :data:`_SCAN_PAGE` messages, newest page first and each page newest message first,
    at most ``limit`` messages each. Polls by offset (never a consumer offset: reading changes
    nothing on the server). A partition's pages raise :class:`_ScanBound` where ``limit`` cut
    them before its start."""
    import apache_iggy

    consumer = apache_iggy.Consumer.Single("iggy-spark-delivery")
    details = await client.get_topic(where.stream_id, where.topic_id)
    if details is None:
        return  # nothing can have landed in a topic that does not exist

    async def pages(p: Any) -> AsyncIterator[list[apache_iggy.ReceiveMessage]]:
        end, scanned = p.current_offset + 1, 0
        while end > 0:
            if scanned >= limit:
                raise _ScanBound
            start = max(0, end - min(_SCAN_PAGE, limit - scanned))
            page = await client.poll_messages(
                where.stream_id, where.topic_id, consumer=consumer,
                polling_strategy=apache_iggy.PollingStrategy.Offset(start),
                count=end - start, auto_commit=False, partition_id=p.id)
            page = [m for m in page if m.offset() < end]
            if not page:
                return  # below the oldest message kept (expired segments): the start
            scanned += len(page)
            end = page[0].offset()
            yield page[::-1]

    for p in details.partitions:
        if (partition is None or p.id == partition) and p.messages_count:
            yield pages(p)


class _ScanBound(Exception):
    """A partition's tail is longer than the scan bound."""


async def _tail_count(
    client: apache_iggy.IggyClient,
    where: Topic,
    partition: int | None,
    me: Origin,
    limit: int,
) -> int | None:
    """:func:`~iggy_spark.sink.delivery.landed_count` over the group's partitions (the longest
    prefix); ``None``: undecided within ``limit``."""
    found = 0
    async for tail in _tails(client, where, partition, limit):
        verdict: int | None = None
        try:
            async for page in tail:
                verdict = landed_count(map(_origin, page), me)
                if verdict is not None:
                    break
        except _ScanBound:
            return None
        found = max(found, verdict or 0)
    return found


async def _tail_ids(
    client: apache_iggy.IggyClient,
    where: Topic,
    partition: int | None,
    me: Origin,
    limit: int,
) -> Landed:
    """The group's messages found in its partitions' tails (:class:`~iggy_spark.sink.delivery
    .TailScan`), at most ``limit`` messages read per partition."""
    landed = Landed()
    async for tail in _tails(client, where, partition, limit):
        scan = TailScan(me, landed)
        try:
            async for page in tail:
                if scan.feed((_origin(m), m.id()) for m in page):
                    break
        except _ScanBound:
            pass
    return landed


async def landed(
    conn: IggyConnection,
    destination: Destination,
    where: Topic,
    partition: int | None,
    me: Origin,
    *,
    limit: int,
    timeout: float,
    ids: bool,
) -> Landed | None:
    """What ``me``'s group (query, batch, task) already landed, from the tails of the
    partitions of ``destination``, found at ``where``.

    With ``ids`` every message of the group found, by id (the whole group's if
    :attr:`~iggy_spark.sink.delivery.Landed.complete`); otherwise only how many landed (its
    newest mark), or ``None`` when that is undecided within ``limit`` messages per partition.
    ``partition=None`` (the server balanced the group's sends) reads every partition.
    """

    async def read(client: apache_iggy.IggyClient) -> Landed | None:
        if ids:
            return await _tail_ids(client, where, partition, me, limit)
        count = await _tail_count(client, where, partition, me, limit)
        return None if count is None else Landed(count)

    try:
        return await retrying(conn, read, timeout)
    except (Disconnected, ServerError):
        raise
    except Exception as exc:
        raise SendError(destination.stream, destination.topic,
                        f"could not read the partition tail back: {exc}") from exc
