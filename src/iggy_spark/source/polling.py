"""The executor's side: poll one offset range and hand it to Spark as Arrow batches.

Polls by offset (never a consumer's stored offset), so reading a range twice, after a crash
or a task retry, reads exactly the same messages; one poll's messages are one Arrow batch, so a
task holds at most ``poll_messages`` messages at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from iggy_spark.source.catalog import call, consumer
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
    import apache_iggy

    topic, partition, expected, end = work
    while expected < end:
        count = min(options.poll_messages, end - expected)

        async def poll(client: apache_iggy.IggyClient, start: int = expected,
                       count: int = count) -> list[apache_iggy.ReceiveMessage]:
            return await client.poll_messages(
                options.stream, topic, consumer=consumer(),
                polling_strategy=apache_iggy.PollingStrategy.Offset(start), count=count,
                auto_commit=False, partition_id=partition)

        messages = [m for m in call(options, poll) if expected <= m.offset() < end]
        first = messages[0].offset() if messages else end
        if first > expected:
            why = "older than the oldest message kept" if messages else "no longer in the topic"
            if options.fail_on_data_loss:
                raise DataLoss(topic, partition, expected, first, why)
        if not messages:
            return
        if rows is None:
            yield record_batch(options.stream, topic, partition, messages)
        else:
            yield parsed_batch(rows, options.payload_format == "pg_cdc", options.stream, topic,
                               partition, messages)
        expected = messages[-1].offset() + 1
