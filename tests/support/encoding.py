"""Helpers the sink's encoding tests share: a batch encoded with the default options."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from iggy_spark.errors import EncodingError
from iggy_spark.sink.encoding import EncodedBatch, encode_batch
from iggy_spark.sink.options import RoutedOptions

__all__ = ["OPTIONS", "URL", "encode", "payload_json", "refused"]

URL = "iggy://u:p@localhost:8090"
OPTIONS = RoutedOptions.from_options({"url": URL})


def encode(columns: dict[str, Any], options: RoutedOptions = OPTIONS) -> EncodedBatch:
    return encode_batch(pa.record_batch(columns), options)


def payload_json(columns: dict[str, Any]) -> list[Any]:
    return [orjson.loads(p) for p in encode(columns).payloads]


def refused(columns: dict[str, Any], column: str, row: int | None,
            options: RoutedOptions = OPTIONS) -> EncodingError:
    with pytest.raises(EncodingError, match=f"column '{column}'") as caught:
        encode(columns, options)
    assert (caught.value.column, caught.value.row) == (column, row)
    return caught.value
