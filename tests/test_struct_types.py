"""``row_format=struct``'s types and values: every listed Postgres type's output text, typed,
equals the JSON mode's value of the same text, parsed, type by type; the catalog rules; values
a Spark type cannot hold fail, naming them."""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime
from decimal import Decimal, localcontext
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
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
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from support.struct_values import from_json, same

from connector_common.spark_versions import arrow_schema
from postgres_cdc_source.catalog import ColumnInfo
from postgres_cdc_source.pg_types import builtin_types
from postgres_cdc_source.rows.json.values import converter_for_oid
from postgres_cdc_source.rows.struct.images import (
    UnconvertibleValue,
    _decimal_digits,
    image_array,
    image_converter,
)
from postgres_cdc_source.rows.struct.json_text import image_renderer, value_renderer
from postgres_cdc_source.rows.struct.structs import struct_schema
from postgres_cdc_source.rows.struct.types import (
    PgType,
    TableStruct,
    _decimal,
    column_type,
    spark_typed,
    typed_columns,
)

ENUM, INT_DOMAIN, MONEY_DOMAIN, COMPOSITE, DOMAIN_ARRAY = 90001, 90002, 90003, 90004, 90005
# domains of types whose JSON is not their text (the JSON mode writes a domain's text), and an
# array of an enum (not built in: its text)
DOUBLE_DOMAIN, REAL_DOMAIN, BOOL_DOMAIN, BYTEA_DOMAIN = 90006, 90007, 90008, 90009
STAMP_DOMAIN, STAMPTZ_DOMAIN, DATE_DOMAIN, ENUM_ARRAY = 90010, 90011, 90012, 90013


def _typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


def _types() -> dict[int, PgType]:
    types: dict[int, PgType] = {}
    for oid, array_oid, name in builtin_types():
        types[oid] = PgType(oid, name, "b", 0, -1, 0, ",")
        types[array_oid] = PgType(array_oid, "_" + name, "b", 0, -1, oid, ",")
    types[603] = PgType(603, "box", "b", 0, -1, 0, ";")
    types[1020] = PgType(1020, "_box", "b", 0, -1, 603, ",")
    types[ENUM] = PgType(ENUM, "mood", "e", 0, -1, 0, ",")
    types[INT_DOMAIN] = PgType(INT_DOMAIN, "positive", "d", 23, -1, 0, ",")
    types[MONEY_DOMAIN] = PgType(MONEY_DOMAIN, "price", "d", 1700, _typmod(6, 2), 0, ",")
    types[COMPOSITE] = PgType(COMPOSITE, "pair", "c", 0, -1, 0, ",")
    types[DOMAIN_ARRAY] = PgType(DOMAIN_ARRAY, "_positive", "b", 0, -1, INT_DOMAIN, ",")
    for oid, base in ((DOUBLE_DOMAIN, 701), (REAL_DOMAIN, 700), (BOOL_DOMAIN, 16),
                      (BYTEA_DOMAIN, 17), (STAMP_DOMAIN, 1114), (STAMPTZ_DOMAIN, 1184),
                      (DATE_DOMAIN, 1082)):
        types[oid] = PgType(oid, f"d{base}", "d", base, -1, 0, ",")
    types[ENUM_ARRAY] = PgType(ENUM_ARRAY, "_mood", "b", 0, -1, ENUM, ",")
    return types


TYPES = _types()


# --- Postgres output text, as the peek sessions' settings print it -----------------------------

def _pg_timestamp(value: datetime) -> str:
    text = f"{value.year:04d}" + value.strftime("-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text


def _pg_float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _pg_float4(value: float) -> str:
    """A float4's shortest digits, as float4out prints them (the notation may differ)."""
    return _pg_float(value) if not math.isfinite(value) else str(np.float32(value))


def _array_text(items: list[str | None]) -> str:
    """array_out's text: NULL bare, elements with special characters quoted and escaped."""
    def one(item: str | None) -> str:
        if item is None:
            return "NULL"
        if item == "" or item.upper() == "NULL" or any(c in item for c in '{},"\\ \t\n\r\v\f'):
            return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return item
    return "{" + ",".join(map(one, items)) + "}"


_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"),
                max_size=20)
