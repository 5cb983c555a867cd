"""Arrow batch → message parts: value payloads, ids, partitioning, headers, destinations;
stable ids, sliced batches, refusals (JSON payloads: test_encoding_json.py)."""

from __future__ import annotations

import base64
import math
from typing import Any

import pyarrow as pa
import pytest
from support.encoding import OPTIONS, URL, encode, payload_json, refused

from iggy_spark.errors import EncodingError
from iggy_spark.sink.encoding import MAX_KEY_BYTES, encode_batch, message_id
from iggy_spark.sink.options import RoutedOptions

KEY_U32 = RoutedOptions.from_options({"url": URL, "partition_key_encoding": "key_u32"})
PARTITION_ID = RoutedOptions.from_options(
    {"url": URL, "partition_key_encoding": "partition_id", "create_destinations": "false"}
)


# --- destinations ----------------------------------------------------------------------------


def test_destinations_and_missing_parts() -> None:
    encoded = encode({"stream": ["a", None, "c"], "topic": pa.array(["x", "y", None]),
                      "value": ["1", "2", "3"]})
    assert encoded.streams == ["a", None, "c"]
    assert encoded.topics == ["x", "y", None]
    assert len(encoded) == 3


def test_absent_destination_columns_are_missing() -> None:
    encoded = encode({"value": ["1", "2"]})
    assert encoded.streams == encoded.topics == [None, None]


def test_dictionary_encoded_and_large_strings() -> None:
    encoded = encode({
        "stream": pa.array(["a", "b", "a"]).dictionary_encode(),
        "topic": pa.array(["t", "t", None], pa.large_string()),
        "value": ["1", "2", "3"],
    })
    assert encoded.streams == ["a", "b", "a"] and encoded.topics == ["t", "t", None]


def test_destination_columns_must_be_strings() -> None:
    refused({"stream": [1, 2], "value": ["a", "b"]}, "stream", None)


def test_renamed_columns() -> None:
    options = RoutedOptions.from_options({
        "url": URL, "stream_column": "s", "topic_column": "t", "value_column": "body",
        "id_column": "key", "partition_key_column": "pk", "headers_column": "h",
    })
    encoded = encode({"s": ["a"], "t": ["b"], "body": ["x"], "key": [7], "pk": ["k"],
                      "h": pa.array([[("a", "b")]], pa.map_(pa.string(), pa.string())),
                      "stream": ["not routing any more"]}, options)
    assert (encoded.streams, encoded.topics, encoded.payloads) == (["a"], ["b"], [b"x"])
    assert (encoded.ids, encoded.partitioning, encoded.headers) == ([7], [b"k"], [{"a": "b"}])


def test_duplicate_column_names_are_refused() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["n", "n"])
    with pytest.raises(EncodingError, match="column 'n': appears twice"):
        encode_batch(batch, OPTIONS)


def test_empty_batch() -> None:
    batch = pa.record_batch({"stream": pa.array([], pa.string()), "n": pa.array([], pa.int64())})
    encoded = encode_batch(batch, OPTIONS)
    assert len(encoded) == 0 and encoded.ids == [] and encoded.payloads == []


# --- value payloads --------------------------------------------------------------------------


def test_value_column_is_sent_as_is() -> None:
    encoded = encode({"value": ["héllo", "{\"a\":1}"], "other": [1, 2]})
    assert encoded.payloads == ["héllo".encode(), b'{"a":1}']
    binary = encode({"value": pa.array([b"\x00\xff", b"x"], pa.binary())})
    assert binary.payloads == [b"\x00\xff", b"x"]


@pytest.mark.parametrize("values", [["a", None], ["a", ""], [b"a", b""]])
def test_null_or_empty_values_are_refused(values: list[Any]) -> None:
    error = refused({"value": values}, "value", 1)
    assert "payload" in str(error)


def test_value_column_type_is_checked() -> None:
    error = refused({"value": [1]}, "value", None)
    assert "to_json" in str(error)


# --- ids -------------------------------------------------------------------------------------


