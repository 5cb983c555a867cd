"""The executor's side: poll one offset range and hand it to Spark as Arrow batches.

Polls by offset (never a consumer's stored offset), so reading a range twice, after a crash
or a task retry, reads exactly the same messages; one poll's messages are one Arrow batch, so a
task holds at most two polls' messages at a time: the next poll is on its way while the last
one becomes a batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from iggy_spark.source import wire
from iggy_spark.source.catalog import CONSUMER, submit
from iggy_spark.source.errors import DataLoss, SourceError
from iggy_spark.source.offsets import Range
from iggy_spark.source.options import SourceOptions
from iggy_spark.source.payloads import parsed_batch

if TYPE_CHECKING:
    import apache_iggy

__all__ = ["read_range"]


def read_range(
    options: SourceOptions, work: Range, rows: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """Every message of ``work``, in offset order: the message columns, or the payloads parsed
    into ``rows`` (:mod:`~iggy_spark.source.payloads`).

    A gap (the server's oldest message is past where the range starts, or the partition has
    nothing left where it had messages) is data loss: :class:`DataLoss`, or skipped with
    ``fail_on_data_loss=false``.
    """
    topic, partition, expected, end = work
    if expected >= end:
        return
    pending = _poll(options, topic, partition, expected, end)
    while True:
        messages = _within(pending.result(), expected, end)
        first = messages["offset"][0].as_py() if messages.num_rows else end
        if first > expected:
            why = "older than the oldest message kept" if messages.num_rows else (
                "no longer in the topic")
            if options.fail_on_data_loss:
                raise DataLoss(topic, partition, expected, first, why)
        if not messages.num_rows:
            return
        following = messages["offset"][-1].as_py() + 1
        if following < end:  # the next poll travels while this one becomes a batch
            pending = _poll(options, topic, partition, following, end)
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


def _poll(
    options: SourceOptions, topic: str, partition: int, start: int, end: int
) -> Future[pa.RecordBatch]:
    """Start polling up to ``poll_messages`` messages of ``[start, end)`` (the message
    columns, :mod:`~iggy_spark.source.wire`)."""
    body = wire.poll_request(CONSUMER, options.stream, topic, partition, start,
                             min(options.poll_messages, end - start))

    async def poll(client: apache_iggy.IggyClient) -> pa.RecordBatch:
        reply = await client.send_binary_request(wire.POLL_MESSAGES, body)
        try:
            return wire.record_batch(reply, options.stream, topic, partition)
        except wire.MalformedReply as exc:
            raise SourceError(topic, f"partition {partition}: the server's reply to a poll "
                              f"from offset {start} is malformed: {exc}") from exc

    return submit(options, poll)
