"""The change row: the columns ``pg_cdc`` produces, for Spark (DDL) and for Arrow.

A contract both connectors share: ``pg_cdc`` yields these rows, ``iggy_routed`` carries them
into Iggy (the JSON-text columns embedded as JSON), and the ``iggy`` source's
``payload_format=pg_cdc`` reads them back, so it lives here, importable with either extra.
Spark checks Arrow batches from ``read`` against the declared schema exactly (``int`` must be
int32, ``long`` int64), so both views are declared side by side here and nowhere else.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["ARROW_SCHEMA", "COLUMNS", "JSON_TEXT_COLUMNS", "SPARK_SCHEMA"]

COLUMNS: tuple[tuple[str, str, pa.DataType, str], ...] = (
    ("lsn", "string", pa.string(), "LSN Postgres reports for the change row"),
    (
        "commit_lsn",
        "string",
        pa.string(),
        "end LSN of the transaction's commit record (snapshot rows: the slot's consistent point; "
        "a non-transactional message: its own LSN)",
    ),
    (
        "xid",
        "long",
        pa.int64(),
        "transaction id (null for snapshot rows; for a non-transactional message the "
        "transaction that wrote it, if any)",
    ),
    (
        "commit_ts",
        "timestamp",
        pa.timestamp("us", tz="UTC"),
        "commit time (null for snapshot rows and non-transactional messages)",
    ),
    (
        "seq",
        "int",
        pa.int32(),
        "position of the change in its transaction, from 0 (null for snapshot rows and "
        "non-transactional messages)",
    ),
    ("schema", "string", pa.string(), "schema of the changed table (null for a message)"),
    ("table", "string", pa.string(), "name of the changed table (null for a message)"),
    (
        "op",
        "string",
        pa.string(),
        "insert, update, delete or truncate; read for a row of the initial snapshot; message for "
        "a logical message (`message_prefixes`)",
    ),
    (
        "key",
        "string",
        pa.string(),
        "JSON of the row's replica-identity key (null for truncate; `{\"prefix\": ...}` for a "
        "message)",
    ),
    (
        "before",
        "string",
        pa.string(),
        "JSON of the old row, where Postgres sends it (REPLICA IDENTITY FULL)",
    ),
    (
        "after",
        "string",
        pa.string(),
        "JSON of the new row (insert, update); for a message `prefix`, `content` (text, null "
        "if not UTF-8) and `content_base64`",
    ),
    (
        "unchanged",
        "array<string>",
        pa.list_(pa.string()),
        "columns whose unchanged TOAST value Postgres did not send; they are absent from `after`",
    ),
    (
        "id",
        "string",
        pa.string(),
        "stable message id `<commit_lsn>:<seq>`, identical on replay; for snapshot rows "
        '`<consistent point>:read:["<schema>","<table>",<primary key or ctid text>...]`; '
        "`<lsn>:message` for a non-transactional message",
    ),
    ("stream", "string", pa.string(), "destination stream (routing options), else null"),
    ("topic", "string", pa.string(), "destination topic (routing options), else null"),
    (
        "partition_key",
        "string",
        pa.string(),
        "destination partition key (routing options), else null",
    ),
)

JSON_TEXT_COLUMNS = ("key", "before", "after")
"""The string columns holding JSON text (a row's values by column name)."""

# Built from type objects, not parsed from DDL: parsing needs a SparkContext, which the
# Python workers that call streamReader() do not have.
_SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "long": LongType(),
    "int": IntegerType(),
    "timestamp": TimestampType(),
    "array<string>": ArrayType(StringType()),
}
SPARK_SCHEMA = StructType([StructField(name, _SPARK_TYPES[ddl]) for name, ddl, _, _ in COLUMNS])
ARROW_SCHEMA = pa.schema([pa.field(name, arrow) for name, _, arrow, _ in COLUMNS])
