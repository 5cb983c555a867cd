"""route(): destinations from a field inside a JSON payload, through a static mapping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from iggy_spark import route


def test_a_dotted_path_is_mapped_and_unknown_values_get_the_default(
    spark: SparkSession, tmp_path: Path
) -> None:
    payloads = [{"event": {"type": "signup"}}, {"event": {"type": "order"}},
                {"event": {"type": "refund"}}, {"event": {}}, {"other": 1}]
    df = spark.createDataFrame([(json.dumps(p),) for p in payloads], "value string")
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"signup": "users/signups", "order": "orders"}))
    rows = route(df, "event.type", mapping, default_topic="unknown",
                 default_stream="events").collect()
    assert [(r.stream, r.topic) for r in rows] == [
        ("users", "signups"), ("events", "orders"), ("events", "unknown"),
        ("events", "unknown"), ("events", "unknown"),
    ]


def test_without_defaults_unmatched_rows_keep_a_null_destination(spark: SparkSession) -> None:
    df = spark.createDataFrame([('{"kind": "a"}',), ('{"kind": "z"}',)], "value string")
    rows = route(df, "kind", {"a": "s/t"}).collect()
    assert [(r.stream, r.topic) for r in rows] == [("s", "t"), (None, None)]


@pytest.mark.parametrize(("field", "mapping", "message"), [
    ("a..b", {"x": "t"}, "bad field path"),
    ("a[0]", {"x": "t"}, "bad field path"),
    ("a", {}, "non-empty"),
    ("a", {"x": "s/t/u"}, "'topic' or 'stream/topic'"),
    ("a", "/nonexistent/mapping.json", "cannot read mapping file"),
])
def test_bad_paths_and_mappings_fail_before_the_query(
    spark: SparkSession, field: str, mapping: object, message: str
) -> None:
    df = spark.createDataFrame([("{}",)], "value string")
    with pytest.raises(ValueError, match=message):
        route(df, field, mapping)  # type: ignore[arg-type]
