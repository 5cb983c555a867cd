"""What ``connector_common.spark_versions`` fills in for pyspark 4.0 and 4.1.

Where a batch starts when Spark does not say (the sequences measured on 4.0.5 and 4.1.4, played
against :class:`BatchStarts`), and the Rows a 4.0 stream writer gets turned into exactly the
Arrow batches Spark's own Arrow path makes from the same DataFrame.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from connector_common.spark_versions import ROWS_PER_BATCH, BatchStarts, arrow_batches

pytestmark = pytest.mark.spark_tier


def _initial() -> dict[str, Any]:
    return {"n": 0}


def test_a_given_start_wins() -> None:
    starts = BatchStarts()
    starts.planned({"n": 4})
    assert starts.start({"n": 2}, _initial) == {"n": 2}


def test_a_new_query_starts_at_the_initial_offset() -> None:
    assert BatchStarts().start(None, _initial) == {"n": 0}


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=20))
def test_the_next_batch_starts_where_the_last_planned_one_ended(ends: list[int]) -> None:
    # a run, a restart's partitions(x, x), or a replay: the last end asked for is the start
    starts = BatchStarts()
    for end in ends:
        starts.planned({"n": end})
        assert starts.start(None, _initial) == {"n": end}


def test_rows_become_the_arrow_batches_spark_makes(spark: SparkSession) -> None:
    df = spark.sql("""
        SELECT id, CAST(id AS STRING) AS text, CAST(CAST(id AS STRING) AS BINARY) AS bytes,
               CAST(id AS DECIMAL(10, 2)) / 4 AS amount,
               TIMESTAMP '2024-03-31 01:30:00' + make_interval(0, 0, 0, 0, id) AS at,
               DATE '2024-01-01' + CAST(id AS INT) AS day,
               map('k', CAST(id AS STRING)) AS headers,
               named_struct('a', id, 'b', array(id, id + 1)) AS nested,
               IF(id % 3 = 0, NULL, id) AS sometimes
        FROM range(25)
    """)
    expected = df.toArrow()
    converted = pa.Table.from_batches(list(arrow_batches(df.collect(), df.schema)))
    assert converted.cast(expected.schema).equals(expected)
    assert converted.column("amount")[1].as_py() == Decimal("0.25")
    assert converted.column("at")[0].as_py() == datetime.datetime(
        2024, 3, 31, 1, 30, tzinfo=datetime.UTC)


def test_arrow_batches_pass_through_and_rows_come_in_bounded_batches() -> None:
    from pyspark.sql import Row
    from pyspark.sql.types import LongType, StructField, StructType

    batch = pa.RecordBatch.from_pydict({"id": [1, 2]})
    assert list(arrow_batches(iter([batch]), None)) == [batch]
    schema = StructType([StructField("id", LongType())])
    rows = [Row(id=i) for i in range(ROWS_PER_BATCH + 1)]
    sizes = [b.num_rows for b in arrow_batches(iter(rows), schema)]
    assert sizes == [ROWS_PER_BATCH, 1]