_dates = st.dates(date(1, 1, 1), date(9999, 12, 31))
_stamps = st.datetimes(datetime(1, 1, 2), datetime(9999, 12, 30))
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6)

# (type OID, typmod, strategy of output text, the Spark type)
CASES: list[tuple[str, int, int, st.SearchStrategy[str], DataType]] = [
    ("smallint", 21, -1, st.integers(-2**15, 2**15 - 1).map(str), ShortType()),
    ("integer", 23, -1, st.integers(-2**31, 2**31 - 1).map(str), IntegerType()),
    ("bigint", 20, -1, st.integers(-2**63, 2**63 - 1).map(str), LongType()),
    ("oid", 26, -1, st.integers(0, 2**32 - 1).map(str), LongType()),
    ("numeric(10,2)", 1700, _typmod(10, 2),
     st.decimals(-10**8 + 1, 10**8 - 1, places=2).map(lambda d: f"{d:.2f}"),
     DecimalType(10, 2)),
    ("numeric(38,0)", 1700, _typmod(38, 0),
     st.integers(-10**38 + 1, 10**38 - 1).map(str), DecimalType(38, 0)),
    ("numeric", 1700, -1,
     st.decimals(allow_nan=False, allow_infinity=False).map(lambda d: format(d, "f"))
     | st.just("NaN"), StringType()),
    ("real", 700, -1, st.floats(width=32).map(_pg_float4), FloatType()),
    ("double precision", 701, -1, st.floats().map(_pg_float), DoubleType()),
    ("boolean", 16, -1, st.sampled_from(["t", "f"]), BooleanType()),
    ("text", 25, -1, _text, StringType()),
    ("varchar", 1043, -1, _text, StringType()),
    ("char(4)", 1042, -1, _text.map(lambda t: t[:4].ljust(4)), StringType()),
    ("bytea", 17, -1, st.binary(max_size=20).map(lambda b: "\\x" + b.hex()), BinaryType()),
    ("date", 1082, -1, _dates.map(date.isoformat), DateType()),
    ("timestamp", 1114, -1, _stamps.map(_pg_timestamp), TimestampNTZType()),
    ("timestamptz", 1184, -1, _stamps.map(lambda d: _pg_timestamp(d) + "+00"), TimestampType()),
    ("json", 114, -1, _json_values.map(lambda v: orjson.dumps(v).decode().replace(",", ", ")),
     StringType()),
    ("jsonb", 3802, -1, _json_values.map(lambda v: orjson.dumps(v).decode()), StringType()),
    ("uuid", 2950, -1, st.uuids().map(str), StringType()),
    ("enum", ENUM, -1, st.sampled_from(["happy", "sad", "a b"]), StringType()),
    ("domain of integer", INT_DOMAIN, -1, st.integers(1, 2**31 - 1).map(str), IntegerType()),
    ("domain of numeric(6,2)", MONEY_DOMAIN, -1,
     st.decimals(-9999, 9999, places=2).map(lambda d: f"{d:.2f}"), DecimalType(6, 2)),
    ("interval", 1186, -1, st.sampled_from(["P1DT2H", "PT0S", "P-3Y"]), StringType()),
    ("money", 790, -1, st.sampled_from(["$12.34", "-$0.01"]), StringType()),
    ("point", 600, -1, st.sampled_from(["(1,2)", "(-1.5,0)"]), StringType()),
    ("composite", COMPOSITE, -1, st.sampled_from(['(1,"a b")', "(,)"]), StringType()),
    ("int4range", 3904, -1, st.sampled_from(["[1,5)", "empty"]), StringType()),
    ("integer[]", 1007, -1,
     st.lists(st.none() | st.integers(-2**31, 2**31 - 1).map(str)).map(_array_text),
     ArrayType(IntegerType())),
    ("text[]", 1009, -1, st.lists(st.none() | _text).map(_array_text), ArrayType(StringType())),
    ("numeric(5,1)[]", 1231, _typmod(5, 1),
     st.lists(st.decimals(-9999, 9999, places=1).map(lambda d: f"{d:.1f}")).map(_array_text),
     ArrayType(DecimalType(5, 1))),
    ("timestamptz[]", 1185, -1,
     st.lists(_stamps.map(lambda d: _pg_timestamp(d) + "+00")).map(_array_text),
     ArrayType(TimestampType())),
    ("bytea[]", 1001, -1,
     st.lists(st.binary(max_size=5).map(lambda b: "\\x" + b.hex())).map(_array_text),
     ArrayType(BinaryType())),
    ("domain[]", DOMAIN_ARRAY, -1, st.lists(st.integers(1, 99).map(str)).map(_array_text),
     ArrayType(IntegerType())),
    ("box[]", 1020, -1, st.just("{(1,1),(0,0);(2,2),(1,1)}"), StringType()),
]
TYPES[3904] = PgType(3904, "int4range", "r", 0, -1, 0, ",")
# Postgres's own texts where the JSON mode writes the text (a domain's), so rendering must print
# exactly what Postgres prints (float8out/float4out switch to an exponent at 1e15 and 1e6)
RENDER_CASES = [*CASES, *[(name, oid, -1, texts, spark) for name, oid, texts, spark in [
    ("domain of double", DOUBLE_DOMAIN, st.sampled_from([
        "0", "-0", "0.1", "100", "0.0001", "1e-05", "1.5e-05", "123456789012345", "1e+15",
        "1.2345678901234568e+17", "-2.5e+300", "5e-324", "NaN", "Infinity", "-Infinity"]),
     DoubleType()),
    ("domain of real", REAL_DOMAIN, st.sampled_from([
        "0.1", "123456", "1e+06", "-1.5e+06", "3.4028235e+38", "1e-05", "1.1754944e-38",
        "0.0001", "NaN", "-Infinity"]), FloatType()),
    ("domain of boolean", BOOL_DOMAIN, st.sampled_from(["t", "f"]), BooleanType()),
    ("domain of bytea", BYTEA_DOMAIN, st.binary(max_size=8).map(lambda b: "\\x" + b.hex()),
     BinaryType()),
    ("domain of timestamp", STAMP_DOMAIN, _stamps.map(_pg_timestamp), TimestampNTZType()),
    ("domain of timestamptz", STAMPTZ_DOMAIN, _stamps.map(lambda d: _pg_timestamp(d) + "+00"),
     TimestampType()),
    ("domain of date", DATE_DOMAIN, _dates.map(date.isoformat), DateType()),
    ("enum[]", ENUM_ARRAY, st.lists(st.none() | st.sampled_from(
        ["happy", "a b", "NULL", "", 'q"\\', "{x}"])).map(_array_text), ArrayType(StringType())),
    ("real[]", 1021, st.lists(st.none() | st.floats(width=32).map(_pg_float4)).map(_array_text),
     ArrayType(FloatType())),
    ("jsonb[]", 3807, st.lists(st.none() | _json_values.map(lambda v: orjson.dumps(v).decode())
                               ).map(_array_text), ArrayType(StringType())),
    ("boolean[]", 1000, st.lists(st.none() | st.sampled_from(["t", "f"])).map(_array_text),
     ArrayType(BooleanType())),
]]]