def test_string_ids_are_xxh3_128_forever() -> None:
    # The reference XXH3-128 vector for empty input: proves we hash the standard way.
    assert message_id("") == 0x99AA06D3014798D86001C324468D497F
    assert message_id("order-1") == 120348366551740534409552932539896325958
    assert message_id("order-1") == message_id(b"order-1")
    encoded = encode({"id": ["order-1", None, ""], "value": ["a", "b", "c"]})
    assert encoded.ids == [120348366551740534409552932539896325958, 0, message_id(b"")]
    binary = encode({"id": pa.array([b"order-1"], pa.binary()), "value": ["a"]})
    assert binary.ids == [message_id("order-1")]


def test_integer_ids_pass_through() -> None:
    encoded = encode({"id": pa.array([1, None, 2**63 - 1], pa.int64()), "value": ["a"] * 3})
    assert encoded.ids == [1, 0, 2**63 - 1]
    unsigned = encode({"id": pa.array([2**64 - 1], pa.uint64()), "value": ["a"]})
    assert unsigned.ids == [2**64 - 1]


def test_no_id_column_lets_the_sdk_assign() -> None:
    assert encode({"value": ["a", "b"]}).ids == [0, 0]


@pytest.mark.parametrize(("ids", "row"), [([5, 0], 1), ([-1, 3], 0), ([1, 2, -7], 2)])
def test_non_positive_integer_ids_are_refused(ids: list[int], row: int) -> None:
    error = refused({"id": ids, "value": ["v"] * len(ids)}, "id", row)
    assert "1.." in str(error)


def test_id_column_type_is_checked() -> None:
    refused({"id": [1.5], "value": ["a"]}, "id", None)


# --- partitioning ----------------------------------------------------------------------------


def test_bytes_keys() -> None:
    long_key = "k" * (MAX_KEY_BYTES + 1)
    encoded = encode({"partition_key": ["a", None, "", "é", "k" * MAX_KEY_BYTES, long_key],
                      "value": ["v"] * 6})
    assert encoded.partitioning[:5] == [b"a", None, None, "é".encode(), b"k" * MAX_KEY_BYTES]
    digest = encoded.partitioning[5]
    assert isinstance(digest, bytes) and len(digest) == 16
    again = encode({"partition_key": [long_key], "value": ["v"]})
    assert again.partitioning == [digest]
    binary = encode({"partition_key": pa.array([b"\x00"], pa.binary()), "value": ["v"]})
    assert binary.partitioning == [b"\x00"]


def test_bytes_keys_must_be_text_or_binary() -> None:
    error = refused({"partition_key": [1], "value": ["v"]}, "partition_key", None)
    assert "key_u32" in str(error)


def test_key_u32() -> None:
    encoded = encode({"partition_key": pa.array([0, 1, None, 2**32 - 1], pa.int64()),
                      "value": ["v"] * 4}, KEY_U32)
    assert encoded.partitioning == [b"\0\0\0\0", b"\1\0\0\0", None, b"\xff\xff\xff\xff"]


@pytest.mark.parametrize(("keys", "row"), [([1, 2**32], 1), ([-1], 0)])
def test_key_u32_range(keys: list[int], row: int) -> None:
    error = refused({"partition_key": keys, "value": ["v"] * len(keys)}, "partition_key", row,
                    KEY_U32)
    assert "0..4294967295" in str(error)


def test_key_u32_needs_integers() -> None:
    refused({"partition_key": ["1"], "value": ["v"]}, "partition_key", None, KEY_U32)


def test_partition_ids_pass_through_for_the_writer_to_check() -> None:
    encoded = encode({"partition_id": pa.array([0, 3, None, -1, 99], pa.int32()),
                      "value": ["v"] * 5}, PARTITION_ID)
    assert encoded.partitioning == [0, 3, None, -1, 99]
    refused({"partition_id": ["1"], "value": ["v"]}, "partition_id", None, PARTITION_ID)


