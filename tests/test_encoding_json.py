"""Arrow batch → JSON payloads: round trips of every type, hostile strings and column names,
zoned timestamps, non-finite floats, and the columns refused; each on both ways of joining the
payloads, the compiled core's and Arrow's (the pure-Python path)."""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.encoding import URL, encode, payload_json, refused

from connector_common import compiled_core
from iggy_spark.sink.encoding import encode_batch
from iggy_spark.sink.options import RoutedOptions

# Text hypothesis can put in an Arrow string: any code point but lone surrogates.
_unicode = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)



@pytest.fixture(autouse=True, scope="module", params=["compiled", "python"])
def payload_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs on both paths: the payloads joined by the compiled core (which
    ``./run`` installs wherever it runs the tests) and by Arrow."""
    module = importlib.import_module("iggy_spark_core") if request.param == "compiled" else None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_core, "core", lambda: module)
        yield request.param


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


def test_a_slice_of_a_batch_gives_the_payloads_of_its_rows() -> None:
    """Spark's batches can be views into bigger buffers: the core reads a column's strings,
    nulls and JSON texts from the slice's offset (test_encoding slices the other columns)."""
    texts = ["a", None, 'q"uote', "é", None, "z"]
    batch = pa.record_batch({"s": pa.array(texts, pa.string()), "n": list(range(6)),
                             "doc": pa.array([None, "[1]", "{}", None, "2", "3"])})
    for start, length in [(0, 6), (1, 4), (3, 3), (5, 1), (2, 0)]:
        whole = encode_batch(pa.record_batch(batch.slice(start, length).to_pydict(),
                                             schema=batch.schema), _JSON_ROUTED).payloads
        assert encode_batch(batch.slice(start, length), _JSON_ROUTED).payloads == whole


def test_held_payloads_cost_about_their_own_size_in_memory(payload_path: str) -> None:
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
    environment = {**os.environ, compiled_core.ENVIRONMENT: (
        "python" if payload_path == "python" else "")}
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, env=environment).stdout  # its allocator holds nothing
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