def _json_mode(type_oid: int, text: str) -> Any:
    """The JSON mode's value of ``text``: its converter, orjson's JSON, parsed back."""
    return orjson.loads(orjson.dumps({"v": converter_for_oid(type_oid)(text)}))["v"]


@pytest.mark.parametrize(("name", "oid", "typmod", "texts", "spark_type"), CASES,
                         ids=[c[0] for c in CASES])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_struct_values_equal_the_json_modes_type_by_type(
    name: str, oid: int, typmod: int, texts: st.SearchStrategy[str], spark_type: DataType,
    data: st.DataObject,
) -> None:
    typed_spark, arrow, convert = column_type(TYPES, oid, typmod)
    assert typed_spark == spark_type
    assert arrow_schema(StructType([StructField("v", spark_type)])).field("v").type == arrow
    text = data.draw(texts)
    typed = convert(text)
    json_mode = _json_mode(oid, text)
    if oid in (114, 3802):  # json/jsonb: the text itself, which the JSON mode embeds as is
        assert orjson.dumps({"v": orjson.Fragment(typed)}) == orjson.dumps(
            {"v": converter_for_oid(oid)(text)})
        assert orjson.loads(typed) == json_mode
    else:
        assert same(typed, from_json(spark_type, json_mode)), (text, typed, json_mode)
    stored = pa.array([typed], arrow).to_pylist()[0]  # Arrow takes it as the Spark type's
    # a change's image, as a decoder converts it and the batch makes it (a decimal, date or
    # timestamp cast by Arrow from its text): the same value
    assert same(_image(arrow, image_converter(spark_type)(text)), stored), (text, stored)


