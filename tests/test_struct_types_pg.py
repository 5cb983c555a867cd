"""``row_format=struct``'s types and values on a real server: a table of every listed type, its
Spark types read from the catalog, and each value typed from Postgres's output text equal to
what both decoders give in the JSON mode for the same insert."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
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
from support.struct_values import from_json, same

from connector_common.lsn import parse_lsn
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.catalog import CATALOG_QUERY, table_info_from_rows
from postgres_cdc_source.decoding import Change
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder, pgoutput_options
from postgres_cdc_source.decoding.text_format import TEST_DECODING_OPTIONS, TextFormatDecoder
from postgres_cdc_source.struct_types import struct_schema, table_struct
from postgres_cdc_source.values import SESSION_SETTINGS

pytestmark = [pytest.mark.services, pytest.mark.contrib]  # both decoders: test_decoding too

SESSION = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())

# (column, its type, the Spark type, SQL literals: edges, NULL)
COLUMNS: list[tuple[str, str, DataType, list[str]]] = [
    ("i2", "smallint", ShortType(), ["-32768", "32767", "NULL"]),
    ("i4", "integer", IntegerType(), ["-2147483648", "0", "2147483647"]),
    ("i8", "bigint", LongType(), ["-9223372036854775808", "1", "9223372036854775807"]),
    ("amount", "numeric(10,2)", DecimalType(10, 2), ["-99999999.99", "0", "12.5"]),
    ("huge", "numeric(38,0)", DecimalType(38, 0), ["-" + "9" * 38, "1", "9" * 38]),
    ("hundreds", "numeric(3,-2)", DecimalType(5, 0), ["99900", "-100", "0"]),
    ("free", "numeric", StringType(),
     ["'NaN'", "1e-30", "123456789012345678901234567890.123456789"]),
    ("f4", "real", FloatType(), ["'NaN'", "3.4028235e38", "1.17549435e-38"]),
    ("f8", "double precision", DoubleType(), ["'-Infinity'", "0.1", "1e308"]),
    ("b", "boolean", BooleanType(), ["true", "false", "NULL"]),
    ("t", "text", StringType(), ["E'a\"b\\\\c\\n\\t\\x01'", "''", "'é 🦀'"]),
    ("vc", "varchar(9)", StringType(), ["'x y'", "'NULL'", "''"]),
    ("c", "char(4)", StringType(), ["'ab'", "''", "'abcd'"]),
    ("bin", "bytea", BinaryType(), ["'\\x00ff'", "''", "'\\xdeadbeef'"]),
    ("d", "date", DateType(), ["'0001-01-01'", "'2024-02-29'", "'9999-12-31'"]),
    ("ts", "timestamp", TimestampNTZType(),
     ["'0001-01-01 00:00:00'", "'2024-01-02 03:04:05.5'", "'9999-12-31 23:59:59.999999'"]),
    ("tstz", "timestamptz", TimestampType(),
     ["'2024-01-02 03:04:05.5+05:30'", "'1970-01-01 00:00:00+00'", "'9999-12-30 00:00:01+00'"]),
    ("j", "json", StringType(), ["'{\"k\": [1, 2.50],  \"z\" : null}'", "'3'", "'[]'"]),
    ("jb", "jsonb", StringType(), ["'{\"k\": [1, 2.50], \"a\": \"\\u00e9\"}'", "'null'", "'{}'"]),
    ("u", "uuid", StringType(), ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "NULL", "NULL"]),
    ("mood", "{schema}.mood", StringType(), ["'happy'", "'sad'", "NULL"]),
    ("pos", "{schema}.positive", IntegerType(), ["1", "2147483647", "NULL"]),
    ("price", "{schema}.price", DecimalType(6, 2), ["9999.99", "-0.01", "NULL"]),
    ("pair", "{schema}.pair", StringType(), ["ROW(1, 'a b')", "ROW(NULL, NULL)", "NULL"]),
    ("span", "int4range", StringType(), ["'[1,5)'", "'empty'", "NULL"]),
    ("iv", "interval", StringType(), ["'1 day 2 hours'", "'-3 years'", "NULL"]),
    ("m", "money", StringType(), ["'12.34'", "NULL", "NULL"]),
    ("p", "point", StringType(), ["'(1,2)'", "NULL", "NULL"]),
    ("ints", "integer[]", ArrayType(IntegerType()), ["'{1,NULL,3}'", "'{}'", "NULL"]),
    ("texts", "text[]", ArrayType(StringType()),
     ["ARRAY['a b', 'NULL', NULL, '\"', '']", "'{}'", "'{x}'"]),
    ("amounts", "numeric(5,1)[]", ArrayType(DecimalType(5, 1)), ["'{1.5,-9999.9}'", "NULL",
                                                                  "'{}'"]),
    ("stamps", "timestamptz[]", ArrayType(TimestampType()),
     ["ARRAY['2024-01-02 03:04:05+00'::timestamptz]", "NULL", "'{}'"]),
    ("moods", "{schema}.mood[]", ArrayType(StringType()), ["'{happy,sad}'", "NULL", "'{}'"]),
    ("positives", "{schema}.positive[]", ArrayType(IntegerType()), ["'{1,2}'", "NULL", "'{}'"]),
]


@pytest.fixture
def table(pg: LocalPostgres) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    schema = "st_" + uuid.uuid4().hex[:10]
    with pg.connect(options=SESSION) as conn:
        s = sql.Identifier(schema)
        for statement in (
            "CREATE SCHEMA {s}",
            "CREATE TYPE {s}.mood AS ENUM ('happy', 'sad')",
            "CREATE DOMAIN {s}.positive AS integer CHECK (VALUE > 0)",
            "CREATE DOMAIN {s}.price AS numeric(6,2)",
            "CREATE TYPE {s}.pair AS (n integer, s text)",
        ):
            conn.execute(sql.SQL(statement).format(s=s))
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(pg_type.format(
                schema=s.as_string(conn)))) for name, pg_type, _, _ in COLUMNS)
        conn.execute(sql.SQL("CREATE TABLE {}.t (id integer PRIMARY KEY, {})").format(
            s, columns))
        yield conn, schema
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(s))


def _peek(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[Change]]:
    """The table's inserts as each decoder gives them (JSON mode)."""
    name = schema
    conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}.t").format(
        sql.Identifier(name), sql.Identifier(schema)))
    for suffix, plugin in (("_po", "pgoutput"), ("_td", "test_decoding")):
        conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (name + suffix, plugin))
    try:
        yield_rows = _insert_rows(conn, schema)
        got: dict[str, list[Change]] = {}
        for suffix, function, options in (
            ("_po", "pg_logical_slot_peek_binary_changes", pgoutput_options([name])),
            ("_td", "pg_logical_slot_peek_changes", TEST_DECODING_OPTIONS),
        ):
            rows = conn.execute(
                sql.SQL("SELECT lsn::text, xid::text::int8, data FROM {}(%s, NULL, NULL, "
                        "VARIADIC %s::text[])").format(sql.Identifier(function)),
                (name + suffix, [x for pair in options.items() for x in pair])).fetchall()
            peeked = [(parse_lsn(lsn), xid, data) for lsn, xid, data in rows]
            if suffix == "_po":
                events = PgOutputDecoder().events(peeked)
            else:
                events = TextFormatDecoder(lambda sc, t: table_info_from_rows(
                    sc, t, conn.execute(CATALOG_QUERY, (sc, t)).fetchall())).events(peeked)
            got[suffix] = [e for e in events if type(e) is Change]
        assert yield_rows == len(got["_po"]) == len(got["_td"])
        return got
    finally:
        for suffix in ("_po", "_td"):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name + suffix,))
        conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(name)))


