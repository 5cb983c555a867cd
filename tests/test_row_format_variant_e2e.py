"""``row_format=variant`` end to end: real Spark, real Postgres.

One query reads two tables of different shapes as VARIANT rows through the snapshot, inserts,
an update that leaves a TOASTed value alone, a column added while it runs and a delete, and
reads their values with Spark's own variant SQL: ``after:amount::decimal(10,2)``,
``variant_get``, a timestamp, a date, a jsonb path. Nothing stops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import SparkSession

from iggy_spark_testing.harness import LocalPostgres

pytestmark = pytest.mark.e2e

BIG = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 300) g)"
"""An incompressible 9,600-character text: stored out of line (TOAST)."""


@pytest.fixture
def tables(pg: LocalPostgres, name: str) -> Iterator[tuple[sql.Composable, sql.Composable]]:
    orders, refunds = sql.Identifier(name, "orders"), sql.Identifier(name, "refunds")
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, amount numeric(10,2), "
                             "at timestamptz, doc jsonb, big text)").format(orders))
        conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, reason text, day date)")
                     .format(refunds))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 120.50, '2024-01-02 03:04:05.5+00', "
                             "'{{\"k\": [1, 2.50]}}', " + BIG + ")").format(orders))
    yield orders, refunds
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE slot_name = %s", (name,))


def test_tables_of_any_shape_are_variant_rows_spark_queries(
    spark: SparkSession, pg: LocalPostgres, name: str,
    tables: tuple[sql.Composable, sql.Composable], tmp_path: Path,
) -> None:
    orders, refunds = tables
    changes = spark.readStream.format("pg_cdc").options(
        dsn=pg.dsn, slot=name, snapshot="initial", include_tables=f"{name}\\..*",
        row_format="variant").load()
    assert changes.schema["after"].dataType.simpleString() == "variant"
    query = (changes.selectExpr(
        "position", "table", "op", "unchanged", "variant_get(key, '$.id', 'long') AS key_id",
        "after:amount::decimal(10,2) AS amount", "after:at::timestamp AS at",
        "after:doc.k[1]::decimal(4,2) AS k1", "after:big::string IS NULL AS no_big",
        "after:day::date AS day", "after:reason::string AS reason", "after:extra::int AS extra",
        "schema_of_variant(after:day) AS day_type")
        .writeStream.format("memory").queryName(name)
        .option("checkpointLocation", str(tmp_path / "chk")).start())
    try:
        query.processAllAvailable()  # the snapshot
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            run = conn.execute
            run(sql.SQL("INSERT INTO {} VALUES (7, 'broken', '2024-02-29')").format(refunds))
            run(sql.SQL("UPDATE {} SET amount = 99.99 WHERE id = 1").format(orders))  # big kept
            run(sql.SQL("ALTER TABLE {} ADD COLUMN extra int").format(orders))
            run(sql.SQL("INSERT INTO {} (id, amount, extra) VALUES (2, 0.10, 5)").format(orders))
            run(sql.SQL("DELETE FROM {} WHERE id = 7").format(refunds))
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    rows: list[Any] = spark.table(name).orderBy("position").drop("position").collect()
    at = datetime(2024, 1, 2, 3, 4, 5, 500000)  # the session's time zone is UTC
    assert [tuple(r) for r in rows] == [
        ("orders", "read", [], 1, Decimal("120.50"), at, Decimal("2.50"), False, None, None,
         None, None),
        ("refunds", "insert", [], 7, None, None, None, True, date(2024, 2, 29), "broken", None,
         "DATE"),
        ("orders", "update", ["big"], 1, Decimal("99.99"), at, Decimal("2.50"), True, None,
         None, None, None),
        ("orders", "insert", [], 2, Decimal("0.10"), None, None, True, None, None, 5, None),
        ("refunds", "delete", [], 7, None, None, None, True, None, None, None, None),
    ]