def _image(arrow: pa.DataType, value: Any) -> Any:
    """``value`` (as a change's image holds it) in a batch's struct field of ``arrow``."""
    return image_array([{"v": value}], pa.struct([pa.field("v", arrow)])).to_pylist()[0]["v"]


@pytest.mark.parametrize(("oid", "typmod", "spark_type"), [
    (1700, _typmod(3, -2), DecimalType(5, 0)),  # numeric(3,-2) holds 99900
    (1700, _typmod(2, 5), DecimalType(5, 5)),  # numeric(2,5) holds 0.00099
    (1700, _typmod(39, 2), StringType()),  # beyond Spark's 38 digits
    (1700, -1, StringType()),  # unconstrained: text, exact
    (1083, -1, StringType()),  # time
    (869, -1, StringType()),  # inet
])
def test_catalog_rules(oid: int, typmod: int, spark_type: DataType) -> None:
    assert column_type(TYPES, oid, typmod)[0] == spark_type


@pytest.mark.parametrize(("oid", "typmod", "text", "message"), [
    (1700, _typmod(6, 2), "NaN", "'NaN' has no decimal.6,2. value"),
    (1700, _typmod(4, 2), "100.00", "more than 2 digits before the point"),
    (1082, -1, "infinity", "'infinity' has no Spark DATE value"),
    (1114, -1, "0044-03-15 12:00:00 BC", "no Spark TIMESTAMP_NTZ value"),
    (1184, -1, "12345-06-01 00:00:00.25+00", "no Spark TIMESTAMP value"),
    (1007, -1, "{{1,2},{3,4}}", "more than one dimension"),
])
def test_a_value_the_spark_type_cannot_hold_fails_naming_it(
    oid: int, typmod: int, text: str, message: str
) -> None:
    spark, arrow, convert = column_type(TYPES, oid, typmod)
    with pytest.raises(ValueError, match=message):
        convert(text)
    if isinstance(spark, ArrayType):  # converted as it is decoded: the decoder names it
        with pytest.raises(ValueError, match=message):
            image_converter(spark)(text)
        return
    # in a batch (Arrow's cast refuses it, the converter says why), naming its row and field
    images = [{"v": image_converter(spark)(t)} for t in (_ONE[spark.typeName()], text)]
    with pytest.raises(UnconvertibleValue, match=re.escape(f"row 1, column 'v': cannot convert "
                                                           f"{text!r}")) as failed:
        image_array(images, pa.struct([pa.field("v", arrow)]))
    assert isinstance(failed.value.__cause__, ValueError)
    assert re.search(message, str(failed.value.__cause__))


_ONE = {"decimal": "1", "date": "2024-01-02", "timestamp_ntz": "2024-01-02 03:04:05",
        "timestamp": "2024-01-02 03:04:05+00"}
"""A value each type holds, for the row before the one it cannot."""