def test_the_unused_partition_column_is_refused() -> None:
    refused({"partition_id": [1], "value": ["v"]}, "partition_id", None)
    refused({"partition_key": ["k"], "value": ["v"]}, "partition_key", None, PARTITION_ID)


def test_no_partition_column_means_balanced() -> None:
    assert encode({"value": ["v", "w"]}).partitioning == [None, None]


# --- headers ---------------------------------------------------------------------------------

_MAP = pa.map_(pa.string(), pa.string())


def test_map_headers() -> None:
    headers = pa.array([[("a", "1"), ("b", "2")], None, [], [("a", None), ("c", "3")]], _MAP)
    encoded = encode({"headers": headers, "value": ["v"] * 4})
    assert encoded.headers == [{"a": "1", "b": "2"}, None, None, {"c": "3"}]


def test_binary_header_values_and_kafka_style_headers() -> None:
    binary = pa.array([[("k", b"\x00")]], pa.map_(pa.string(), pa.binary()))
    assert encode({"headers": binary, "value": ["v"]}).headers == [{"k": b"\x00"}]
    kafka_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    kafka = pa.array([[{"key": "k", "value": b"v"}, {"key": "n", "value": None}], None],
                     kafka_type)
    assert encode({"headers": kafka, "value": ["v", "w"]}).headers == [{"k": b"v"}, None]


@pytest.mark.parametrize(
    ("rows", "bad_row"),
    [
        ([[("a", "1")], [("", "x")]], 1),
        ([[("a", "x" * 256)]], 0),
        ([[("a", "1")], [("a", "1")], [("k" * 256, "1")]], 2),
        ([[("a", "é" * 128)]], 0),
        ([[("a", "")]], 0),
    ],
)
def test_header_limits(rows: list[Any], bad_row: int) -> None:
    error = refused({"headers": pa.array(rows, _MAP), "value": ["v"] * len(rows)},
                    "headers", bad_row)
    assert "1-255 bytes" in str(error)


def test_kafka_headers_with_null_keys_are_refused() -> None:
    kafka_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    headers = pa.array([[{"key": None, "value": "v"}]], kafka_type)
    refused({"headers": headers, "value": ["v"]}, "headers", 0)


@pytest.mark.parametrize(
    "array",
    [pa.array([1]), pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32())),
     pa.array([[(1, "v")]], pa.map_(pa.int32(), pa.string())), pa.array([["a"]])],
)
def test_header_column_type_is_checked(array: pa.Array) -> None:
    refused({"headers": array, "value": ["v"]}, "headers", None)


# --- slicing: Spark hands over batches that are views into bigger buffers --------------------


def test_sliced_batches_encode_like_their_rows() -> None:
    n = 12
    batch = pa.record_batch({
        "stream": [f"s{i % 3}" if i % 5 else None for i in range(n)],
        "partition_key": [f"k{i}" if i % 4 else None for i in range(n)],
        "id": [f"id-{i}" for i in range(n)],
        "headers": pa.array([[("h", str(i))] if i % 3 else None for i in range(n)], _MAP),
        "amount": [i * 1.5 if i % 6 else math.nan for i in range(n)],
        "tags": pa.array([[str(i)] * (i % 3) if i % 2 else None for i in range(n)],
                         pa.list_(pa.string())),
        "meta": pa.array([[("i", i)] if i % 2 else None for i in range(n)],
                         pa.map_(pa.string(), pa.int64())),
    })
    whole = encode_batch(batch, OPTIONS)
    for start, length in [(0, n), (1, 5), (7, 5), (11, 1), (3, 0)]:
        part = encode_batch(batch.slice(start, length), OPTIONS)
        for field in ("streams", "topics", "partitioning", "payloads", "headers", "ids"):
            assert getattr(part, field) == getattr(whole, field)[start : start + length], field


def test_binary_base64_is_standard() -> None:
    raw = bytes(range(256))
    (row,) = payload_json({"b": pa.array([raw], pa.binary())})
    assert base64.b64decode(row["b"]) == raw
