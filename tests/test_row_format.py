"""``row_format``: the option, and ``struct``'s one conversion seam (``StructRows.retyped``)
in both decoders and in the Arrow batches, without a server: rows become dicts of typed values,
an unchanged TOAST value is left out and named, a table whose columns changed raises a
:class:`SchemaChangedError` naming it and the difference at its first change only."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from test_decoders_pgoutput import m_insert, m_relation, m_update, txn

from connector_common.change_rows import ARROW_SCHEMA, SPARK_SCHEMA
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.catalog import ColumnInfo, TableInfo
from postgres_cdc_source.decoding import UNCHANGED, Change
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.decoding.text_format import TextFormatDecoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import ConfigError, DecodeError, SchemaChangedError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.pg_types import builtin_types
from postgres_cdc_source.rows.struct.json_text import json_batches
from postgres_cdc_source.rows.struct.structs import StructRows, checkpoint_difference
from postgres_cdc_source.rows.struct.types import PgType, TableStruct, typed_columns

CDC = {"dsn": "dbname=x", "slot": "s"}
INT4, NUMERIC, TEXT, TSTZ = 23, 1700, 25, 1184
AMOUNT_TYPMOD = ((10 << 16) | 2) + 4  # numeric(10,2)
TYPES = {oid: PgType(oid, name, "b", 0, -1, 0, ",") for oid, _, name in builtin_types()}
INFO = TableInfo("shop", "orders", "d", (
    ColumnInfo("id", "id", "integer", INT4, True, False),
    ColumnInfo("amount", "amount", "numeric", NUMERIC, False, False, AMOUNT_TYPMOD),
    ColumnInfo("note", "note", "text", TEXT, False, False),
    ColumnInfo("at", "at", "timestamp with time zone", TSTZ, False, False),
))
TYPED = StructRows.of({"shop.orders": TableStruct(typed_columns(TYPES, INFO.columns), ("id",))})
ROW = ["7", "120.50", "x", "2024-01-02 03:04:05.5+00"]
AT = datetime(2024, 1, 2, 3, 4, 5, 500000, UTC)


def test_row_format_is_json_by_default_and_checked_by_name() -> None:
    assert CdcOptions.from_options(CDC).row_format == "json"
    assert CdcOptions.from_options({**CDC, "row_format": "struct"}).row_format == "struct"
    with pytest.raises(ConfigError, match="option 'row_format': bad value: 'typed'"):
        CdcOptions.from_options({**CDC, "row_format": "typed"})
    assert CdcOptions.from_options({**CDC, "row_format": "variant"}).row_format == "variant"


@pytest.mark.parametrize("row_format", ["struct", "variant"])
def test_typed_rows_refuse_what_they_cannot_carry(row_format: str) -> None:
    refused = ["message_prefixes"] + (
        ["topic_from", "stream_from", "partition_key_from"] if row_format == "variant" else [])
    for option in refused:
        with pytest.raises(ConfigError, match=f"option '{option}': not supported with "
                                              f"row_format={row_format}"):
            CdcOptions.from_options({**CDC, "row_format": row_format, option: "id",
                                     "default_topic": "t", "default_stream": "s"})
    if row_format == "struct":  # routed as the JSON mode routes (test_struct_types_pg)
        routed = CdcOptions.from_options({**CDC, "row_format": "struct", "topic_from": "id",
                                          "partition_key_from": "key", "default_topic": "t"})
        assert (routed.topic_from, routed.partition_key_from) == ("id", "key")


def test_schema_changes_as_rows_are_json_only() -> None:
    assert not CdcOptions.from_options(CDC).include_schema_changes
    assert CdcOptions.from_options({**CDC, "include_schema_changes": "true"}).include_schema_changes
    with pytest.raises(ConfigError, match="option 'include_schema_changes': not supported with "
                       "row_format=struct"):
        CdcOptions.from_options({**CDC, "row_format": "struct", "include_schema_changes": "true"})


def test_polling_has_no_row_format() -> None:
    with pytest.raises(ConfigError, match="option 'row_format': only applies to mode=cdc"):
        CdcOptions.from_options({"dsn": "dbname=x", "mode": "polling", "table": "t",
                                 "tracking_column": "ts", "row_format": "json"})


def test_typed_schemas_change_only_the_row_columns() -> None:
    spark, arrow = TYPED.schemas()
    assert spark["after"].dataType.simpleString() == (
        "struct<id:int,amount:decimal(10,2),note:string,at:timestamp>")
    assert spark["key"].dataType.simpleString() == "struct<id:int>"
    assert [f for f in spark.fields if f.name not in ("key", "before", "after")] == [
        f for f in SPARK_SCHEMA.fields if f.name not in ("key", "before", "after")]
    assert arrow.field("before").type == TYPED.row_arrow
    assert arrow.field("id") == ARROW_SCHEMA.field("id")


def _relation(extra: bool = False) -> bytes:
    columns = [(1, "id", INT4), (0, "amount", NUMERIC), (0, "note", TEXT), (0, "at", TSTZ)]
    return m_relation(5, "shop", "orders", b"d", columns + ([(0, "extra", INT4)] if extra else []))


def _insert(values: list[Any]) -> bytes:
    return m_insert(5, values)


def _pgoutput(rows: Any) -> list[Change]:
    return [e for e in PgOutputDecoder(typed=TYPED).events(rows) if isinstance(e, Change)]


def _batch(events: Any) -> pa.RecordBatch:
    (batch,) = record_batches(transactions(events, 100), Router(CdcOptions.from_options(CDC)),
                              100, TYPED.schemas()[1])
    return batch


# what the decoders leave in a change's images: typed values, but a decimal's and a
# timestamp's Postgres text, which Arrow casts when the batch is built
IMAGE = {"id": 7, "amount": "120.50", "note": "x", "at": "2024-01-02 03:04:05.5+00"}
TYPED_ROW = {"id": 7, "amount": Decimal("120.50"), "note": "x", "at": AT}


def test_pgoutput_rows_are_typed_dicts_an_unchanged_value_left_out_and_named() -> None:
    rows = txn(_relation(), _insert(ROW), m_update(5, ["7", "1", UNCHANGED, None]))
    insert, update = _pgoutput(rows)
    assert insert.after == IMAGE
    assert insert.key == {"id": 7}
    assert update.after == {"id": 7, "amount": "1", "at": None}
    assert update.unchanged == ("note",)
    assert _batch(PgOutputDecoder(typed=TYPED).events(rows)).column("after").to_pylist() == [
        TYPED_ROW, {"id": 7, "amount": Decimal("1.00"), "note": None, "at": None}]


def test_pgoutput_hot_path_types_like_the_general_way() -> None:
    # an insert and an update sending only the new row take the hot path; an update that also
    # sends its old key takes the general way: the same typed images
    rows = txn(_relation(), _insert(ROW), m_update(5, ROW),
               m_update(5, ROW, old=["7", None, None, None]))
    insert, update, keyed = _pgoutput(rows)
    assert insert.after == update.after == keyed.after == IMAGE
    assert insert.key == update.key == keyed.key == {"id": 7}
    assert (insert.op, update.op, keyed.op) == ("insert", "update", "update")
    assert _batch(PgOutputDecoder(typed=TYPED).events(rows)).column("after").to_pylist() == (
        3 * [TYPED_ROW])


def test_a_value_the_type_rejects_fails_its_batch_naming_the_change_and_column() -> None:
    rows = txn(_relation(), _insert(ROW), _insert(["7", "123456789.5", "x", None]))
    with pytest.raises(DecodeError, match=r"change at LSN 0/1[0-9A-F]+: column 'amount' of "
                       r"shop\.orders: cannot convert '123456789\.5'.*more than 8 digits before "
                       "the point") as failed:
        _batch(PgOutputDecoder(typed=TYPED).events(rows))
    second = _pgoutput(rows)[1]
    assert failed.value.lsn == second.lsn != _pgoutput(rows)[0].lsn


def test_text_decoder_rows_are_the_same_typed_dicts() -> None:
    line = ("table shop.orders: INSERT: id[integer]:7 amount[numeric]:120.50 note[text]:'x' "
            "at[timestamp with time zone]:'2024-01-02 03:04:05.5+00'")
    rows = [(0x10, 1, "BEGIN 1"), (0x18, 1, line), (0x20, 1, "COMMIT 1 (at 2024-01-02 "
                                                     "03:04:05+00)")]
    decoder = TextFormatDecoder(lambda schema, table: INFO, typed=TYPED)
    (change,) = [e for e in decoder.events(rows) if isinstance(e, Change)]
    assert change.after == IMAGE
    assert change.key == {"id": 7}
    decoder = TextFormatDecoder(lambda schema, table: INFO, typed=TYPED)
    assert _batch(decoder.events(rows)).column("after").to_pylist() == [TYPED_ROW]


def test_text_decoder_hot_path_types_like_the_general_way() -> None:
    # the first line of a table goes the general way and opens the hot path to the next ones
    line = ("table shop.orders: {}: id[integer]:7 amount[numeric]:{} note[text]:'x' "
            "at[timestamp with time zone]:'2024-01-02 03:04:05.5+00'")
    rows = [(0x10, 1, "BEGIN 1"), (0x18, 1, line.format("INSERT", "120.50")),
            (0x20, 1, line.format("INSERT", "120.50")), (0x28, 1, line.format("UPDATE", "120.50")),
            (0x30, 1, "COMMIT 1 (at 2024-01-02 03:04:05+00)")]
    changes = [e for e in TextFormatDecoder(lambda schema, table: INFO, typed=TYPED).events(rows)
               if isinstance(e, Change)]
    assert [c.after for c in changes] == 3 * [IMAGE]
    assert [c.key for c in changes] == 3 * [{"id": 7}]
    decoder = TextFormatDecoder(lambda schema, table: INFO, typed=TYPED)
    assert _batch(decoder.events(rows)).column("after").to_pylist() == 3 * [TYPED_ROW]


def test_a_changed_table_fails_at_its_first_change_after_the_changes_before_it() -> None:
    events = PgOutputDecoder(typed=TYPED).events(
        txn(_relation(), _insert(ROW)) + txn(_relation(extra=True), _insert([*ROW, "1"]),
                                             start=0x200))
    first = [next(events) for _ in range(3)]  # begin, the insert, commit
    assert isinstance(first[1], Change) and first[1].after["id"] == 7
    next(events)  # begin
    with pytest.raises(SchemaChangedError, match=r"table shop\.orders changed: column added: "
                       r"'extra'\. The query stops after every change committed before this one.*"
                       "A restart on this checkpoint with schema_evolution=fail .* is refused; "
                       "with schema_evolution=add_columns it evolves the structs.*"
                       "A restart on a new checkpoint with the same slot") as failed:
        next(events)
    assert failed.value.table == "shop.orders"


def test_a_dropped_column_and_another_type_are_named() -> None:
    relation = m_relation(5, "shop", "orders", b"d", [(1, "id", 20), (0, "amount", NUMERIC),
                                                        (0, "at", TSTZ)])
    with pytest.raises(SchemaChangedError, match="column dropped: 'note'; column 'id' type "
                       "changed from integer to bigint"):
        _pgoutput(txn(relation, _insert(["7", "1", None])))


def test_a_table_the_query_did_not_start_with_is_named() -> None:
    other = m_relation(6, "shop", "refunds", b"d", [(1, "id", INT4)])
    with pytest.raises(SchemaChangedError, match=r"shop\.refunds changed: the table was "
                       "not captured when the query started"):
        _pgoutput(txn(other, m_insert(6, ["1"])))


def test_record_batches_carry_the_structs() -> None:
    batch = _batch(PgOutputDecoder(typed=TYPED).events(
        txn(_relation(), _insert(ROW), m_update(5, ["7", "1", UNCHANGED, None]))))
    assert batch.schema == TYPED.schemas()[1]
    assert batch.column("after").to_pylist() == [
        TYPED_ROW, {"id": 7, "amount": Decimal("1.00"), "note": None, "at": None}]
    assert batch.column("before").to_pylist() == [None, None]
    assert batch.column("key").type == pa.struct([pa.field("id", pa.int32())])
    assert batch.column("unchanged").to_pylist() == [[], ["note"]]


def test_json_rows_are_unchanged_by_the_seam() -> None:
    events = PgOutputDecoder().events(txn(_relation(), _insert(ROW)))
    (change,) = [e for e in events if isinstance(e, Change)]
    assert change.after == ('{"id":7,"amount":"120.50","note":"x",'
                            '"at":"2024-01-02T03:04:05.5+00:00"}')


def test_struct_batches_become_the_json_modes_batches_byte_for_byte() -> None:
    """What pg-to-iggy does with row_format=struct (json_rows' mapInArrow step): the same
    changes, decoded in both modes, give the same key/before/after text."""
    # numeric(10,2)'s text has its two places
    changes = txn(_relation(), _insert(ROW), m_update(5, ["7", "1.00", UNCHANGED, None]))
    router = Router(CdcOptions.from_options(CDC))
    (json_mode,) = record_batches(transactions(PgOutputDecoder().events(changes), 100),
                                  router, 100, ARROW_SCHEMA)
    (typed,) = record_batches(transactions(PgOutputDecoder(typed=TYPED).events(changes), 100),
                              router, 100, TYPED.schemas()[1])
    spark_schema = TYPED.schemas()[0]
    assert spark_schema["after"].dataType["amount"].metadata == {
        "pg_type_oid": NUMERIC, "pg_type": "numeric"}
    (rendered,) = json_batches(spark_schema)(iter([typed]))
    assert rendered.schema == ARROW_SCHEMA
    assert rendered.equals(json_mode)
    assert rendered.column("after").to_pylist()[1] == '{"id":7,"amount":"1.00","at":null}'


def test_the_pipeline_takes_json_and_struct_rows_only() -> None:
    from pg_to_iggy.pipeline import start_pipeline

    with pytest.raises(ConfigError, match=r"option 'row_format': 'variant': the pipeline "
                       r"routes .* use row_format=json or struct"):
        start_pipeline(object(), dsn="dbname=x", slot="s", url="iggy://x",  # type: ignore[arg-type]
                       checkpoint="/c", source={"ROW_FORMAT": "variant"})


def test_schema_evolution_needs_struct() -> None:
    assert CdcOptions.from_options({**CDC, "row_format": "struct"}).schema_evolution == "fail"
    with pytest.raises(ConfigError, match="'schema_evolution': only applies with row_format"):
        CdcOptions.from_options({**CDC, "schema_evolution": "add_columns"})


def _widened(*columns: ColumnInfo) -> StructRows:
    info = (*INFO.columns, *columns)
    return StructRows.of({"shop.orders": TableStruct(typed_columns(TYPES, info), ("id",))})


EXTRA = ColumnInfo("extra", "extra", "integer", INT4, False, False)


def test_a_checkpoint_of_the_same_structs_goes_on() -> None:
    assert checkpoint_difference(TYPED.stamp(), TYPED, "fail") is None
    assert checkpoint_difference(None, None, "fail") is None  # the JSON mode's


@pytest.mark.parametrize("row_format", ["json", "variant"])
def test_a_checkpoint_of_structs_is_refused_to_another_row_format_naming_both(
    row_format: str,
) -> None:
    assert checkpoint_difference(TYPED.stamp(), None, "fail", row_format=row_format) == (
        f"the checkpoint was written by a row_format=struct query, this one is "
        f"row_format={row_format}: start it on a new checkpoint")
    assert checkpoint_difference(None, TYPED, "add_columns") == (
        "the checkpoint was written by a row_format=json or variant query, this one is "
        "row_format=struct: start it on a new checkpoint")


def test_fail_refuses_other_structs_naming_the_difference() -> None:
    problem = checkpoint_difference(TYPED.stamp(), _widened(EXTRA), "fail")
    assert problem is not None
    assert problem.startswith("the tables' columns differ from the structs this checkpoint "
                              "was written with: table shop.orders: columns added: 'extra'. "
                              "Restart with "
                              "schema_evolution=add_columns to evolve the structs")


def test_a_postgres_type_changed_under_one_spark_type_is_named() -> None:
    """text -> jsonb keeps a string field, but not the JSON pg-to-iggy writes from it."""
    jsonb = (*INFO.columns[:2], INFO.columns[2]._replace(type_name="jsonb", type_oid=3802),
             INFO.columns[3])
    retyped = StructRows.of({"shop.orders": TableStruct(typed_columns(TYPES, jsonb), ("id",))})
    for evolution in ("fail", "add_columns"):
        problem = checkpoint_difference(TYPED.stamp(), retyped, evolution)
        assert problem is not None
        assert ("type changed: 'note' (text (string) in the checkpoint, jsonb (string) now)"
                if evolution == "fail" else "table shop.orders, column 'note': text (string) "
                "in the earlier structs cannot become jsonb (string)") in problem


def test_add_columns_takes_added_columns_and_needs_schema_location_for_dropped_ones() -> None:
    assert checkpoint_difference(TYPED.stamp(), _widened(EXTRA), "add_columns") is None
    dropped = StructRows.of({"shop.orders": TableStruct(
        typed_columns(TYPES, INFO.columns[:3]), ("id",))})
    problem = checkpoint_difference(TYPED.stamp(), dropped, "add_columns")
    assert problem is not None and "columns dropped: 'at'" in problem
    assert "keeps 'at' as null fields only if load() gives them, which it reads from " \
        "schema_location" in problem and "set it and restart twice" in problem
    assert "written there now" in str(checkpoint_difference(TYPED.stamp(), dropped,
                                                            "add_columns", location=True))
    # with schema_location, load() gives the union: the checkpoint's structs evolve to it
    assert checkpoint_difference(TYPED.stamp(), dropped.evolved(TYPED.stamp()),
                                 "add_columns") is None