def test_images_of_missing_fields_and_no_image_are_null() -> None:
    arrow = pa.struct([pa.field("id", pa.int32()), pa.field("at", pa.timestamp("us", tz="UTC")),
                       pa.field("amount", pa.decimal128(4, 2))])
    column = image_array([{"id": 1, "at": "2024-01-02 03:04:05+00"}, None,
                          {"id": 2, "amount": None}], arrow)
    assert column.to_pylist() == [
        {"id": 1, "at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "amount": None}, None,
        {"id": 2, "at": None, "amount": None}]
    assert column.type == arrow


def test_timestamps_keep_their_instant() -> None:
    convert = column_type(TYPES, 1184)[2]
    assert convert("2024-01-02 03:04:05.5+00") == datetime(2024, 1, 2, 3, 4, 5, 500000, UTC)
    assert column_type(TYPES, 1114)[2]("2024-01-02 03:04:05") == datetime(2024, 1, 2, 3, 4, 5)


def _table(*columns: tuple[str, int], key: tuple[str, ...] = ("id",)) -> TableStruct:
    return TableStruct(typed_columns(TYPES, [ColumnInfo(n, n, TYPES[oid].name, oid, n in key,
                                                        False)
                                             for n, oid in columns]), key)


def test_tables_of_one_shape_share_a_struct_whose_fields_name_their_postgres_types() -> None:
    row, key = struct_schema({"public.a": _table(("id", 20), ("v", 25)),
                              "public.b": _table(("id", 20), ("v", 1043))})  # both strings
    bigint = {"pg_type_oid": 20, "pg_type": "bigint"}
    assert row == StructType([StructField("id", LongType(), metadata=bigint),
                              StructField("v", StringType(),
                                          metadata={"pg_type_oid": 25, "pg_type": "text"})])
    assert key == StructType([StructField("id", LongType(), metadata=bigint)])


@pytest.mark.parametrize(("other", "message"), [
    (_table(("id", 23), ("v", 25)), "column 'id' is bigint in the first, int in the second"),
    (_table(("key", 20), ("v", 25)), "column 1 is 'id' in the first, 'key' in the second"),
    (_table(("id", 20), ("v", 25), ("w", 16)), "the second has more columns: 'w'"),
    (_table(("id", 20)), "the first has more columns: 'v'"),
    (_table(("id", 20), ("v", 3802)),
     r"column 'v' is text in the first, jsonb in the second \(one Spark type, but not the same "
     r"JSON\)"),
    (_table(("id", 20), ("v", 25), key=("id", "v")),
     r"the key is \('id'\) in the first, \('id', 'v'\) in the second"),
    (_table(("id", 20), ("v", 25), key=()), r"the key is \('id'\) in the first, none"),
])
def test_tables_of_other_shapes_are_refused_naming_both_and_the_difference(
    other: TableStruct, message: str
) -> None:
    with pytest.raises(ValueError, match=f"public.a and public.b differ: {message}"):
        struct_schema({"public.a": _table(("id", 20), ("v", 25)), "public.b": other})


def test_no_table_is_refused() -> None:
    with pytest.raises(ValueError, match="no table is captured"):
        struct_schema({})


# --- typed values back to the JSON mode's text (pg-to-iggy's payloads) -------------------------

@pytest.mark.parametrize(("name", "oid", "typmod", "texts", "spark_type"), RENDER_CASES,
                         ids=[c[0] for c in RENDER_CASES])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_typed_value_renders_as_the_json_modes_bytes(
    name: str, oid: int, typmod: int, texts: st.SearchStrategy[str], spark_type: DataType,
    data: st.DataObject,
) -> None:
    typed_spark, arrow, convert = column_type(TYPES, oid, typmod)
    assert typed_spark == spark_type
    text = data.draw(texts)
    # through Arrow, as Spark hands it over: float4 narrowed, timestamps in a session's zone
    typed = pa.array([convert(text)], arrow).to_pylist()[0]
    if isinstance(spark_type, TimestampType):
        typed = typed.astimezone(ZoneInfo("Asia/Kolkata"))
    rendered = value_renderer(oid, spark_type)(typed)
    assert orjson.dumps({"v": rendered}) == orjson.dumps({"v": converter_for_oid(oid)(text)}), (
        text, typed)


def test_a_row_image_renders_as_the_json_modes_text_nulls_and_unchanged_columns_included(
) -> None:
    columns = [("id", 20, "7"), ("doc", 3802, '{"a": [1, 2.50]}'), ("amount", 1700, "12.50"),
               ("big", 1700, "1e-3"), ("at", 1184, "2024-01-02 03:04:05.5+00"),
               ("raw", 17, "\\x00ff"), ("gone", 25, None), ("toast", 25, "x" * 9)]
    typmods = {"amount": _typmod(10, 2)}  # decimal(10,2); "big" is unconstrained: text
    typed = TableStruct(typed_columns(TYPES, [
        ColumnInfo(n, n, TYPES[oid].name, oid, n == "id", False, typmods.get(n, -1))
        for n, oid, _ in columns]), ("id",))
    row, key = struct_schema({"public.t": typed})
    image = {c.name: None if text is None else spark_typed(c.spark)[2](text)
             for c, (_, _, text) in zip(typed.columns, columns, strict=True)}
    json_mode = {n: None if text is None else converter_for_oid(oid)(text)
                 for n, oid, text in columns}
    assert image_renderer(row)(image, ()) == orjson.dumps(json_mode).decode()
    del json_mode["toast"]  # an unchanged TOAST value: the JSON mode leaves it out
    assert image_renderer(row)({**image, "toast": None}, ("toast",)) == orjson.dumps(
        json_mode).decode()
    assert image_renderer(key)({"id": 7}, ()) == '{"id":7}'
    assert image_renderer(row)(None, ()) is None
    with pytest.raises(ValueError, match="'id' does not name its Postgres type"):
        image_renderer(StructType([StructField("id", LongType())]))


@settings(max_examples=400)
# Arrow reads and rescales decimal text in 128 bits unchecked: these two became 0 and a number
@example(column=(1, 0), value=Decimal(1), places=40)
@example(column=(28, 28), value=Decimal(2892400118828), places=0)
@given(st.integers(1, 38).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, p))),
       st.decimals(allow_nan=False, allow_infinity=False, places=None,
                   min_value=-(10 ** 40), max_value=10 ** 40),
       st.integers(0, 40))
