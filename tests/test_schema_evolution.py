"""``schema_evolution``'s rules without a server: which type widens which (every value kept,
written as the same JSON), how ``add_columns`` evolves structs to their union over time
(added columns appended, dropped and renamed ones kept, types widened, anything else refused
naming it), and how both decoders type a change by column name against such structs."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import DecimalType, FloatType, StructField
from test_decoders_pgoutput import m_insert, m_relation, txn
from test_row_format import INFO, TYPED, TYPES

from connector_common.change_rows import ARROW_SCHEMA
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.catalog import ColumnInfo, TableInfo
from postgres_cdc_source.decoding import Begin, Change, Commit
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.decoding.text_format import TextFormatDecoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import SchemaChangedError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.pg_types import builtin_types
from postgres_cdc_source.rows.json.values import converter_for_oid
from postgres_cdc_source.rows.struct.evolution import widens
from postgres_cdc_source.rows.struct.json_text import (
    field_metadata,
    json_batches,
    pg_text,
    value_renderer,
)
from postgres_cdc_source.rows.struct.structs import StructRows, checkpoint_difference
from postgres_cdc_source.rows.struct.types import (
    TableStruct,
    column_type,
    spark_typed,
    typed_columns,
)

INT2, INT4, INT8, FLOAT4, FLOAT8, NUMERIC, TEXT, VARCHAR, JSONB = (
    21, 23, 20, 700, 701, 1700, 25, 1043, 3802)
NAMES = {oid: name for oid, _, name in builtin_types()}


def _typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


def _field(oid: int, typmod: int = -1, name: str = "c") -> StructField:
    spark, _, _ = column_type(TYPES, oid, typmod)
    return StructField(name, spark, metadata=field_metadata(oid, NAMES[oid]))


def _structs(*columns: ColumnInfo, attnums: tuple[int, ...] = (),
             key: tuple[str, ...] = ("id",)) -> StructRows:
    return StructRows.of({"shop.orders": TableStruct(typed_columns(TYPES, columns), key,
                                                     attnums)}, "add_columns")


def _column(name: str, oid: int, typmod: int = -1, key: bool = False) -> ColumnInfo:
    return ColumnInfo(name, name, NAMES[oid], oid, key, False, typmod)


# --- which type widens which --------------------------------------------------------------

SCALARS = [oid for oid, _, _ in builtin_types()]
CHAIN = [INT2, INT4, INT8]


@pytest.mark.parametrize("oid", SCALARS)
def test_every_type_widens_to_itself(oid: int) -> None:
    assert widens(_field(oid), _field(oid))


@pytest.mark.parametrize(("was", "now", "expected"), [
    (INT2, INT4, True), (INT4, INT8, True), (INT2, INT8, True), (INT8, INT4, False),
    (INT4, INT2, False), (FLOAT4, FLOAT8, True), (FLOAT8, FLOAT4, False),
    (VARCHAR, TEXT, True), (TEXT, VARCHAR, True),  # one Spark type, one JSON
    (INT4, TEXT, False), (INT4, FLOAT8, False), (INT8, NUMERIC, False),
    (TEXT, JSONB, False),  # one Spark type, but other JSON
])
def test_widening_between_built_in_types(was: int, now: int, expected: bool) -> None:
    assert widens(_field(was), _field(now)) is expected


@given(st.sampled_from(SCALARS), st.sampled_from(SCALARS))
def test_two_types_widen_each_other_only_when_they_are_one(was: int, now: int) -> None:
    if widens(_field(was), _field(now)) and widens(_field(now), _field(was)):
        assert _field(was).dataType == _field(now).dataType
        assert converter_for_oid(was) is converter_for_oid(now)


@given(st.sampled_from(CHAIN), st.sampled_from(CHAIN), st.integers(-(2 ** 15), 2 ** 15 - 1))
def test_a_widened_integer_keeps_its_value_and_json(was: int, now: int, value: int) -> None:
    """An older change's text typed by the wider field renders as the JSON mode's value of
    the older column (what pg-to-iggy writes for it)."""
    wider = _field(now)
    if not widens(_field(was), wider):
        assert CHAIN.index(now) < CHAIN.index(was)
        return
    typed = spark_typed(wider.dataType)[2](str(value))
    rendered = value_renderer(now, wider.dataType)(typed)
    assert orjson.dumps(rendered) == orjson.dumps(converter_for_oid(was)(str(value)))


@given(st.floats(width=32))
def test_a_real_widened_to_double_keeps_its_json(value: float) -> None:
    text = pg_text(FloatType())(value)  # as float4out prints it
    typed = spark_typed(_field(FLOAT8).dataType)[2](text)
    rendered = value_renderer(FLOAT8, _field(FLOAT8).dataType)(typed)
    assert orjson.dumps(rendered) == orjson.dumps(converter_for_oid(FLOAT4)(text))


DIGITS = st.integers(1, 38)


@given(DIGITS, st.integers(0, 38), DIGITS, st.integers(0, 38), st.data())
def test_a_decimal_widens_exactly_when_every_value_fits(
    p: int, s: int, p2: int, s2: int, data: st.DataObject,
) -> None:
    """decimal(p, s) widens to decimal(p2, s2) when the latter has as many places before and
    after the point: then every value of the first converts; otherwise the largest value or
    the smallest fraction does not. The JSON is the same for the same scale (a larger scale
    writes the older values with its places)."""
    s, s2 = min(s, p), min(s2, p2)
    was, now = _field(NUMERIC, _typmod(p, s)), _field(NUMERIC, _typmod(p2, s2))
    assert isinstance(was.dataType, DecimalType) and isinstance(now.dataType, DecimalType)
    convert = spark_typed(now.dataType)[2]
    largest = Decimal(f"{'9' * (p - s)}.{'9' * s}" if s else "9" * p)
    smallest = Decimal(1).scaleb(-s)
    if widens(was, now):
        integer = data.draw(st.integers(-(10 ** p) + 1, 10 ** p - 1))
        text = format(Decimal(integer).scaleb(-s), "f")  # as Postgres prints it
        assert convert(text) == Decimal(text)
        rendered = value_renderer(NUMERIC, now.dataType)(convert(text))
        if s == s2:
            assert rendered == converter_for_oid(NUMERIC)(text)
    else:
        rejected = 0
        for value in (largest, smallest):
            try:
                convert(format(value, "f"))
            except ValueError:
                rejected += 1
        assert rejected


def test_spark_typed_gives_each_catalog_types_arrow_type_and_converter() -> None:
    for oid in SCALARS:
        spark, arrow, _ = column_type(TYPES, oid)
        assert spark_typed(spark)[:2] == (spark, arrow)


# --- structs evolved over time ------------------------------------------------------------

ID, AMOUNT, NOTE = _column("id", INT4, key=True), _column("amount", INT2), _column("note", TEXT)
FIRST = _structs(ID, AMOUNT, NOTE, attnums=(1, 2, 3))


def _names_and_types(typed: StructRows) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in typed.row.fields]


def test_the_union_over_time_through_add_drop_rename_and_widen() -> None:
    added = _structs(ID, AMOUNT, NOTE, _column("extra", INT4), attnums=(1, 2, 3, 4))
    step = added.evolved(FIRST.stamp())
    assert _names_and_types(step) == [("id", "int"), ("amount", "smallint"),
                                      ("note", "string"), ("extra", "int")]
    dropped = _structs(ID, AMOUNT, _column("extra", INT4), attnums=(1, 2, 4))
    step = dropped.evolved(step.stamp())
    assert _names_and_types(step) == [("id", "int"), ("amount", "smallint"),
                                      ("note", "string"), ("extra", "int")]
    assert step.row["note"].metadata == field_metadata(TEXT, "text")  # still renders
    renamed = _structs(ID, AMOUNT, _column("bonus", INT4), attnums=(1, 2, 4))
    assert "column renamed: 'extra' to 'bonus'" in str(
        checkpoint_difference(step.stamp(), renamed, "fail"))
    step = renamed.evolved(step.stamp())
    assert step.row.names == ["id", "amount", "note", "extra", "bonus"]
    widened = _structs(ID, _column("amount", INT8), _column("bonus", INT4), attnums=(1, 2, 4))
    step = widened.evolved(step.stamp())
    assert step.row["amount"].dataType.simpleString() == "bigint"
    assert step.row["amount"].metadata == field_metadata(INT8, "bigint")
    assert step.row_arrow.field("amount").type == pa.int64()
    assert step.key.names == ["id"] and step.evolved(step.stamp()) == step
    assert checkpoint_difference(FIRST.stamp(), step, "add_columns") is None


def test_a_checkpoint_without_attnums_sees_a_rename_as_a_drop_and_an_add() -> None:
    renamed = _structs(ID, AMOUNT, _column("remark", TEXT), attnums=(1, 2, 3))
    old = {k: v for k, v in FIRST.stamp().items() if k != "attnums"}
    assert "columns added: 'remark'; columns dropped: 'note'" in str(
        checkpoint_difference(old, renamed, "fail"))
    assert renamed.evolved(old).row.names == renamed.evolved(FIRST.stamp()).row.names == [
        "id", "amount", "note", "remark"]


@pytest.mark.parametrize(("column", "was", "now"), [
    (_column("amount", NUMERIC, _typmod(10, 2)), "smallint (smallint)", "numeric "
     "(decimal(10,2))"),
    (_column("note", INT4), "text (string)", "integer (int)"),
])
def test_another_type_is_refused_naming_table_column_both_types_and_the_way_out(
    column: ColumnInfo, was: str, now: str,
) -> None:
    columns = [column if c.name == column.name else c for c in (ID, AMOUNT, NOTE)]
    with pytest.raises(ValueError, match=(
            rf"table shop\.orders, column '{column.name}': {re.escape(was)} in the earlier "
            rf"structs cannot become {re.escape(now)}: .* start the query on a new "
            "checkpoint with the same slot")):
        _structs(*columns).evolved(FIRST.stamp())


def test_a_narrowed_type_and_another_key_are_refused() -> None:
    wide = _structs(ID, _column("amount", INT8), NOTE)
    with pytest.raises(ValueError, match=r"'amount': bigint \(bigint\) in the earlier structs "
                       r"cannot become smallint \(smallint\)"):
        FIRST.evolved(wide.stamp())
    with pytest.raises(ValueError, match=r"the key is \('id'\) in the earlier structs, "
                       r"\('id', 'note'\) now"):
        _structs(ID, AMOUNT, NOTE._replace(key=True), key=("id", "note")).evolved(
            FIRST.stamp())
    assert "type changed: 'amount' (bigint (bigint) in the checkpoint, smallint (smallint) " \
        "now)" in str(checkpoint_difference(wide.stamp(), FIRST, "fail"))


@given(st.lists(st.sampled_from(["add", "drop", "widen"]), max_size=6))
def test_the_union_only_grows_and_keeps_every_earlier_field(steps: list[str]) -> None:
    columns = [ID, AMOUNT, NOTE]
    typed = FIRST
    for i, step in enumerate(steps):
        if step == "add":
            columns.append(_column(f"c{i}", INT4))
        elif step == "drop" and len(columns) > 1:
            columns.pop()
        elif step == "widen":
            columns = [_column(c.name, INT8, key=c.key) if c.type_oid in CHAIN else c
                       for c in columns]
        evolved = _structs(*columns).evolved(typed.stamp())
        assert evolved.row.names[:len(typed.row)] == typed.row.names
        assert all(widens(f, evolved.row[f.name]) for f in typed.row.fields)
        assert set(evolved.row.names) >= {c.name for c in columns}
        typed = evolved


# --- add_columns types a change by name ---------------------------------------------------

WIDE = _structs(ID, AMOUNT, NOTE, _column("extra", INT8))
"""What a restart gives after 'extra' was added and is bigint now."""


def _pgoutput(typed: StructRows, columns: list[tuple[int, str, int]], row: list[Any]
              ) -> list[Change]:
    relation = m_relation(5, "shop", "orders", b"d", columns)
    return [e for e in PgOutputDecoder(typed=typed).events(txn(relation, m_insert(5, row)))
            if isinstance(e, Change)]


def _text(typed: StructRows, line: str) -> list[Change]:
    info = TableInfo("shop", "orders", "d", (ID, AMOUNT, NOTE))
    rows = [(0x10, 1, "BEGIN 1"), (0x18, 1, "table shop.orders: INSERT: " + line),
            (0x20, 1, "COMMIT 1 (at 2024-01-02 03:04:05+00)")]
    return [e for e in TextFormatDecoder(lambda schema, table: info, typed=typed).events(rows)
            if isinstance(e, Change)]


def test_both_decoders_type_an_older_change_by_name_its_missing_fields_null() -> None:
    """A change written before 'extra' was added, or before 'amount' was widened, or after
    'note' was dropped: typed, the fields it lacks null, pg-to-iggy's JSON its own."""
    (po,) = _pgoutput(WIDE, [(1, "id", INT4), (0, "amount", INT2)], ["7", "5"])
    (td,) = _text(WIDE, "id[integer]:7 amount[smallint]:5")
    assert po.after == td.after == {"id": 7, "amount": 5}
    assert po.key == td.key == {"id": 7}
    router = Router(CdcOptions.from_options({"dsn": "dbname=x", "slot": "s"}))
    (batch,) = record_batches(transactions(iter([*_events(po)]), 10), router, 10,
                              WIDE.schemas()[1])
    assert batch.column("after").to_pylist() == [
        {"id": 7, "amount": 5, "note": None, "extra": None}]
    (rendered,) = json_batches(WIDE.schemas()[0])(iter([batch]))
    assert rendered.schema == ARROW_SCHEMA
    assert rendered.column("after").to_pylist() == [
        '{"id":7,"amount":5,"note":null,"extra":null}']


