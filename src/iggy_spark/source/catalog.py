"""What the driver asks the server when it plans: the subscribed partitions and their offsets.

Run on the driver (``initialOffset``, ``latestOffset``, ``partitions``) over the process's shared
connection; nothing here reads messages except one message per new partition, to learn where
it starts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from iggy_spark.connection import IggyConnection
from iggy_spark.errors import ConfigError, show
from iggy_spark.failures import retrying
from iggy_spark.source.offsets import Position
from iggy_spark.source.options import SourceOptions

if TYPE_CHECKING:
    import apache_iggy

__all__ = [
    "CALL_SECONDS", "Tail", "at_timestamp", "call", "consumer", "earliest", "holds", "latest",
    "report", "tails",
]

T = TypeVar("T")

CALL_SECONDS = 30.0
"""How long one planning or polling call may wait for an unreachable server."""


def submit(
    options: SourceOptions, work: Callable[[apache_iggy.IggyClient], Awaitable[T]]
) -> Future[T]:
    """Start ``work(client)`` on this process's connection, retried across disconnections."""
    conn = IggyConnection.shared(options.url)
    return conn.submit(retrying(conn, work, CALL_SECONDS))


def call(options: SourceOptions, work: Callable[[apache_iggy.IggyClient], Awaitable[T]]) -> T:
    """``work(client)`` on this process's connection, retried across disconnections."""
    return submit(options, work).result()


CONSUMER = "iggy-spark-source"
"""The consumer polls name: polls are by offset, so nothing is stored under it."""


def consumer() -> Any:
    """:data:`CONSUMER` as the SDK's consumer."""
    import apache_iggy

    return apache_iggy.Consumer.Single(CONSUMER)


class Tail(NamedTuple):
    """Where a partition ends now, and what its messages weigh."""

    next: int
    """One past its newest message (0 while empty)."""
    message_bytes: int
    """Its stored bytes per message on average (0 while empty): what admission by
    ``max_bytes_per_trigger`` charges for each of its messages."""


def latest(options: SourceOptions) -> dict[Position, int]:
    """Each subscribed partition's next offset (one past its newest message), now.

    Raises :class:`ConfigError` for a stream or a listed topic that does not exist.
    """
    return {position: tail.next for position, tail in tails(options).items()}


def tails(options: SourceOptions, known: Collection[str] = ()) -> dict[Position, Tail]:
    """Each subscribed partition's :class:`Tail`, now (errors as :func:`latest`).

    A listed topic in ``known`` (one the query has read) that no longer exists is left out, as
    is a topic the pattern matched that was deleted before its details were read: whether its
    partitions' loss fails the query is ``fail_on_data_loss``'s to decide.
    """

    async def work(client: apache_iggy.IggyClient) -> dict[Position, Tail]:
        if await client.get_stream(options.stream) is None:
            raise ConfigError("stream", f"stream {show(options.stream)} does not exist")
        if options.topics is not None:
            names: Iterable[str] = options.topics
        else:
            names = sorted(str(t.name) for t in await client.get_topics(options.stream)
                           if options.wants(str(t.name)))
        found: dict[Position, Tail] = {}
        for name in names:
            details = await client.get_topic(options.stream, name)
            if details is None:
                if options.topics is None or name in known:
                    continue
                raise ConfigError("topics", f"topic {show(name)} does not exist in stream "
                                            f"{show(options.stream)}")
            if str(details.name) != name:
                # digits read as a topic id, by the SDK and the polls alike: reading on would
                # label another topic's messages with this name
                raise ConfigError(
                    "topics" if options.topics is not None else "topic_pattern",
                    f"{show(name)} reads as a topic id, and names topic {show(details.name)}; "
                    "Iggy's clients cannot address a topic named with digits only: list topics "
                    "by name, and leave such topics out of the pattern")
            for p in details.partitions:
                count = int(p.messages_count)
                filled = count or p.current_offset
                found[Position(name, int(p.id))] = Tail(
                    int(p.current_offset) + 1 if filled else 0,
                    -(-int(p.size) // count) if count else 0)
        return found

    return call(options, work)


def holds(options: SourceOptions, position: Position) -> bool:
    """Whether the stream still has ``position``'s topic and partition."""

    async def work(client: apache_iggy.IggyClient) -> bool:
        if await client.get_stream(options.stream) is None:
            return False
        details = await client.get_topic(options.stream, position.topic)
        return details is not None and any(
            int(p.id) == position.partition for p in details.partitions)

    return call(options, work)


def earliest(options: SourceOptions, positions: Iterable[Position]) -> dict[Position, int]:
    """The oldest offset each partition still holds (left out when it is empty)."""
    import apache_iggy

    return _first(options, positions, apache_iggy.PollingStrategy.First())


def at_timestamp(
    options: SourceOptions, positions: Iterable[Position], micros: int
) -> dict[Position, int]:
    """Each partition's first offset appended at or after ``micros`` (µs since the epoch); left
    out when the partition has nothing that recent."""
    import apache_iggy

    return _first(options, positions, apache_iggy.PollingStrategy.Timestamp(micros))


def _first(options: SourceOptions, positions: Iterable[Position], strategy: Any) -> dict[
        Position, int]:
    """The offset of the first message ``strategy`` polls in each partition, if any."""
    wanted = sorted(positions)

    async def work(client: apache_iggy.IggyClient) -> dict[Position, int]:
        found: dict[Position, int] = {}
        for position in wanted:
            messages = await client.poll_messages(
                options.stream, position.topic, consumer=consumer(),
                polling_strategy=strategy, count=1, auto_commit=False,
                partition_id=position.partition)
            if messages:
                found[position] = int(messages[0].offset())
        return found

    return call(options, work) if wanted else {}


def report(options: SourceOptions, name: str, offsets: Mapping[Position, int]) -> None:
    """Store ``offsets`` (next offsets) as consumer ``name``'s position, for monitoring: the
    last message read (``next - 1``), as the server's own consumers store it; partitions not
    read yet are left alone."""
    from iggy_spark.source import wire

    async def work(client: apache_iggy.IggyClient) -> None:
        for position, next_offset in sorted(offsets.items()):
            if next_offset > 0:
                body = wire.store_offset_request(name, options.stream, position.topic,
                                                 position.partition, next_offset - 1)
                await client.send_binary_request(wire.STORE_CONSUMER_OFFSET, body)

    call(options, work)


def forget(options: SourceOptions, name: str) -> list[Position]:
    """Delete the offsets consumer ``name`` stored in the subscribed partitions (what
    ``report_consumer=name`` left behind); the partitions it had any in."""
    from iggy_spark.source import wire

    positions = sorted(tails(options))

    async def work(client: apache_iggy.IggyClient) -> list[Position]:
        deleted = []
        for position in positions:
            target = (name, options.stream, position.topic, position.partition)
            if await client.send_binary_request(wire.GET_CONSUMER_OFFSET,
                                                wire.offset_request(*target)):
                await client.send_binary_request(wire.DELETE_CONSUMER_OFFSET,
                                                 wire.delete_offset_request(*target))
                deleted.append(position)
        return deleted

    return call(options, work)
