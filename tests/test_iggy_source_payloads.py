"""``payload_format``: JSON payloads read back as rows, generic (``json`` with a schema) and as
the change rows ``pg_cdc`` produced, against the local broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apache_iggy
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.errors import AnalysisException, PythonException
from support.broker_fixtures import connect, create_topic, run

from connector_common.change_rows import (
    DERIVED_COLUMNS,
    JSON_TEXT_COLUMNS,
    SPARK_SCHEMA,
    position,
)


def send(address: str, stream: str, topic: str, payloads: list[bytes]) -> None:
    async def main() -> None:
        client = await connect(address)
        await client.create_stream(stream)
        await create_topic(client, stream, topic, 1)
        await client.send_messages(stream, topic, apache_iggy.Partitioning.partition_id(0),
                                   [apache_iggy.SendMessage(p) for p in payloads])

    run(main())


def reader(spark: Any, broker: Any, stream: str, **options: str) -> Any:
    read = spark.read.format("iggy").option("url", broker.url).option("stream", stream)
    for key, value in options.items():
        read = read.option(key, value)
    return read


def test_json_payloads_fill_the_given_schema(spark: Any, broker: Any, name: str) -> None:
    send(broker.address, name, "e", [
        b'{"n": 1, "name": "a", "tags": ["x"], "at": "2026-11-25T10:00:00.5Z", "o": {"k": 1}}',
        b'{"n": 2, "offset": 99}',
    ])
    rows = (reader(spark, broker, name, topics="e", payload_format="json")
            .schema("n long, name string, tags array<string>, at timestamp, o string, "
                    "topic string, offset long").load().orderBy("n").collect())
    assert [r.asDict() for r in rows] == [
        {"n": 1, "name": "a", "tags": ["x"], "o": '{"k": 1}', "topic": "e", "offset": 0,
         "at": datetime(2026, 11, 25, 10, 0, 0, 500000, tzinfo=UTC).replace(tzinfo=None)},
        # a field the payload has wins over the message's column; a missing one is null
        {"n": 2, "name": None, "tags": None, "o": None, "topic": "e", "offset": 99, "at": None},
    ]


@pytest.mark.parametrize(("payload", "message"), [
    (b"not json", "offset 0: the payload is not a JSON object; read it with "
                  "payload_format=binary"),
    (b'[1, 2]', "offset 0: the payload is not a JSON object"),
    (b'{"n": "one"}', "payload field 'n' does not fit the column's type int64"),
    (b'{"n": 1.7}', "payload field 'n' does not fit the column's type int64: 1.7"),
])
def test_a_payload_that_does_not_parse_fails_naming_where(
    spark: Any, broker: Any, name: str, payload: bytes, message: str
) -> None:
    send(broker.address, name, "e", [payload])
    with pytest.raises(PythonException, match=f"SourceError: reading topic 'e': .*{message}"):
        reader(spark, broker, name, topics="e", payload_format="json").schema(
            "n long").load().collect()


@pytest.mark.parametrize(("payload_format", "schema", "message"), [
    ("json", None, "option 'payload_format': json needs the rows' schema"),
    ("binary", "n long", "option 'payload_format': binary has its own columns"),
    ("pg_cdc", "n long", "option 'payload_format': pg_cdc has its own columns"),
    ("avro", None, "option 'payload_format': bad value: expected one of binary, json, pg_cdc"),
])
def test_schema_and_payload_format_must_agree(
    spark: Any, broker: Any, name: str, payload_format: str, schema: str | None, message: str
) -> None:
    read = reader(spark, broker, name, topics="e", payload_format=payload_format)
    with pytest.raises(AnalysisException, match=f"ConfigError: {message}"):
        (read if schema is None else read.schema(schema)).load().collect()


def test_change_rows_routed_into_iggy_come_back_as_pg_cdc_produced_them(
    spark: Any, broker: Any, name: str, tmp_path: Path
) -> None:
    """Change rows through ``iggy_routed`` (as the pipeline sends them) and back through
    ``payload_format=pg_cdc`` are the rows sent, but for ``partition_key``, which the sink
    spends on choosing the partition; ``position``, left out of the payload as the pipeline
    leaves it, is rebuilt."""
    changes = []
    for i in range(40):
        snapshot = i < 4
        changes.append({
            "lsn": f"0/{16 + i:X}", "commit_lsn": f"0/{100 + i // 3:X}",
            "xid": None if snapshot else 700 + i // 3,
            "commit_ts": None if snapshot else datetime(2026, 11, 25, 10, 0, i, 123456),
            "seq": None if snapshot else i % 3, "schema": "public", "table": "orders",
            "op": "read" if snapshot else ("insert", "update", "delete")[i % 3],
            "key": orjson.dumps({"id": i % 7}).decode(),
            "before": None if i % 3 != 2 else orjson.dumps({"id": i % 7, "v": "é"}).decode(),
            "after": None if i % 3 == 2 else orjson.dumps(
                {"id": i % 7, "amount": "12.50", "tags": [1, None], "n": 1.5}).decode(),
            "unchanged": [] if i % 5 else ["blob"],
            "id": f"0/{100 + i // 3:X}:read:[\"public\",\"orders\",{i}]" if snapshot
            else f"0/{100 + i // 3:X}:{i % 3}",
            "stream": name, "topic": "orders", "partition_key": str(i % 7),
        })
    feed = str(tmp_path / "feed")
    spark.createDataFrame(changes, SPARK_SCHEMA).coalesce(1).write.parquet(feed)
    (spark.readStream.schema(SPARK_SCHEMA).parquet(feed).drop(*DERIVED_COLUMNS)
     .writeStream.format("iggy_routed")
     .option("url", broker.url).option("json_columns", ",".join(JSON_TEXT_COLUMNS))
     .option("topic_defaults.partitions_count", "2")
     .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
     .awaitTermination(60))

    back = reader(spark, broker, name, topics="orders", payload_format="pg_cdc").load()
    assert back.schema == SPARK_SCHEMA
    got = {r.lsn: r.asDict(recursive=True) for r in back.collect()}
    for change in changes:
        row = got.pop(change["lsn"])
        expected = {**change, "partition_key": None,
                    "position": position(change["commit_lsn"], change["seq"], change["op"])}
        if change["op"] == "read":  # a snapshot row's id holds key values the payload lost
            expected["id"] = None
        assert row == expected
    assert not got


@pytest.mark.parametrize(("field", "value", "kept"), [
    (pa.field("n", pa.int64()), 1.7, None), (pa.field("n", pa.int64()), 2.0, 2),
    (pa.field("x", pa.float64()), True, None), (pa.field("x", pa.float64()), 3, 3.0),
])
def test_json_numbers_are_never_truncated_or_made_of_booleans(
    field: pa.Field, value: Any, kept: Any
) -> None:
    """Arrow alone would store 1.7 in a long column as 1 and true in a double one as 1.0."""
    from iggy_spark.source.errors import SourceError
    from iggy_spark.source.payloads import parsed_batch
    from iggy_spark.source.schema import ARROW_SCHEMA

    own = pa.RecordBatch.from_pydict({
        "stream": ["s"], "topic": ["t"], "partition": [0], "offset": [7], "id": ["1"],
        "timestamp": [datetime.now(UTC)], "headers": [None],
        "payload": [orjson.dumps({field.name: value})]}, schema=ARROW_SCHEMA)
    rows = pa.schema([field])
    if kept is None:
        with pytest.raises(SourceError, match=f"payload field {field.name!r} does not fit"):
            parsed_batch(rows, False, own)
    else:
        assert parsed_batch(rows, False, own).column(0).to_pylist() == [kept]


def test_a_position_in_the_payload_is_read_and_a_missing_one_rebuilt() -> None:
    """Rows sent by ``iggy_routed`` without dropping ``position`` carry it; the pipeline's
    payloads do not, and get it from ``commit_lsn``, ``seq`` and ``op``."""
    from connector_common.change_rows import ARROW_SCHEMA as CHANGE_ROWS
    from iggy_spark.source.payloads import parsed_batch
    from iggy_spark.source.schema import ARROW_SCHEMA

    payloads = [{"commit_lsn": "1/0", "seq": 2, "op": "insert",
                 "position": {"commit_lsn": 1 << 32, "seq": 2}},
                {"commit_lsn": "1/0", "seq": None, "op": "read"},
                {"commit_lsn": None, "seq": None, "op": "read"}]
    own = pa.RecordBatch.from_pydict({
        "stream": ["s"] * 3, "topic": ["t"] * 3, "partition": [0] * 3, "offset": [1, 2, 3],
        "id": ["1", "2", "3"], "timestamp": [datetime.now(UTC)] * 3, "headers": [None] * 3,
        "payload": [orjson.dumps(p) for p in payloads]}, schema=ARROW_SCHEMA)
    batch = parsed_batch(CHANGE_ROWS, True, own)
    assert batch.column("position").to_pylist() == [
        {"commit_lsn": 1 << 32, "seq": 2}, {"commit_lsn": 1 << 32, "seq": 2**31}, None]


# --- exact JSON text: what pg_cdc wrote comes back as it was written -------------------------

_SPACE = st.sampled_from(["", " ", "\n", "\t ", "\r\n"])
_NUMBER = st.one_of(
    st.integers(-(10**40), 10**40).map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["1.50", "0.000", "-0", "1e400", "-1E-400", "12345678901234567890123456789",
                     "1.0e+2", "0.1", "5e-324"]),
)
_STRING = st.tuples(st.text(), st.booleans()).map(
    lambda s: json.dumps(s[0], ensure_ascii=s[1]))
_SCALAR = st.one_of(_NUMBER, _STRING, st.sampled_from(["true", "false", "null"]))


def _joined(parts: list[str], spaces: list[str], opening: str, closing: str) -> str:
    inner = ",".join(f"{a}{p}{b}" for p, a, b in zip(parts, spaces, reversed(spaces),
                                                    strict=False))
    return f"{opening}{inner}{closing}"


_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.builds(_joined, st.lists(inner, max_size=4), st.lists(_SPACE, min_size=4,
                                                                 max_size=4),
                  st.just("["), st.just("]")),
        st.builds(_joined, st.lists(st.tuples(_STRING, _SPACE, inner).map(
            lambda kv: f"{kv[0]}{kv[1]}:{kv[1]}{kv[2]}"), max_size=4),
                  st.lists(_SPACE, min_size=4, max_size=4), st.just("{"), st.just("}")),
    ),
    max_leaves=25,
)
_JSON_TEXT = st.builds(lambda value, depth, kind: kind[0] * depth + value + kind[1] * depth,
                       _VALUE, st.one_of(st.just(0), st.integers(0, 3000)),
                       st.sampled_from(["[]", ('{"k":', "}")]))


def _messages(payloads: list[bytes]) -> pa.RecordBatch:
    from iggy_spark.source.schema import ARROW_SCHEMA

    n = len(payloads)
    return pa.RecordBatch.from_pydict({
        "stream": ["s"] * n, "topic": ["t"] * n, "partition": [0] * n, "offset": list(range(n)),
        "id": ["1"] * n, "timestamp": [datetime.now(UTC)] * n, "headers": [None] * n,
        "payload": payloads}, schema=ARROW_SCHEMA)


@settings(max_examples=300, deadline=None)
@given(key=_JSON_TEXT, after=_JSON_TEXT, space=_SPACE)
def test_json_texts_come_back_as_pg_cdc_wrote_them(key: str, after: str, space: str) -> None:
    """Big integers, decimals with trailing zeros, numbers past a double's range, escapes,
    white space and values nested thousands deep: ``key``/``after`` are the payload's own text
    (orjson read 30 digits as a double, wrote ``1.50`` as ``1.5``, and refused ``1e400`` and
    1,025 levels: the query failed)."""
    from connector_common.change_rows import ARROW_SCHEMA as CHANGE_ROWS
    from iggy_spark.source.payloads import parsed_batch

    payload = (f'{{"commit_lsn":"0/10",{space}"seq":3,"op":"update","key":{space}{key},'
               f'"after":{after}{space}}}').encode()
    batch = parsed_batch(CHANGE_ROWS, True, _messages([payload]))
    expected = (key, after)
    got = (batch.column("key")[0].as_py(), batch.column("after")[0].as_py())
    for text, back in zip(expected, got, strict=True):
        assert back == (json.loads(text) if text.startswith('"') else
                        None if text == "null" else text)
    assert batch.column("id").to_pylist() == ["0/10:3"]


def test_the_pipelines_payloads_read_as_before() -> None:
    """A payload ``iggy_routed`` wrote (orjson's own text) is read without splitting it."""
    from connector_common.change_rows import ARROW_SCHEMA as CHANGE_ROWS
    from iggy_spark.source.payloads import parsed_batch

    after = {"id": 7, "amount": "12.50", "tags": [1, None], "n": 1.5, "s": "é\u2028\"x\""}
    payload = orjson.dumps({"commit_lsn": "0/10", "seq": 0, "op": "insert", "key": {"id": 7},
                            "after": after})
    batch = parsed_batch(CHANGE_ROWS, True, _messages([payload]))
    assert batch.column("after").to_pylist() == [orjson.dumps(after).decode()]


@given(st.text('[]{}",:0123456789.eE+-truefalsn \\\x01'), st.integers(0, 2))
def test_a_payload_is_json_exactly_when_pythons_json_reads_it(text: str, wrap: int) -> None:
    """The check that stands in for orjson where orjson refuses JSON, against Python's own
    reader (NaN and Infinity refused, as JSON does)."""
    from iggy_spark.source.payloads import _is_json

    def python_reads(candidate: str) -> bool:
        def refuse(word: str) -> Any:
            raise ValueError(word)

        try:
            json.loads(candidate, parse_constant=refuse)
        except (ValueError, RecursionError):
            return False
        return True

    candidate = "[" * wrap + text + "]" * wrap
    assert _is_json(candidate) == python_reads(candidate)


@pytest.mark.parametrize("payload", [
    b'{"after":' + b"[" * 5000 + b"]" * 4999 + b"}",
    b'{"after":' + b"[" * 5000 + b"1," + b"]" * 5000 + b"}",
    b'{"after":1e400,}', b'{"after":1e400}x', b"[1e400]", b'{"after":1e400', b"\xff",
])
def test_a_payload_orjson_refuses_that_is_no_json_object_is_refused(payload: bytes) -> None:
    from connector_common.change_rows import ARROW_SCHEMA as CHANGE_ROWS
    from iggy_spark.source.errors import SourceError
    from iggy_spark.source.payloads import parsed_batch

    with pytest.raises(SourceError, match="offset 0: the payload is not a JSON object"):
        parsed_batch(CHANGE_ROWS, True, _messages([payload]))


def test_a_field_orjson_cannot_read_fails_only_the_column_that_needs_its_value() -> None:
    """``1e400`` is text to a string column, and refused by a double column naming it."""
    from iggy_spark.source.errors import SourceError
    from iggy_spark.source.payloads import parsed_batch

    payload = b'{"s":1e400,"x":1e400,"deep":' + b"[" * 2000 + b"]" * 2000 + b"}"
    text = pa.schema([pa.field("s", pa.string()), pa.field("deep", pa.string())])
    assert parsed_batch(text, False, _messages([payload])).to_pylist() == [
        {"s": "1e400", "deep": "[" * 2000 + "]" * 2000}]
    with pytest.raises(SourceError, match="payload field 'x' does not fit the column's type "
                                          "double: number is infinity"):
        parsed_batch(pa.schema([pa.field("x", pa.float64())]), False, _messages([payload]))