def _events(change: Change) -> list[Any]:
    return [Begin(1, 0x10), change, Commit(1, 0x28, None)]


@pytest.mark.parametrize(("columns", "line", "difference"), [
    ([(1, "id", INT4), (0, "amount", INT2), (0, "note", TEXT), (0, "extra", INT8),
      (0, "more", INT4)],
     "id[integer]:7 amount[smallint]:5 note[text]:'x' extra[bigint]:1 more[integer]:2",
     "column added: 'more'"),
    ([(1, "id", INT8), (0, "amount", INT2)], "id[bigint]:7 amount[smallint]:5",
     "column 'id' type changed from integer to bigint"),
    ([(1, "id", INT4), (0, "gone", TEXT), (0, "amount", INT2)],
     "id[integer]:7 gone[text]:'x' amount[smallint]:5",
     "column 'gone' not in the struct, before columns that are: this change was written "
     "before an ALTER TABLE dropped or renamed it, which the query had not read up to"),
])
def test_both_decoders_refuse_what_the_struct_cannot_type(
    columns: list[tuple[int, str, int]], line: str, difference: str,
) -> None:
    row = [text.split(":", 1)[1].strip("'") for text in line.split()]
    for decode in (lambda: _pgoutput(WIDE, columns, row), lambda: _text(WIDE, line)):
        with pytest.raises(SchemaChangedError, match=re.escape(difference)) as failed:
            decode()
        assert "with schema_evolution=add_columns it evolves the structs" in str(failed.value)


def test_fail_names_each_kind_against_the_columns_the_query_started_with() -> None:
    cases = [
        ([(1, "id", INT4), (0, "amount", 1700), (0, "remark", TEXT), (0, "at", 1184)],
         "column renamed: 'note' to 'remark'"),
        ([(1, "id", INT4), (0, "amount", 1700), (0, "note", TEXT)], "column dropped: 'at'"),
        ([(1, "id", INT4), (0, "amount", 1700), (0, "note", TEXT), (0, "at", 1184),
          (0, "x", INT4)], "column added: 'x'"),
        ([(1, "id", INT8), (0, "amount", 1700), (0, "note", TEXT), (0, "at", 1184)],
         "column 'id' type changed from integer to bigint"),
    ]
    assert TYPED.evolution == "fail" and INFO.columns[0].name == "id"
    for columns, difference in cases:
        with pytest.raises(SchemaChangedError, match=re.escape(difference)):
            _pgoutput(TYPED, columns, ["1"] * len(columns))

