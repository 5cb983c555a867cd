"""``row_format=struct``'s types and values on a real server: a table of every listed type, its
Spark types read from the catalog, and each value typed from Postgres's output text equal to
what both decoders give in the JSON mode for the same insert."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import psycopg
import pyarrow as pa
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
from postgres_cdc_source.decoding import Change, Retyping
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder, pgoutput_options
from postgres_cdc_source.decoding.text_format import TEST_DECODING_OPTIONS, TextFormatDecoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.pg_types import SESSION_SETTINGS
from postgres_cdc_source.rows.struct.catalog import table_struct
from postgres_cdc_source.rows.struct.images import image_array
from postgres_cdc_source.rows.struct.json_text import image_renderer
from postgres_cdc_source.rows.struct.structs import StructRows, struct_schema
from postgres_cdc_source.rows.struct.types import spark_typed

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


def _peek(conn: psycopg.Connection[Any], schema: str, typed: Retyping | None = None,
          write: Callable[[psycopg.Connection[Any], str], int] | None = None,
          keep_values: bool = False) -> dict[str, list[Change]]:
    """The table's inserts (or the changes ``write`` makes) as each decoder gives them in the
    JSON mode, and with ``typed`` also typed by it (``_po_typed``, ``_td_typed``: the struct
    or the variant mode); ``keep_values``: with the values the routing options read."""
    name = schema
    conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}.t").format(
        sql.Identifier(name), sql.Identifier(schema)))
    for suffix, plugin in (("_po", "pgoutput"), ("_td", "test_decoding")):
        conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (name + suffix, plugin))
    try:
        yield_rows = (write or _insert_rows)(conn, schema)
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
            for mode, retyping in (("", None), ("_typed", typed)) if typed else (("", None),):
                if suffix == "_po":
                    events = PgOutputDecoder(typed=retyping, keep_values=keep_values
                                             ).events(peeked)
                else:
                    events = TextFormatDecoder(lambda sc, t: table_info_from_rows(
                        sc, t, conn.execute(CATALOG_QUERY, (sc, t)).fetchall()),
                        typed=retyping, keep_values=keep_values).events(peeked)
                got[suffix + mode] = [e for e in events if type(e) is Change]
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

    typed_rows = StructRows.of({f"{schema}.t": found})
    changes = _peek(conn, schema, typed_rows)
    texts = conn.execute(sql.SQL("SELECT {} FROM {}.t ORDER BY id").format(
        sql.SQL(", ").join(sql.SQL("format('%%s', {})").format(sql.Identifier(c.name))
                           for c in typed), sql.Identifier(schema)), []).fetchall()
    # num_nulls: a composite of nulls IS NULL, yet it is a value
    nulls = conn.execute(sql.SQL("SELECT {} FROM {}.t ORDER BY id").format(
        sql.SQL(", ").join(sql.SQL("num_nulls({}) = 1").format(sql.Identifier(c.name))
                           for c in typed), sql.Identifier(schema))).fetchall()
    for plugin in ("_po", "_td"):  # the decoders' images, as the batch makes them
        images = image_array([c.after for c in changes.pop(plugin + "_typed")],
                             typed_rows.row_arrow).to_pylist()
        for row_texts, row_nulls, image in zip(texts, nulls, images, strict=True):
            for column, text, null in zip(typed, row_texts, row_nulls, strict=True):
                _, arrow, convert = spark_typed(column.spark)
                value = pa.array([None if null else convert(text)],
                                 arrow).to_pylist()[0]  # a float4 narrowed alike
                assert same(image[column.name], value), (plugin, column.name, text, value)
    for plugin, inserts in changes.items():
        for row_texts, row_nulls, change in zip(texts, nulls, inserts, strict=True):
            assert change.after is not None
            after = orjson.loads(change.after)
            for column, text, null in zip(typed, row_texts, row_nulls, strict=True):
                value = None if null else spark_typed(column.spark)[2](text)
                if column.name in ("j", "jb") and value is not None:  # the text, embedded
                    assert orjson.loads(value) == after[column.name]
                    continue
                expected = from_json(column.spark, after[column.name])
                assert same(value, expected), (plugin, column.name, text, value, expected)


# Domains of types whose JSON is not their text, and arrays: the JSON mode writes a domain's
# Postgres text, so the struct's value must print exactly as Postgres prints it.
# (column, its type, SQL literals of the three rows)
EXTRA: list[tuple[str, str, list[str]]] = [
    ("x_f8", "{schema}.df8", ["1e15", "'NaN'", "-0.000025"]),
    ("x_f8_fixed", "{schema}.df8", ["123456789012345", "1e-4", "-0"]),
    ("x_f4", "{schema}.df4", ["1e6", "0.1", "3.4028235e38"]),
    ("x_f4_fixed", "{schema}.df4", ["123456", "1.5e-5", "'-Infinity'"]),
    ("x_b", "{schema}.dbool", ["true", "false", "NULL"]),
    ("x_bin", "{schema}.dbytea", ["'\\x00ff'", "''", "NULL"]),
    ("x_tstz", "{schema}.dtstz", ["'2024-01-02 03:04:05.5+05:30'", "'0099-01-01 00:00:00+00'",
                                  "'2024-01-02 03:04:05.000001+00'"]),
    ("x_ts", "{schema}.dts", ["'2024-01-02 03:04:05.123'", "'1999-12-31 23:59:59'", "NULL"]),
    ("x_d", "{schema}.ddate", ["'0099-03-04'", "'2024-02-29'", "NULL"]),
    ("x_f8s", "{schema}.df8[]", ["'{1e15,NULL,0.5}'", "'{}'", "NULL"]),
    ("x_bins", "{schema}.dbytea[]", ["ARRAY['\\x00'::bytea, NULL]", "'{}'", "NULL"]),
    ("x_f4s", "real[]", ["'{0.1,1e6,NaN}'", "'{}'", "NULL"]),
    ("x_jbs", "jsonb[]", ["ARRAY['{\"a\": [1, 2.50]}'::jsonb, NULL]", "'{}'", "NULL"]),
    ("x_tss", "timestamp[]", ["ARRAY['2024-01-02 03:04:05.5'::timestamp]", "'{}'", "NULL"]),
]
DOMAINS = [("df8", "double precision"), ("df4", "real"), ("dbool", "boolean"),
           ("dbytea", "bytea"), ("dtstz", "timestamptz"), ("dts", "timestamp"), ("ddate", "date")]


def add_every_type(conn: psycopg.Connection[Any], schema: str, identity: str) -> None:
    """Give the table the :data:`EXTRA` columns (over :data:`DOMAINS`) and ``identity``."""
    s = sql.Identifier(schema)
    for name, base in DOMAINS:
        conn.execute(sql.SQL("CREATE DOMAIN {}.{} AS {}").format(s, sql.Identifier(name),
                                                                 sql.SQL(base)))
    for name, pg_type, _ in EXTRA:
        conn.execute(sql.SQL("ALTER TABLE {}.t ADD COLUMN {} {}").format(
            s, sql.Identifier(name), sql.SQL(pg_type.format(schema=s.as_string(conn)))))
    conn.execute(sql.SQL(f"ALTER TABLE {{}}.t REPLICA IDENTITY {identity}").format(s))


def _changes_of_every_kind(conn: psycopg.Connection[Any], schema: str) -> int:
    """The inserts, then an update of each row setting the extra columns, then a delete."""
    rows = _insert_rows(conn, schema)
    for i in range(rows):
        conn.execute(sql.SQL("UPDATE {}.t SET {} WHERE id = {}").format(
            sql.Identifier(schema), sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(name), sql.SQL(values[i]))
                for name, _, values in EXTRA), sql.Literal(i)))
    conn.execute(sql.SQL("DELETE FROM {}.t WHERE id = 1").format(sql.Identifier(schema)))
    return 2 * rows + 1


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_struct_rows_render_as_both_decoders_json_byte_for_byte(
    table: tuple[psycopg.Connection[Any], str], identity: str,
) -> None:
    """pg-to-iggy's payloads from row_format=struct: for the same inserts, updates and deletes,
    each typed image (through Arrow, as Spark hands it over) renders as the JSON mode's text of
    ``key``, ``before`` and ``after``, through both decoders."""
    conn, schema = table
    add_every_type(conn, schema, identity)
    found = table_struct(conn, schema, "t")
    assert found is not None
    typed = StructRows.of({f"{schema}.t": found})
    render_row, render_key = image_renderer(typed.row), image_renderer(typed.key)
    routes = [(Router(options), Router(options, typed)) for options in (
        CdcOptions.from_options({"dsn": "dbname=x", "slot": "s", "topic_from": column,
                                 "partition_key_from": "key", "default_topic": "none"})
        for column in typed.row.names)]

    changes = _peek(conn, schema, typed, _changes_of_every_kind, keep_values=True)
    for plugin in ("_po", "_td"):
        for json_mode, struct in zip(changes[plugin], changes[plugin + "_typed"], strict=True):
            assert json_mode.op == struct.op and json_mode.unchanged == struct.unchanged
            for image, render, arrow in (("key", render_key, typed.key_arrow),
                                         ("before", render_row, typed.row_arrow),
                                         ("after", render_row, typed.row_arrow)):
                value = image_array([getattr(struct, image)], arrow).to_pylist()[0]
                rendered = render(value, struct.unchanged if image == "after" else ())
                assert rendered == getattr(json_mode, image), (plugin, json_mode.op, image)
            for route in routes:  # the routing options send a row where the JSON mode does
                assert route[0].route(json_mode) == route[1].route(struct), (plugin, route)
    assert any(c.before is not None for c in changes["_td"]) == (identity == "FULL")
