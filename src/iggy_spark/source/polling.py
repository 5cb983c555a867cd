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

from iggy_spark.source.catalog import consumer, submit
from iggy_spark.source.errors import DataLoss
from iggy_spark.source.offsets import Range
from iggy_spark.source.options import SourceOptions
from iggy_spark.source.payloads import parsed_batch
from iggy_spark.source.schema import record_batch

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
        messages = [m for m in pending.result() if expected <= m.offset() < end]
        first = messages[0].offset() if messages else end
        if first > expected:
            why = "older than the oldest message kept" if messages else "no longer in the topic"
            if options.fail_on_data_loss:
                raise DataLoss(topic, partition, expected, first, why)
        if not messages:
            return
        following = messages[-1].offset() + 1
        if following < end:  # the next poll travels while this one becomes a batch
            pending = _poll(options, topic, partition, following, end)
        if rows is None:
            yield record_batch(options.stream, topic, partition, messages)
        else:
            yield parsed_batch(rows, options.payload_format == "pg_cdc", options.stream, topic,
                               partition, messages)
        if following >= end:
            return
        expected = following


def _poll(
    options: SourceOptions, topic: str, partition: int, start: int, end: int
) -> Future[list[apache_iggy.ReceiveMessage]]:
    """Start polling up to ``poll_messages`` messages of ``[start, end)``."""
    import apache_iggy

    async def poll(client: apache_iggy.IggyClient) -> list[apache_iggy.ReceiveMessage]:
        return await client.poll_messages(
            options.stream, topic, consumer=consumer(),
            polling_strategy=apache_iggy.PollingStrategy.Offset(start),
            count=min(options.poll_messages, end - start), auto_commit=False,
            partition_id=partition)

    return submit(options, poll)