def _insert_rows(conn: psycopg.Connection[Any], schema: str) -> int:
    rows = len(COLUMNS[0][3])
    names = sql.SQL(", ").join(sql.Identifier(c[0]) for c in COLUMNS)
    for i in range(rows):
        values = sql.SQL(", ").join(sql.SQL(c[3][i]) for c in COLUMNS)
        conn.execute(sql.SQL("INSERT INTO {}.t (id, {}) VALUES ({}, {})").format(
            sql.Identifier(schema), names, sql.Literal(i), values))
    return rows


def test_every_listed_type_is_typed_and_equals_both_decoders_json(
    table: tuple[psycopg.Connection[Any], str],
) -> None:
    conn, schema = table
    conn.execute(sql.SQL("ALTER TABLE {}.t ADD COLUMN g integer GENERATED ALWAYS AS (id + 1) "
                         "STORED").format(sql.Identifier(schema)))  # not sent: not typed
    found = table_struct(conn, schema, "t")
    assert found is not None and found.key == ("id",)
    typed = found.columns
    assert [(c.name, c.spark) for c in typed] == [("id", IntegerType())] + [
        (name, spark) for name, _, spark, _ in COLUMNS]
    row, key = struct_schema({f"{schema}.t": found})
    assert key.fieldNames() == ["id"] and row.fieldNames() == [c.name for c in typed]
    assert table_struct(conn, schema, "gone") is None

    changes = _peek(conn, schema)
    texts = conn.execute(sql.SQL("SELECT {} FROM {}.t ORDER BY id").format(
        sql.SQL(", ").join(sql.SQL("format('%%s', {})").format(sql.Identifier(c.name))
                           for c in typed), sql.Identifier(schema)), []).fetchall()
    # num_nulls: a composite of nulls IS NULL, yet it is a value
    nulls = conn.execute(sql.SQL("SELECT {} FROM {}.t ORDER BY id").format(
        sql.SQL(", ").join(sql.SQL("num_nulls({}) = 1").format(sql.Identifier(c.name))
                           for c in typed), sql.Identifier(schema))).fetchall()
    for plugin, inserts in changes.items():
        for row_texts, row_nulls, change in zip(texts, nulls, inserts, strict=True):
            assert change.after is not None
            after = orjson.loads(change.after)
            for column, text, null in zip(typed, row_texts, row_nulls, strict=True):
                value = None if null else column.convert(text)
                if column.name in ("j", "jb") and value is not None:  # the text, embedded
                    assert orjson.loads(value) == after[column.name]
                    continue
                expected = from_json(column.spark, after[column.name])
                assert same(value, expected), (plugin, column.name, text, value, expected)
