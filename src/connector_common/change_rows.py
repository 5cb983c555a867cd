"""The change row: the columns ``pg_cdc`` produces, for Spark (DDL) and for Arrow.

A contract both connectors share: ``pg_cdc`` yields these rows, ``iggy_routed`` carries them
into Iggy (the JSON-text columns embedded as JSON), and the ``iggy`` source's
``payload_format=pg_cdc`` reads them back, so it lives here, importable with either extra.
Spark checks Arrow batches from ``read`` against the declared schema exactly (``int`` must be
int32, ``long`` int64), so both views are declared side by side here and nowhere else.

``position`` orders changes as the stream delivers them, without parsing LSN text: a struct of
two longs, which Spark compares field by field (``ORDER BY``, ``max``, ``>`` in a ``MERGE``
condition, SDP's ``sequence_by``). ``commit_lsn`` is the commit LSN as a number; ``seq`` the
change's ``seq``, or for the rows that have none a number past every ``seq`` (an int), so they
come after the changes of the commit they share an LSN with, as in the stream: a table row
(snapshot or backfill, op ``read``: :data:`READ_SEQ`) comes after the transaction it was read
behind, and a message written outside a transaction (:data:`LONE_MESSAGE_SEQ`) after a
transaction whose commit record ends where it starts, and after the table rows read there.
An LSN is unsigned 64-bit and a Spark long signed: LSNs from 2^63 on (8 EiB of WAL) have no
position, and the reader fails on one rather than wrap it (:func:`position_lsn`).
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

from connector_common.lsn import format_lsn, parse_lsn

__all__ = [
    "ARROW_SCHEMA",
    "COLUMNS",
    "DERIVED_COLUMNS",
    "JSON_TEXT_COLUMNS",
    "LONE_MESSAGE_SEQ",
    "POSITION_TYPE",
    "READ_SEQ",
    "SPARK_SCHEMA",
    "no_unchanged",
    "position",
    "position_lsn",
    "typed_schemas",
]

READ_SEQ = 1 << 31
"""``position.seq`` of a row read from a table (op ``read``: snapshot, backfill)."""
LONE_MESSAGE_SEQ = READ_SEQ + 1
"""``position.seq`` of a logical message written outside a transaction."""
MAX_POSITION_LSN = (1 << 63) - 1
"""The largest LSN a position holds (a Spark long)."""

POSITION_TYPE = pa.struct([pa.field("commit_lsn", pa.int64()), pa.field("seq", pa.int64())])

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
        "a logical message (`message_prefixes`); ddl for a change of a table's columns "
        "(`include_schema_changes`)",
    ),
    (
        "key",
        "string",
        pa.string(),
        "JSON of the row's replica-identity key (null for truncate and ddl; `{\"prefix\": ...}` "
        "for a message)",
    ),
    (
        "before",
        "string",
        pa.string(),
        "JSON of the old row, where Postgres sends it (REPLICA IDENTITY FULL); for ddl the "
        "table's columns before",
    ),
    (
        "after",
        "string",
        pa.string(),
        "JSON of the new row (insert, update); for a message `prefix`, `content` (text, null "
        "if not UTF-8) and `content_base64`; for ddl the table's columns after",
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
    (
        "position",
        "struct<commit_lsn:long,seq:long>",
        POSITION_TYPE,
        "the change's place in the stream, for ordering (`ORDER BY position`, "
        "`sequence_by`): `commit_lsn` as a number and `seq`; rows without a `seq` come after "
        f"the changes of their commit LSN: {READ_SEQ} for snapshot and backfill rows, "
        f"{LONE_MESSAGE_SEQ} for a non-transactional message (null in `mode=polling`)",
    ),
)

JSON_TEXT_COLUMNS = ("key", "before", "after")
"""The string columns holding JSON text (a row's values by column name)."""

DERIVED_COLUMNS = ("position",)
"""The columns made of the others (``commit_lsn``, ``seq``, ``op``): the pipeline leaves them
out of the Iggy payload, which stays what it was before they were added, and the ``iggy``
source's ``payload_format=pg_cdc`` rebuilds them."""

# Built from type objects, not parsed from DDL: parsing needs a SparkContext, which the
# Python workers that call streamReader() do not have.
_SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "long": LongType(),
    "int": IntegerType(),
    "timestamp": TimestampType(),
    "array<string>": ArrayType(StringType()),
    "struct<commit_lsn:long,seq:long>": StructType(
        [StructField("commit_lsn", LongType()), StructField("seq", LongType())]),
}
SPARK_SCHEMA = StructType([StructField(name, _SPARK_TYPES[ddl]) for name, ddl, _, _ in COLUMNS])
ARROW_SCHEMA = pa.schema([pa.field(name, arrow) for name, _, arrow, _ in COLUMNS])


def typed_schemas(row: DataType, key: DataType, row_arrow: pa.DataType,
                  key_arrow: pa.DataType) -> tuple[StructType, pa.Schema]:
    """:data:`SPARK_SCHEMA` and :data:`ARROW_SCHEMA` with ``before``/``after`` of the ``row``
    type and ``key`` of the ``key`` type (``pg_cdc``'s ``row_format=struct``: structs;
    ``variant``: variants); every other column as it is."""
    spark = {"key": key, "before": row, "after": row}
    arrow = {"key": key_arrow, "before": row_arrow, "after": row_arrow}
    return (StructType([StructField(f.name, spark.get(f.name, f.dataType))
                        for f in SPARK_SCHEMA.fields]),
            pa.schema([pa.field(f.name, arrow.get(f.name, f.type)) for f in ARROW_SCHEMA]))


def position_lsn(lsn: int) -> int:
    """``lsn`` as ``position.commit_lsn``; :class:`ValueError` from 2^63 on, which a Spark
    long cannot hold (Postgres would have written 8 EiB of WAL)."""
    if not 0 <= lsn <= MAX_POSITION_LSN:
        raise ValueError(f"LSN {format_lsn(lsn)} is beyond the largest the position column "
                         f"holds ({format_lsn(MAX_POSITION_LSN)}: a Spark long is signed)")
    return lsn


def position(commit_lsn: str | None, seq: int | None, op: str | None) -> dict[str, int] | None:
    """The ``position`` of a change row from its ``commit_lsn`` text, ``seq`` and ``op``
    (``None`` without a commit LSN: a polled row): for readers of rows that did not carry it,
    such as the ``iggy`` source reading payloads."""
    if commit_lsn is None:
        return None
    lsn = position_lsn(parse_lsn(commit_lsn))
    if seq is None:
        seq = READ_SEQ if op == "read" else LONE_MESSAGE_SEQ
    return {"commit_lsn": lsn, "seq": seq}


def no_unchanged(count: int) -> pa.Array:
    """The ``unchanged`` column of ``count`` rows that name no column (every row but a change
    that left a TOAST value out): an empty list each (its offsets all 0)."""
    offsets = pa.Array.from_buffers(pa.int32(), count + 1,
                                    [None, pa.py_buffer(bytes(4 * (count + 1)))])
    return pa.ListArray.from_arrays(offsets, pa.nulls(0, pa.string()),
                                    type=ARROW_SCHEMA.field("unchanged").type)
