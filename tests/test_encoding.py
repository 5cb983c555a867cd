"""Arrow batch → message parts: payloads (value and JSON), ids, partitioning, headers,
destinations; JSON round trips, hostile strings, stable ids, sliced batches, refusals."""

from __future__ import annotations

import base64
import math
import subprocess
import sys
import textwrap
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iggy_spark.errors import EncodingError
from iggy_spark.sink.encoding import MAX_KEY_BYTES, EncodedBatch, encode_batch, message_id
from iggy_spark.sink.options import RoutedOptions

URL = "iggy://u:p@localhost:8090"
OPTIONS = RoutedOptions.from_options({"url": URL})
KEY_U32 = RoutedOptions.from_options({"url": URL, "partition_key_encoding": "key_u32"})
PARTITION_ID = RoutedOptions.from_options(
    {"url": URL, "partition_key_encoding": "partition_id", "create_destinations": "false"}
)

# Text hypothesis can put in an Arrow string: any code point but lone surrogates.
_unicode = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)


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


# --- JSON payloads ---------------------------------------------------------------------------


def test_routing_columns_stay_out_of_the_json() -> None:
    rows = payload_json({
        "stream": ["s"], "topic": ["t"], "partition_key": ["k"], "id": [1],
        "headers": pa.array([None], pa.map_(pa.string(), pa.string())),
        "a": [1], "b": ["x"],
    })
    assert rows == [{"a": 1, "b": "x"}]


def test_only_routing_columns_gives_an_empty_object() -> None:
    assert encode({"stream": ["s", "s"]}).payloads == [b"{}", b"{}"]


def test_held_payloads_cost_about_their_own_size_in_memory() -> None:
    """The writer holds a flush's worth of payloads (``max_batch_bytes`` of them): their memory
    must follow their bytes. orjson's output would keep a block of about 4 KB per payload (200
    MiB here for 6 MB of payloads), so ``max_batch_bytes`` would not bound memory at all."""
    script = textwrap.dedent("""
        import psutil, pyarrow as pa
        from iggy_spark.sink.encoding import encode_batch
        from iggy_spark.sink.options import RoutedOptions
        options = RoutedOptions.from_options({"url": "iggy://u:p@localhost:8090"})
        batch = pa.record_batch({"n": list(range(10_000)), "note": ["x" * 100] * 10_000})
        process = psutil.Process()
        before = process.memory_info().rss
        held = [encode_batch(batch, options).payloads for _ in range(5)]
        print(process.memory_info().rss - before, sum(len(p) for b in held for p in b))
    """)
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True).stdout  # a fresh interpreter: its allocator holds nothing
    grown, payload_bytes = map(int, out.split())
    assert payload_bytes > 5_000_000
    assert grown < 3 * payload_bytes, f"{grown:,} bytes of memory for {payload_bytes:,}"


_JSON_ROUTED = RoutedOptions.from_options({"url": URL, "json_columns": "doc"})
_json_doc = st.one_of(st.none(), st.dictionaries(
    _unicode, st.integers(-(2**63), 2**63 - 1) | _unicode, max_size=3))


@settings(max_examples=200)
@given(st.lists(st.tuples(
    st.none() | _unicode, st.none() | st.integers(-(2**63), 2**63 - 1), st.none() | st.booleans(),
    st.none() | st.floats(allow_nan=False, allow_infinity=False), _json_doc,
    st.none() | st.lists(st.none() | _unicode, max_size=3),
), max_size=12), st.sampled_from([pa.string(), pa.large_string()]), st.booleans())
def test_payloads_are_byte_for_byte_what_orjson_writes_for_the_row(
    rows: list[tuple[Any, ...]], text_type: pa.DataType, dictionary: bool
) -> None:
    """The payload is built column by column; it must equal, byte for byte, orjson's dump of
    the row as a dict: strings with quotes, backslashes, control characters and any Unicode,
    64-bit integers, booleans, floats, lists of strings, nulls, a json_columns column embedded
    as it is, and a column name that itself needs escaping."""
    texts = pa.array([r[0] for r in rows], text_type)
    docs = [None if r[4] is None else orjson.dumps(r[4]).decode() for r in rows]
    batch = {
        'we"ird\\name': texts.dictionary_encode() if dictionary else texts,
        "n": pa.array([r[1] for r in rows], pa.int64()),
        "b": pa.array([r[2] for r in rows], pa.bool_()),
        "f": pa.array([r[3] for r in rows], pa.float64()),
        "doc": pa.array(docs, pa.string()),
        "topic": pa.array(["t"] * len(rows), pa.string()),  # routing: not in the payload
        "l": pa.array([r[5] for r in rows], pa.list_(text_type)),
    }
    expected = [
        orjson.dumps({'we"ird\\name': s, "n": n, "b": b, "f": f,
                      "doc": None if doc is None else orjson.Fragment(doc), "l": items})
        for (s, n, b, f, _, items), doc in zip(rows, docs, strict=True)
    ]
    assert encode(batch, _JSON_ROUTED).payloads == expected


