"""The broker side of the benchmarks: a fresh local broker per measurement, destinations made
before the clock starts, and counts read back through the SDK to prove every message arrived.

A broker keeps every message in memory and the local broker cannot delete streams, so each
measurement gets a fresh one (``LocalIggy(process=True)``: its own process, as a real broker
would be, so its CPU is not the benchmark's). Reading back uses :mod:`iggy_spark_testing.readback`,
which polls exactly as a consumer would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench.handwritten import sdk_client
from iggy_spark.sink import topic_request
from iggy_spark.sink.options import TopicDefaults
from iggy_spark_testing import readback

if TYPE_CHECKING:
    from apache_iggy import ReceiveMessage

    from iggy_local import LocalIggy

__all__ = [
    "RoundBrokers",
    "create_destinations",
    "expect_messages",
    "fresh_broker",
    "messages_in",
    "poll",
]


def fresh_broker() -> LocalIggy:
    """A started broker in its own process; the caller stops it."""
    from iggy_local import LocalIggy

    return LocalIggy(process=True).start()


def create_destinations(address: str, stream: str, topics: Sequence[str]) -> None:
    """Create ``stream`` and its one-partition ``topics`` (untimed set-up)."""

    async def main() -> None:
        client = await sdk_client(address)
        await client.create_stream(stream)
        for topic in topics:
            await topic_request.create_topic(client, stream, topic, TopicDefaults(1))

    asyncio.run(main())


def messages_in(address: str, stream: str, topics: Sequence[str]) -> int:
    """How many messages the broker holds in these topics."""

    async def main() -> int:
        client = await sdk_client(address)
        total = 0
        for topic in topics:
            details = await client.get_topic(stream, topic)
            total += 0 if details is None else int(details.messages_count)
        return total

    return asyncio.run(main())


def expect_messages(address: str, stream: str, topics: Sequence[str], expected: int) -> None:
    """Fail unless exactly ``expected`` messages arrived in ``stream``'s ``topics``."""
    arrived = messages_in(address, stream, topics)
    if arrived != expected:
        raise AssertionError(f"{stream}: {arrived} messages arrived, not {expected}")


class RoundBrokers:
    """One fresh broker per round of :func:`bench.common.paired_rounds` (pass :meth:`start` as
    its ``setup``), shared by the round's contenders, each sending to its own stream (created
    here with ``topics``)."""

    def __init__(self, streams: Sequence[str], topics: Sequence[str]) -> None:
        self.streams = streams
        self.topics = topics
        self._current: LocalIggy | None = None

    def start(self, _round: int) -> None:
        """Stop the previous round's broker, start this round's, create the destinations."""
        self.close()
        self._current = fresh_broker()
        for stream in self.streams:
            create_destinations(self._current.address, stream, self.topics)

    @property
    def current(self) -> LocalIggy:
        assert self._current is not None, "RoundBrokers.start was not called"
        return self._current

    def close(self) -> None:
        if self._current is not None:
            self._current.stop()
            self._current = None


def poll(address: str, stream: str, topic: str) -> list[ReceiveMessage]:
    """Every message of a topic (with its broker timestamp), as a consumer polls it."""

    async def main() -> list[ReceiveMessage]:
        client = await sdk_client(address)
        details = await client.get_topic(stream, topic)
        assert details is not None, f"no topic {stream}/{topic}"
        messages: list[ReceiveMessage] = []
        for partition in details.partitions:
            messages += await readback.apoll_partition(client, stream, topic, partition.id)
        return messages

    return asyncio.run(main())
