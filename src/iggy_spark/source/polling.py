"""The executor's side: poll one offset range and hand it to Spark as Arrow batches.

Polls by offset (never a consumer's stored offset), so reading a range twice, after a crash
or a task retry, reads exactly the same messages; one poll's messages are one Arrow batch, so a
task holds at most two polls' messages at a time: the next poll is on its way (the server and
the SDK's I/O working in other processes and threads) while this thread turns the last reply
into a batch. Polls are sized in bytes (``poll_bytes``): a poll costs a fixed amount besides
its messages, so small messages are fetched many to a poll, and large ones few.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from iggy_spark.connection import sdk_line
from iggy_spark.errors import IggySparkError
from iggy_spark.failures import Disconnected
from iggy_spark.source import catalog, wire
from iggy_spark.source.catalog import CONSUMER, submit
from iggy_spark.source.errors import DataLoss, SourceError, raise_or_skip
from iggy_spark.source.offsets import Position, Range
from iggy_spark.source.options import SourceOptions
from iggy_spark.source.payloads import parsed_batch

if TYPE_CHECKING:
    import apache_iggy

    from iggy_spark.sdk import SdkLine

__all__ = ["read_range"]

_FIRST_POLL = 100
"""Messages in a task's first poll, before their size is known."""


def read_range(
    options: SourceOptions, work: Range, rows: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """Every message of ``work``, in offset order: the message columns, or the payloads parsed
    into ``rows`` (:mod:`~iggy_spark.source.payloads`).

    A gap (the server's oldest message is past where the range starts, or the partition has
    nothing left where it had messages), or a topic or partition deleted since the range was
    planned, is data loss: :class:`DataLoss`, or skipped with ``fail_on_data_loss=false``.
    """
    topic, partition, expected, end = work
    if expected >= end:
        return
    line = sdk_line()  # the layout of every reply on a connection its SDK logged in with
    count = min(options.poll_messages, _FIRST_POLL)
    pending = _poll(options, topic, partition, expected, end, count)
    while True:
        try:
            reply = pending.result()
        except Exception as exc:
            # a batch planned before its topic was deleted would fail on every replay: gone is
            # lost data, for fail_on_data_loss to judge; any other failure is the server's (an
            # unreachable one, or our own error, is not asked again after its whole wait)
            if isinstance(exc, (Disconnected, IggySparkError)) or catalog.holds(
                    options, Position(topic, partition)):
                raise
            raise_or_skip(DataLoss(topic, partition, expected, end,
                                   "its topic or partition no longer exists"),
                          options.fail_on_data_loss, exc)
            return
        count = _next_count(options, reply, count, line)
        # the next poll travels while this reply becomes a batch; it starts where the reply's
        # header says the messages end, checked against the decoded offsets below
        ahead = wire.following(reply, line)
        if ahead is not None and ahead < end:
            pending = _poll(options, topic, partition, ahead, end, count)
        messages = _within(_decoded(options, topic, partition, expected, reply, line),
                           expected, end)
        first = messages["offset"][0].as_py() if messages.num_rows else end
        if first > expected:
            why = "older than the oldest message kept" if messages.num_rows else (
                "no longer in the topic")
            raise_or_skip(DataLoss(topic, partition, expected, first, why),
                          options.fail_on_data_loss)
        if not messages.num_rows:
            return
        following = messages["offset"][-1].as_py() + 1
        if following < end and following != ahead:
            pending = _poll(options, topic, partition, following, end, count)
        if rows is None:
            yield messages
        else:
            yield parsed_batch(rows, options.payload_format == "pg_cdc", messages)
        if following >= end:
            return
        expected = following


def _within(messages: pa.RecordBatch, start: int, end: int) -> pa.RecordBatch:
    """The messages with offsets in ``[start, end)``: all of them, unless the server answered
    with more."""
    offsets = messages["offset"]
    if not messages.num_rows or (offsets[0].as_py() >= start and offsets[-1].as_py() < end):
        return messages
    return messages.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))


def _next_count(options: SourceOptions, reply: bytes, count: int, line: SdkLine) -> int:
    """How many messages the next poll asks for: as many of the size the reply's messages had
    as fit in ``poll_bytes``, at most ``poll_messages`` (``count`` again after an empty
    reply)."""
    polled = wire.message_count(reply, line)
    if not polled:
        return count
    return max(1, min(options.poll_messages, options.poll_bytes * polled // len(reply)))


def _poll(
    options: SourceOptions, topic: str, partition: int, start: int, end: int, count: int
) -> Future[bytes]:
    """Start polling up to ``count`` messages of ``[start, end)``: the reply's bytes."""
    body = wire.poll_request(CONSUMER, options.stream, topic, partition, start,
                             min(count, end - start))

    async def poll(client: apache_iggy.IggyClient) -> bytes:
        return bytes(await client.send_binary_request(wire.POLL_MESSAGES, body))

    return submit(options, poll)


def _decoded(
    options: SourceOptions, topic: str, partition: int, start: int, reply: bytes, line: SdkLine
) -> pa.RecordBatch:
    """The message columns of a poll's reply (:mod:`~iggy_spark.source.wire`)."""
    try:
        return wire.record_batch(reply, options.stream, topic, partition, line)
    except wire.MalformedReply as exc:
        raise SourceError(topic, f"partition {partition}: the server's reply to a poll from "
                          f"offset {start} is malformed: {exc}") from exc