def test_a_decimal_is_taken_exactly_when_it_fits_its_column(
    column: tuple[int, int], value: Decimal, places: int
) -> None:
    """Whatever digits and places Postgres's text has (more places than the scale too, as after
    an ALTER TYPE the query has not read), a numeric(p, s) value is taken as decimal(p, s)
    exactly when no digit is lost: no non-zero place beyond s, fewer than p - s digits before
    the point. The text is plain, as Postgres prints numeric."""
    precision, scale = column
    text = f"{value:.{places}f}"
    exact = Decimal(text)
    with localcontext() as exact_arithmetic:
        exact_arithmetic.prec = 100
        fits = not exact or (exact == exact.quantize(Decimal(1).scaleb(-scale))
                             and exact.adjusted() < precision - scale)
    arrow = pa.decimal128(precision, scale)
    if fits:
        assert _decimal(precision, scale, text) == exact
        assert _image(arrow, text) == exact  # Arrow's cast, in a batch
    else:
        with pytest.raises(ValueError, match=re.escape(repr(text))):
            _decimal(precision, scale, text)
        with pytest.raises(UnconvertibleValue) as failed:
            _image(arrow, text)
        assert re.search(re.escape(repr(text)), str(failed.value.__cause__))


@pytest.mark.parametrize(("texts", "scale", "digits"), [
    (["12.345678901234567890"], 18, 20),  # numeric(38,18): cast by Arrow
    (["-99999999999999999999.999999999999999999"], 18, 38),  # the widest, still cast
    (["2892400118828"], 28, 41),  # rescaled past 38 digits: converted one by one
    (["1." + "0" * 40], 0, 41),  # more places than a decimal holds
    ([None, "5", "-0.5"], 2, 3),
])
def test_a_decimal_column_is_measured_in_the_digits_arrow_works_with(
    texts: list[str | None], scale: int, digits: int
) -> None:
    assert _decimal_digits(pa.array(texts, pa.string()), scale) == digits
