"""Check the DataFrame's columns against the row contract on the driver, at query start.

The executors' encoder (:mod:`iggy_spark.sink.encoding`) checks every Arrow batch too, but a wrong
type found there fails the first batch on an executor, after Spark planned it. Spark hands the
input schema to ``streamWriter`` on the driver, so a ``topic`` of type int or a ``headers``
column that is not a map is refused before any task runs, naming the column, the type found and
the types accepted. The accepted types are exactly the encoder's, in Spark's terms.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from iggy_spark.errors import EncodingError
from iggy_spark.sink.options import KeyEncoding, RoutedOptions

__all__ = ["check_columns"]

_TEXT = "string"
_TEXT_OR_BINARY = "string or binary"
_INTEGER = "an integer type (tinyint, smallint, int, bigint)"


def _is_text(t: DataType) -> bool:
    return isinstance(t, StringType)


def _is_text_or_binary(t: DataType) -> bool:
    return isinstance(t, StringType | BinaryType)


def _is_integer(t: DataType) -> bool:
    return isinstance(t, ByteType | ShortType | IntegerType | LongType)


def _is_headers(t: DataType) -> bool:
    if isinstance(t, MapType):
        return _is_text(t.keyType) and _is_text_or_binary(t.valueType)
    if isinstance(t, ArrayType) and isinstance(t.elementType, StructType):
        fields = {f.name: f.dataType for f in t.elementType.fields}
        return (sorted(fields) == ["key", "value"] and _is_text(fields["key"])
                and _is_text_or_binary(fields["value"]))
    return False


def check_columns(schema: StructType, options: RoutedOptions) -> None:
    """Raise :class:`EncodingError` naming the first contract column whose type is wrong."""
    columns = options.columns
    if options.partition_key_encoding is KeyEncoding.PARTITION_ID:
        used, unused = columns.partition_id, columns.partition_key
        key_ok, key_types = _is_integer, _INTEGER
    else:
        used, unused = columns.partition_key, columns.partition_id
        if options.partition_key_encoding is KeyEncoding.BYTES:
            key_ok, key_types = _is_text_or_binary, _TEXT_OR_BINARY
        else:
            key_ok, key_types = _is_integer, _INTEGER
    types = {f.name: f.dataType for f in schema.fields}
    if unused in types:
        raise EncodingError(unused, None, "is not read with partition_key_encoding="
                            f"{options.partition_key_encoding}; drop the column or change the "
                            "encoding")
    rules = (
        (columns.stream, _is_text, _TEXT),
        (columns.topic, _is_text, _TEXT),
        (used, key_ok, key_types),
        (columns.value, _is_text_or_binary, _TEXT_OR_BINARY),
        (columns.headers, _is_headers,
         "map<string, string> (or map<string, binary>, or array<struct<key, value>>)"),
        (columns.id, lambda t: _is_integer(t) or _is_text_or_binary(t),
         f"{_INTEGER}, string or binary"),
        *((name, _is_text, f"{_TEXT} (listed in json_columns)")
          for name in sorted(options.json_columns) if columns.value not in types),
    )
    for name, ok, accepted in rules:
        found = types.get(name)
        if found is not None and not ok(found):
            raise EncodingError(name, None, f"has type {found.simpleString()}; the sink "
                                f"accepts {accepted}")