def test_a_json_columns_column_that_is_not_text_is_refused() -> None:
    refused({"doc": [1, 2]}, "doc", None, _JSON_ROUTED)


def test_json_scalar_types_round_trip() -> None:
    ts = datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC)
    rows = payload_json({
        "i": pa.array([1, None], pa.int64()),
        "u": pa.array([2**64 - 1, 0], pa.uint64()),
        "f": [1.5, None],
        "b": [True, False],
        "s": ["x", None],
        "dec": pa.array([Decimal("-12.50"), Decimal("0.00")], pa.decimal128(10, 2)),
        "big": pa.array([Decimal("1" * 30 + ".1234567")], pa.decimal128(38, 7)).take([0, 0]),
        "d": pa.array([date(2024, 2, 29), None], pa.date32()),
        "ts": pa.array([ts, None], pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([datetime(2024, 1, 1, 12, 0), None], pa.timestamp("us")),
        "ms": pa.array([datetime(2024, 1, 1, 0, 0, 0, 5000)] * 2, pa.timestamp("ms")),
        "sec": pa.array([datetime(2024, 1, 1)] * 2, pa.timestamp("s", tz="UTC")),
        "t": pa.array([time(1, 2, 3, 4), None], pa.time64("us")),
        "bin": pa.array([b"\x00\xfe", None], pa.binary()),
        "n": pa.array([None, None], pa.null()),
    })
    assert rows[0] == {
        "i": 1, "u": 2**64 - 1, "f": 1.5, "b": True, "s": "x", "dec": "-12.50",
        "big": "1" * 30 + ".1234567", "d": "2024-02-29", "ts": "2024-02-29T23:59:58.123456Z",
        "ntz": "2024-01-01T12:00:00.000000", "ms": "2024-01-01T00:00:00.005",
        "sec": "2024-01-01T00:00:00Z", "t": "01:02:03.000004", "bin": "AP4=", "n": None,
    }
    assert rows[1]["dec"] == "0.00" and rows[1]["ts"] is None and rows[1]["bin"] is None
    assert datetime.fromisoformat(rows[0]["ts"]) == ts


def test_zoned_timestamps_are_written_as_utc_instants() -> None:
    instant = datetime(2024, 7, 1, 12, 0, tzinfo=timezone(timedelta(hours=-4)))
    array = pa.array([instant], pa.timestamp("us", tz="America/New_York"))
    nested = pa.StructArray.from_arrays([array], names=["at"])
    (row,) = payload_json({"at": array, "nested": nested})
    assert row["at"] == row["nested"]["at"] == "2024-07-01T16:00:00.000000Z"
    assert datetime.fromisoformat(row["at"]) == instant


def test_nested_types_round_trip() -> None:
    struct = pa.array(
        [{"amount": Decimal("1.10"), "raw": b"ab", "at": datetime(2024, 1, 1, tzinfo=UTC),
          "tags": ["x", None], "inner": {"d": date(2020, 5, 17)}}, None],
        pa.struct([("amount", pa.decimal128(5, 2)), ("raw", pa.binary()),
                   ("at", pa.timestamp("us", tz="UTC")), ("tags", pa.list_(pa.string())),
                   ("inner", pa.struct([("d", pa.date32())]))]),
    )
    rows = payload_json({
        "s": struct,
        "ints": pa.array([[1, 2], None], pa.large_list(pa.int32())),
        "m": pa.array([[("k", 1), ("j", None)], []], pa.map_(pa.string(), pa.int64())),
        "im": pa.array([[(1, "one")], None], pa.map_(pa.int32(), pa.string())),
        "bm": pa.array([[(b"\x01", b"\x02")], None], pa.map_(pa.binary(), pa.binary())),
        "fixed": pa.array([[1.5, 2.5], None], pa.list_(pa.float64(), 2)),
        "lm": pa.array([[[("a", 1)]], None], pa.list_(pa.map_(pa.string(), pa.int8()))),
    })
    assert rows[0] == {
        "s": {"amount": "1.10", "raw": "YWI=", "at": "2024-01-01T00:00:00.000000Z",
              "tags": ["x", None], "inner": {"d": "2020-05-17"}},
        "ints": [1, 2], "m": {"k": 1, "j": None}, "im": {"1": "one"}, "bm": {"AQ==": "Ag=="},
        "fixed": [1.5, 2.5], "lm": [{"a": 1}],
    }
    assert rows[1] == {"s": None, "ints": None, "m": {}, "im": None, "bm": None,
                       "fixed": None, "lm": None}


def test_non_finite_floats_become_spark_style_strings() -> None:
    rows = payload_json({
        "f": [math.nan, math.inf, -math.inf, 1.0, None],
        "f32": pa.array([math.nan, 1.0, 2.0, 3.0, 4.0], pa.float32()),
        "l": pa.array([[math.nan, 1.0]] * 5, pa.list_(pa.float64())),
        "s": pa.array([{"x": -math.inf}] * 5, pa.struct([("x", pa.float64())])),
    })
    assert [r["f"] for r in rows] == ["NaN", "Infinity", "-Infinity", 1.0, None]
    assert rows[0]["f32"] == "NaN" and rows[1]["f32"] == 1.0
    assert rows[0]["l"] == ["NaN", 1.0] and rows[0]["s"] == {"x": "-Infinity"}


def test_dictionary_payload_column() -> None:
    rows = payload_json({"cat": pa.array(["a", None, "a"]).dictionary_encode()})
    assert [r["cat"] for r in rows] == ["a", None, "a"]


@pytest.mark.parametrize(
    "array",
    [
        pa.array([timedelta(seconds=1)], pa.duration("us")),
        pa.array([[timedelta(seconds=1)]], pa.list_(pa.duration("us"))),
        pa.array([1.0], pa.float16()),
        pa.array([{"t": datetime(2024, 1, 1)}], pa.struct([("t", pa.timestamp("ns"))])),
    ],
)
def test_unsupported_json_types_name_the_column(array: pa.Array) -> None:
    error = refused({"odd": array}, "odd", None)
    assert "cannot be written as JSON" in str(error)


@given(st.lists(st.one_of(st.none(), _unicode), min_size=1, max_size=20))
def test_hostile_strings_round_trip(values: list[str | None]) -> None:
    rows = payload_json({"text": pa.array(values, pa.string()),
                         "nested": pa.array([[v] for v in values], pa.list_(pa.string()))})
    assert [r["text"] for r in rows] == values
    assert [r["nested"] for r in rows] == [[v] for v in values]


@given(st.dictionaries(_unicode.filter(bool), st.integers(-(2**63), 2**63 - 1), max_size=5))
def test_hostile_column_names_round_trip(columns: dict[str, int]) -> None:
    routing = {"stream", "topic", "partition_key", "partition_id", "value", "headers", "id"}
    columns = {k: v for k, v in columns.items() if k not in routing}
    batch = {name: pa.array([value], pa.int64()) for name, value in columns.items()}
    if batch:
        assert payload_json(batch) == [columns]


_instants = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


_decimals = st.decimals(min_value=-(10**6), max_value=10**6, places=3, allow_nan=False)


@settings(max_examples=50)
@given(
    values=st.lists(st.none() | st.tuples(_instants, _decimals), min_size=1, max_size=10),
    unit=st.sampled_from(["s", "ms", "us"]),
    zoned=st.booleans(),
)
def test_top_level_and_nested_values_are_formatted_alike(
    values: list[tuple[datetime, Decimal] | None], unit: str, zoned: bool
) -> None:
    """Top-level columns are formatted by Arrow, nested ones in Python: same text either way."""
    instants = [(v[0] if zoned else v[0].replace(tzinfo=None)) if v else None for v in values]
    ts_type = pa.timestamp(unit, tz="UTC" if zoned else None)
    columns = {
        "ts": pa.array(instants, pa.timestamp("us", tz=ts_type.tz)).cast(ts_type, safe=False),
        "d": pa.array([v.date() if v else None for v in instants], pa.date32()),
        "t": pa.array([v.time() if v else None for v in instants], pa.time64("us")),
        "dec": pa.array([v[1] if v else None for v in values], pa.decimal128(12, 3)),
    }
    nested = pa.StructArray.from_arrays(list(columns.values()), names=list(columns))
    for row in payload_json({**columns, "nested": nested}):
        assert {name: row[name] for name in columns} == row["nested"]
        if row["ts"] is not None:
            assert (datetime.fromisoformat(row["ts"]).tzinfo is not None) == zoned


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
