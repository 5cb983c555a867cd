"""The rows the source produces: one per Iggy message, in the Kafka source's spirit.

``id`` is Iggy's u128 message id as a decimal string (no Spark integral type holds it);
``headers`` are the user headers with every value as bytes (strings UTF-8 encoded, other
scalars as their decimal text), so a header of any Iggy kind fits one column type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import apache_iggy

__all__ = ["ARROW_SCHEMA", "COLUMNS", "SCHEMA", "record_batch"]

COLUMNS: tuple[tuple[str, str], ...] = (
    ("stream", "the stream name, as given in the `stream` option"),
    ("topic", "the topic name"),
    ("partition", "the Iggy partition id"),
    ("offset", "the message's offset in its partition"),
    ("id", "the message id: a u128, as a decimal string"),
    ("timestamp", "when the server appended the message (UTC)"),
    ("headers", "user headers (null when none): strings UTF-8 encoded, numbers and booleans "
                "as their text"),
    ("payload", "the message payload"),
)
"""Column names and meanings, in :data:`SCHEMA`'s order; the docs' columns table is checked
against both."""

SCHEMA = StructType([
    StructField("stream", StringType(), False),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("id", StringType(), False),
    StructField("timestamp", TimestampType(), False),
    StructField("headers", MapType(StringType(), BinaryType(), True), True),
    StructField("payload", BinaryType(), False),
])

ARROW_SCHEMA = pa.schema([
    pa.field("stream", pa.string(), False),
    pa.field("topic", pa.string(), False),
    pa.field("partition", pa.int32(), False),
    pa.field("offset", pa.int64(), False),
    pa.field("id", pa.string(), False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), False),
    pa.field("headers", pa.map_(pa.string(), pa.binary()), True),
    pa.field("payload", pa.binary(), False),
])


def _header_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, bool):
        return b"true" if value else b"false"
    return str(value).encode()


def _headers(message: apache_iggy.ReceiveMessage) -> list[tuple[str, bytes]] | None:
    headers = message.user_headers()
    if not headers:
        return None
    try:
        plain = headers.to_scalar_dict()
    except ValueError:  # two typed keys with one plain value: keep each key's own text
        plain = {str(k): v for k, v in headers.items()}
    return [
        (k.decode(errors="replace") if isinstance(k, bytes) else str(k), _header_bytes(v))
        for k, v in plain.items()
    ]


def record_batch(
    stream: str, topic: str, partition: int, messages: Sequence[apache_iggy.ReceiveMessage]
) -> pa.RecordBatch:
    """One Arrow batch of rows from polled messages of one partition."""
    count = len(messages)
    return pa.RecordBatch.from_arrays([
        pa.array([stream] * count, pa.string()),
        pa.array([topic] * count, pa.string()),
        pa.array([partition] * count, pa.int32()),
        pa.array([m.offset() for m in messages], pa.int64()),
        pa.array([str(m.id()) for m in messages], pa.string()),
        pa.array([m.timestamp() for m in messages], pa.timestamp("us", tz="UTC")),
        pa.array([_headers(m) for m in messages], pa.map_(pa.string(), pa.binary())),
        pa.array([m.payload() for m in messages], pa.binary()),
    ], schema=ARROW_SCHEMA)
