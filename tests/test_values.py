"""Value converters and the array parser, against handmade text and against a real server."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.pg_types import SESSION_SETTINGS, builtin_types, parse_array
from postgres_cdc_source.rows.json.values import converter_for_oid, converter_for_type_name


def convert(type_name: str, text: str) -> Any:
    """Convert by name and check the OID path agrees."""
    by_name = converter_for_type_name(type_name)(text)
    oids = {name: oid for oid, _, name in builtin_types()}
    oids.update({name + "[]": array_oid for _, array_oid, name in builtin_types()})
    by_oid = converter_for_oid(oids[type_name])(text)
    assert orjson.dumps(by_name) == orjson.dumps(by_oid)
    return by_name


def as_json(type_name: str, text: str) -> str:
    return orjson.dumps(convert(type_name, text)).decode()


def test_session_settings_fit_a_libpq_options_string() -> None:
    assert SESSION_SETTINGS["TimeZone"] == "UTC"
    assert all(" " not in k + v for k, v in SESSION_SETTINGS.items())


@pytest.mark.parametrize(
    ("type_name", "text", "expected"),
    [
        ("smallint", "-32768", "-32768"),
        ("integer", "2147483647", "2147483647"),
        ("bigint", "-9223372036854775808", "-9223372036854775808"),
        ("oid", "4294967295", "4294967295"),
        ("numeric", "12345678901234567890.000100", '"12345678901234567890.000100"'),
        ("numeric", "NaN", '"NaN"'),
        ("numeric", "-Infinity", '"-Infinity"'),
        ("real", "1.1", "1.1"),
        ("double precision", "-1.5e-07", "-1.5e-7"),
        ("double precision", "1e+308", "1e+308"),
        ("double precision", "NaN", '"NaN"'),
        ("double precision", "Infinity", '"Infinity"'),
        ("real", "-Infinity", '"-Infinity"'),
        ("boolean", "t", "true"),
        ("boolean", "f", "false"),
        ("boolean", "true", "true"),
        ("bytea", "\\x", '""'),
        ("bytea", "\\x00ff10", '"AP8Q"'),
        ("json", '{"a": [1, 2.50, "x"] }', '{"a": [1, 2.50, "x"] }'),
        ("jsonb", '{"a": null}', '{"a": null}'),
        ("json", '"just a string"', '"just a string"'),
        ("date", "2024-02-29", '"2024-02-29"'),
        ("date", "infinity", '"infinity"'),
        ("timestamp without time zone", "2024-01-02 03:04:05.12", '"2024-01-02T03:04:05.12"'),
        ("timestamp without time zone", "2024-01-02 03:04:05", '"2024-01-02T03:04:05"'),
        ("timestamp without time zone", "-infinity", '"-infinity"'),
        ("timestamp without time zone", "0044-03-15 12:00:00 BC", '"0044-03-15 12:00:00 BC"'),
        ("timestamp with time zone", "2024-01-02 03:04:05.12+00", '"2024-01-02T03:04:05.12+00:00"'),
        ("timestamp with time zone", "10000-01-01 00:00:00+00", '"10000-01-01T00:00:00+00:00"'),
        ("timestamp with time zone", "2024-01-02 08:34:05+05:30", '"2024-01-02T08:34:05+05:30"'),
        ("timestamp with time zone", "2024-01-01 22:04:05-05", '"2024-01-01T22:04:05-05:00"'),
        ("timestamp with time zone", "infinity", '"infinity"'),
        ("timestamp with time zone", "0044-03-15 12:00:00+00 BC", '"0044-03-15 12:00:00+00 BC"'),
        ("time without time zone", "03:04:05.5", '"03:04:05.5"'),
        ("interval", "P1Y2M3DT4H5M6.5S", '"P1Y2M3DT4H5M6.5S"'),
        ("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", '"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"'),
        ("text", "it's \"q\" \\ \n\t 😀", '"it\'s \\"q\\" \\\\ \\n\\t 😀"'),
        ("bit varying", "0101", '"0101"'),
        ("money", "$1,000.00", '"$1,000.00"'),
    ],
)
def test_scalars(type_name: str, text: str, expected: str) -> None:
    assert as_json(type_name, text) == expected


def test_bytea_is_base64() -> None:
    data = bytes(range(256))
    assert convert("bytea", "\\x" + data.hex()) == base64.b64encode(data).decode()


def test_bytea_escape_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="bytea_output=hex"):
        convert("bytea", "abc\\000")


def test_unknown_types_stay_strings() -> None:
    assert converter_for_oid(99999)("x y") == "x y"
    assert converter_for_type_name('"MyEnum"')("b c") == "b c"
    assert converter_for_type_name('"MyEnum"[]')('{a,"b c"}') == '{a,"b c"}'
    assert converter_for_type_name("public.mytype")("(1,2)") == "(1,2)"


@pytest.mark.parametrize(
    ("type_name", "text", "expected"),
    [
        ("integer[]", "{}", []),
        ("integer[]", "{1,NULL,-3}", [1, None, -3]),
        ("integer[]", "{{1,2},{3,NULL}}", [[1, 2], [3, None]]),
        ("integer[]", "{{{1}},{{2}}}", [[[1]], [[2]]]),
        ("integer[]", "[0:1]={7,8}", [7, 8]),
        ("integer[]", "[0:1][1:1]={{7},{8}}", [[7], [8]]),
        ("text[]", '{a,"b c","NULL",NULL,"","x\\"y","back\\\\slash","{}",","}',
         ["a", "b c", "NULL", None, "", 'x"y', "back\\slash", "{}", ","]),
        ("text[]", '{"line\nbreak","tab\there"}', ["line\nbreak", "tab\there"]),
        ("text[]", "{😀,é}", ["😀", "é"]),
        ("boolean[]", "{t,f,NULL}", [True, False, None]),
        ("double precision[]", "{1.5,NaN,-Infinity}", [1.5, "NaN", "-Infinity"]),
        ("numeric[]", "{1.10,NaN}", ["1.10", "NaN"]),
        ("timestamp with time zone[]", '{"2024-01-02 03:04:05+00",NULL}',
         ["2024-01-02T03:04:05+00:00", None]),
        ("bytea[]", '{"\\\\x00ff"}', ["AP8="]),
        ("uuid[]", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}",
         ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", None]),
    ],
)
def test_arrays(type_name: str, text: str, expected: list[Any]) -> None:
    assert convert(type_name, text) == expected


def test_json_arrays_embed_their_elements() -> None:
    value = convert("jsonb[]", '{"{\\"a\\": 1}",NULL,"[1, 2]"}')
    assert orjson.loads(orjson.dumps(value)) == [{"a": 1}, None, [1, 2]]


@pytest.mark.parametrize(
    "text", ["", "1,2", "{1,2", "{1,2}}", '{"a}', "{{1},2}}", "{{1}", "[0:1]{1}", "{1}x", "{1}{2}"]
)
def test_malformed_arrays(text: str) -> None:
    with pytest.raises(ValueError, match="bad array literal"):
        parse_array(text, int)


def test_array_element_errors_propagate() -> None:
    with pytest.raises(ValueError, match="invalid literal for int"):
        parse_array("{1,x}", int)


# --- array_out, re-implemented from its documented quoting rules, for a round-trip property ---

def _array_out_element(item: str | int | None) -> str:
    if item is None:
        return "NULL"
    item = str(item)
    if item == "" or item.upper() == "NULL" or any(ch in '{}",\\' or ch.isspace() for ch in item):
        return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return item


def _array_out(value: list[Any]) -> str:
    return "{" + ",".join(
        _array_out(v) if isinstance(v, list) else _array_out_element(v) for v in value
    ) + "}"


hostile_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8
) | st.sampled_from(["NULL", "null", "", " ", "{", "}", ",", '"', "\\", "a b", "\\\"", "{}"])


@given(st.lists(st.none() | hostile_text, max_size=6))
def test_text_array_round_trip(items: list[str | None]) -> None:
    assert parse_array(_array_out(items)) == items


@given(st.integers(1, 3).flatmap(
    lambda width: st.lists(st.lists(st.none() | st.integers(-(2**31), 2**31 - 1),
                                    min_size=width, max_size=width), min_size=1, max_size=3)
))
def test_two_dimensional_round_trip(rows: list[list[int | None]]) -> None:
    assert parse_array(_array_out(rows), int) == rows


# --- against a real server ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def session(pg: LocalPostgres) -> Iterator[psycopg.Connection[Any]]:
    options = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())
    with pg.connect(options=options) as conn:
        yield conn


def test_builtin_table_matches_the_server(session: psycopg.Connection[Any]) -> None:
    """OIDs, array OIDs and format_type names: a typo here would silently stringify a type."""
    table = builtin_types()
    rows = session.execute(
        "SELECT oid::int8, typarray::int8, format_type(oid, NULL), format_type(typarray, NULL),"
        " typdelim FROM pg_type WHERE oid = ANY(%s)",
        ([oid for oid, _, _ in table],),
    ).fetchall()
    server = {oid: (array_oid, name, array_name, delim)
              for oid, array_oid, name, array_name, delim in rows}
    for oid, array_oid, name in table:
        assert server[oid] == (array_oid, name, name + "[]", ","), name


@settings(max_examples=40, deadline=None)
@given(st.lists(st.none() | hostile_text, max_size=5))
def test_server_text_arrays_parse_back(
    session: psycopg.Connection[Any], items: list[str | None]
) -> None:
    row = session.execute("SELECT %s::text[]::text", (items,)).fetchone()
    assert row is not None
    assert convert("text[]", row[0]) == items


def test_server_output_converts(session: psycopg.Connection[Any]) -> None:
    row = session.execute(
        "SELECT '2024-01-02 03:04:05.5+02'::timestamptz::text, '1.1'::float4::text,"
        " 0.1::float8::text, '1 day 2 hours'::interval::text, '\\x00ff'::bytea::text,"
        " ARRAY[[1,NULL],[3,4]]::text, '[0:1]={1,2}'::int[]::text"
    ).fetchone()
    assert row is not None
    assert convert("timestamp with time zone", row[0]) == "2024-01-02T01:04:05.5+00:00"
    assert convert("real", row[1]) == 1.1
    assert convert("double precision", row[2]) == 0.1
    assert convert("interval", row[3]) == "P1DT2H"
    assert convert("bytea", row[4]) == "AP8="
    assert convert("integer[]", row[5]) == [[1, None], [3, 4]]
    assert convert("integer[]", row[6]) == [1, 2]
