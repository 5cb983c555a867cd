"""The JSON Postgres builds for the snapshot (sql_json) is, byte for byte, what the decoders'
converters and orjson make of the same value's output text."""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.pg_types import SESSION_SETTINGS
from postgres_cdc_source.rows.json.sql import column_json_sql, row_json_sql, text_json_sql
from postgres_cdc_source.rows.json.values import converter_for_oid

pytestmark = pytest.mark.services

_SESSION = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())

# (type, values as SQL literals): edges of each rendering, NULL included
CASES: list[tuple[str, list[str]]] = [
    ("boolean", ["true", "false", "NULL"]),
    ("smallint", ["'-32768'", "0", "32767"]),
    ("integer", ["'-2147483648'", "7", "NULL"]),
    ("bigint", ["'-9223372036854775808'", "9223372036854775807"]),
    ("oid", ["0", "4294967295"]),
    ("numeric", ["0", "-1.50", "'NaN'", "1e-30", "123456789012345678901234567890.123"]),
    ("text", ["''", "E'a\"b\\\\c\\n\\t\\r\\b\\f\\x01\\x1f\\x7f/'", "'é 🦀 \u2028'", "'null'"]),
    ("character(5)", ["'ab'", "''"]),
    ("character varying(9)", ["'x y'"]),
    ("json", ["'{\"k\": [1, 2.50],  \"z\" : null}'", "'\"s\"'", "'  3 '"]),
    ("jsonb", ["'{\"k\": [1, 2.50], \"a\": {\"b\": \"\\u00e9\\n\"}}'", "'[]'", "'null'"]),
    ("date", ["'2024-02-29'", "'infinity'", "'0044-03-15 BC'", "'12345-01-01'"]),
    ("timestamp", ["'2024-01-02 03:04:05.5'", "'2024-01-02 03:04:05'", "'-infinity'",
                   "'0044-03-15 12:00 BC'", "'12345-01-01 00:00:00.000001'"]),
    ("timestamptz", ["'2024-01-02 03:04:05.5+05'", "'2024-01-02 00:00:00+00'", "'infinity'",
                     "'0044-03-15 12:00+00 BC'", "'12345-06-01 00:00:00.25+00'"]),
    ("interval", ["'1 day 2 hours'", "'-3 years 1 second'"]),
    ("uuid", ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"]),
    ("inet", ["'10.1.2.3'", "'10.1.2.0/24'", "'::1'"]),
    ("cidr", ["'10.1.2.0/24'"]),
    ("money", ["'12.34'"]),
    ("time", ["'03:04:05.123'"]),
    ("xid8", ["'123'"]),
]


def _expected(type_oid: int, text: str | None) -> str:
    """The decoders' JSON of one value: their converter, then orjson."""
    return orjson.dumps(None if text is None else converter_for_oid(type_oid)(text)).decode()


def _rendered(conn: psycopg.Connection[Any], type_name: str, literals: list[str]
              ) -> list[tuple[str | None, str, int, str | None]]:
    """Per value: its output text, the SQL-built JSON, the type OID, the SQL-built JSON string
    of its text (as snapshot ids carry keys)."""
    column = sql.Identifier("v")
    oid = conn.execute(sql.SQL("SELECT {}::regtype::oid").format(sql.Literal(type_name))
                       ).fetchone()
    assert oid is not None
    render = column_json_sql(int(oid[0]), column)
    assert render is not None, type_name
    values = sql.SQL(", ").join(sql.SQL("({}::{})").format(sql.SQL(v), sql.SQL(type_name))
                                for v in literals)
    rows = conn.execute(sql.SQL("SELECT v::text IS NULL, format('%%s', v), {}, {} FROM "
                                "(VALUES {}) AS t(v)").format(
        render, text_json_sql(int(oid[0]), column), values), []).fetchall()
    return [(None if is_null else text, json, int(oid[0]), text_json)
            for is_null, text, json, text_json in rows]


@pytest.mark.parametrize("timezone", ["UTC", "Asia/Kolkata", "America/New_York"])
def test_every_rendered_type_matches_the_converters(pg: LocalPostgres, timezone: str) -> None:
    """Other time zones exercise the offset branches the reader's UTC sessions never reach."""
    with psycopg.connect(pg.dsn, autocommit=True, options=_SESSION) as conn:
        conn.execute(sql.SQL("SET TimeZone = {}").format(sql.Literal(timezone)))
        for type_name, literals in CASES:
            for text, json, oid, text_json in _rendered(conn, type_name, literals):
                assert json == _expected(oid, text), (type_name, text)
                if text is not None:
                    assert text_json == orjson.dumps(text).decode(), (type_name, text)


def test_types_converted_in_python_have_no_sql_rendering() -> None:
    for oid in (700, 701, 17, 1007, 1009):  # real, float8, bytea, int[], text[]
        assert column_json_sql(oid, sql.Identifier("v")) is None
    assert row_json_sql(["a", "b"], [23, 701]) is None


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                        max_size=30), min_size=1, max_size=20))
def test_any_text_is_escaped_as_orjson_escapes_it(pg: LocalPostgres, texts: list[str]) -> None:
    render = column_json_sql(25, sql.Identifier("v"))
    assert render is not None
    with psycopg.connect(pg.dsn, autocommit=True, options=_SESSION) as conn:
        rendered = conn.execute(sql.SQL("SELECT {} FROM unnest(%s::text[]) AS t(v)").format(
            render), [texts]).fetchall()
    assert [json for (json,) in rendered] == [orjson.dumps(t).decode() for t in texts]


def test_a_row_is_the_decoders_object_with_any_column_names(pg: LocalPostgres) -> None:
    names = ["id", 'we"ird\\name 100%', "ünï", "n"]
    row = row_json_sql(names, [20, 25, 3802, 1700], [sql.Identifier(f"c{i}") for i in range(4)])
    assert row is not None
    literals = ["5", "'x'", "'{\"a\": 1}'::jsonb", "NULL::numeric"]
    columns = sql.SQL(", ").join(sql.SQL("{} AS {}").format(sql.SQL(v), sql.Identifier(f"c{i}"))
                                 for i, v in enumerate(literals))
    with psycopg.connect(pg.dsn, autocommit=True, options=_SESSION) as conn:
        got = conn.execute(sql.SQL("SELECT {} FROM (SELECT {}) AS t").format(row, columns),
                           []).fetchone()
    assert got is not None
    expected = orjson.dumps({"id": 5, names[1]: "x", "ünï": orjson.Fragment('{"a": 1}'),
                             "n": None}).decode()
    assert got[0] == expected
