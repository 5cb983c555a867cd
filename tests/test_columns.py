"""The driver-side check of the DataFrame's columns against the sink's row contract."""

from __future__ import annotations

import re

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from iggy_spark.errors import EncodingError
from iggy_spark.sink.columns import check_columns
from iggy_spark.sink.options import RoutedOptions

URL = "iggy://u:p@h:1"


_SIMPLE: dict[str, DataType] = {
    "string": StringType(), "binary": BinaryType(), "int": IntegerType(), "bigint": LongType(),
    "smallint": ShortType(), "double": DoubleType(),
}


def _type(ddl: str) -> DataType:
    """The few Spark DDL types used here, without a SparkSession (``fromDDL`` needs one)."""
    if ddl in _SIMPLE:
        return _SIMPLE[ddl]
    if match := re.fullmatch(r"map<(\w+),(\w+)>", ddl):
        return MapType(_type(match[1]), _type(match[2]))
    if match := re.fullmatch(r"array<struct<key:(\w+),value:(\w+)>>", ddl):
        return ArrayType(StructType([StructField("key", _type(match[1])),
                                     StructField("value", _type(match[2]))]))
    if match := re.fullmatch(r"struct<(\w+):(\w+)>", ddl):
        return StructType([StructField(match[1], _type(match[2]))])
    raise ValueError(ddl)


def schema(ddl: str) -> StructType:
    fields = [f.strip().split(" ", 1) for f in re.split(r",\s(?![^<]*>)", ddl)]
    return StructType([StructField(name, _type(t)) for name, t in fields])


def options(**extra: str) -> RoutedOptions:
    return RoutedOptions.from_options({"url": URL, **extra})


@pytest.mark.parametrize(("ddl", "extra"), [
    ("stream string, topic string, partition_key string, value string, headers "
     "map<string,string>, id bigint", {}),
    ("stream string, topic string, partition_key binary, value binary, headers "
     "map<string,binary>, id string", {}),
    ("stream string, topic string, headers array<struct<key:string,value:string>>, id binary",
     {}),
    ("topic string, k int", {"partition_key_encoding": "key_u32", "partition_key_column": "k"}),
    ("stream string, topic string, partition_id smallint",
     {"partition_key_encoding": "partition_id", "topic_defaults.partitions_count": "2"}),
    ("stream string, topic string, key string, after int, value string",
     {"json_columns": "after"}),  # json_columns are not read when value is given
    ("stream string, topic string, other_thing int, nested struct<a:int>", {}),
])
def test_accepted_schemas(ddl: str, extra: dict[str, str]) -> None:
    check_columns(schema(ddl), options(**extra))


@pytest.mark.parametrize(("ddl", "extra", "column", "found", "accepted"), [
    ("stream string, topic int", {}, "topic", "int", "string"),
    ("stream binary, topic string", {}, "stream", "binary", "string"),
    ("topic string, headers map<string,int>", {}, "headers", "map<string,int>",
     "map<string, string>"),
    ("topic string, headers string", {}, "headers", "string", "map<string, string>"),
    ("topic string, partition_key int", {}, "partition_key", "int", "string or binary"),
    ("topic string, partition_key string", {"partition_key_encoding": "key_u32"},
     "partition_key", "string", "an integer type"),
    ("topic string, value int", {}, "value", "int", "string or binary"),
    ("topic string, id double", {}, "id", "double", "an integer type"),
    ("topic string, after int", {"json_columns": "after"}, "after", "int", "json_columns"),
    ("t string, dest string", {"topic_column": "t", "stream_column": "dest",
                               "partition_key_encoding": "partition_id",
                               "topic_defaults.partitions_count": "2",
                               "partition_id_column": "dest"}, None, None, None),
])
def test_refused_schemas_name_the_column_the_type_and_what_is_accepted(
    ddl: str, extra: dict[str, str], column: str | None, found: str | None,
    accepted: str | None,
) -> None:
    if column is None:  # a *_column option pair naming one column is refused by the options
        with pytest.raises(ValueError, match="already used"):
            options(**extra)
        return
    with pytest.raises(EncodingError) as info:
        check_columns(schema(ddl), options(**extra))
    assert info.value.column == column
    message = str(info.value)
    assert f"column '{column}'" in message and f"has type {found}" in message
    assert accepted in message  # type: ignore[operator]


def test_the_unused_partition_column_is_refused() -> None:
    with pytest.raises(EncodingError, match=r"partition_id.*not read with partition_key_encoding"):
        check_columns(schema("topic string, partition_id int"), options())
