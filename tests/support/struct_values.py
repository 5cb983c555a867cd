"""The JSON mode's values read as ``row_format=struct``'s types, for comparing the two."""

from __future__ import annotations

import base64
import math
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import orjson
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from postgres_cdc_source.pg_types import parse_array

__all__ = ["from_json", "same"]


def from_json(spark: DataType, value: Any) -> Any:
    """What the JSON mode's value means as a value of ``spark``: ``from_json`` by hand."""
    if value is None:
        return None
    if isinstance(spark, ArrayType):  # an array of a type not built in is its text there
        items = parse_array(value) if isinstance(value, str) else value
        return [from_json(spark.elementType, v) for v in items]
    if isinstance(spark, (ShortType, IntegerType, LongType)):
        return int(value)
    if isinstance(spark, DecimalType):
        return Decimal(value)
    if isinstance(spark, (FloatType, DoubleType)):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, value)
    if isinstance(spark, BinaryType):
        return base64.b64decode(value)
    if isinstance(spark, DateType):
        return date.fromisoformat(value)
    if isinstance(spark, (TimestampType, TimestampNTZType)):
        return datetime.fromisoformat(value)
    if isinstance(spark, StringType) and not isinstance(value, str):
        return orjson.dumps(value).decode()  # json/jsonb
    return value


def same(a: Any, b: Any) -> bool:
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b
