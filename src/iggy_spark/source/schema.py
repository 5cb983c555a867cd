"""The rows the source produces: one per Iggy message, in the Kafka source's spirit.

``id`` is Iggy's u128 message id as a decimal string (no Spark integral type holds it);
``headers`` are the user headers with every value as bytes (strings UTF-8 encoded, other
scalars as their decimal text), so a header of any Iggy kind fits one column type.
"""

from __future__ import annotations

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

__all__ = ["ARROW_SCHEMA", "COLUMNS", "HEADERS_TYPE", "SCHEMA"]

COLUMNS: tuple[tuple[str, str], ...] = (
    ("stream", "the `stream` option as given (a name, or the numeric id if an id was given)"),
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

HEADERS_TYPE = pa.map_(pa.string(), pa.binary())

ARROW_SCHEMA = pa.schema([
    pa.field("stream", pa.string(), False),
    pa.field("topic", pa.string(), False),
    pa.field("partition", pa.int32(), False),
    pa.field("offset", pa.int64(), False),
    pa.field("id", pa.string(), False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), False),
    pa.field("headers", HEADERS_TYPE, True),
    pa.field("payload", pa.binary(), False),
])
