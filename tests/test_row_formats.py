"""The row formats' room (``postgres_cdc_source.rows``): every format in the registry meets the
:class:`RowFormat` contract under its option's name, and a new format needs only its own
module and its maker in the registry to be read by the decoders, routing and the batches."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType
from test_decoders_pgoutput import m_insert, m_relation, txn

from connector_common.change_rows import SPARK_SCHEMA, typed_schemas
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.options import ROW_FORMAT_REFUSALS, ROW_FORMATS, CdcOptions
from postgres_cdc_source.pg_types import TYPES
from postgres_cdc_source.rows import RowFormat, RowShape
from postgres_cdc_source.rows.json.format import JSON_ROWS
from postgres_cdc_source.rows.json.values import Converter, converter_for_oid
from postgres_cdc_source.rows.registry import ROW_FORMATS as REGISTRY
from postgres_cdc_source.rows.registry import rows_for
from postgres_cdc_source.rows.struct.structs import StructRows
from postgres_cdc_source.rows.struct.types import TableStruct, TypedColumn
from postgres_cdc_source.rows.variant.format import VARIANT_ROWS

CDC = {"dsn": "dbname=x", "slot": "s"}
MEMBERS = ("name", "retyping", "fixed_tables", "json_in_sql", "encode_image", "refused_options",
           "schemas", "retyped", "stamped", "check_offset", "value_json", "key_text",
           "reselect_converters")


def _structs() -> StructRows:
    return StructRows.of({"shop.orders": TableStruct(
        (TypedColumn("id", IntegerType(), TYPES.oid("integer"), "integer"),), ("id",))})


def test_the_registry_holds_every_row_format_by_its_option_value() -> None:
    assert tuple(REGISTRY) == ROW_FORMATS == tuple(ROW_FORMAT_REFUSALS)
    made = {"json": JSON_ROWS, "variant": VARIANT_ROWS, "struct": _structs()}
    for name in ROW_FORMATS:
        if name != "struct":  # struct's maker reads the catalog
            assert REGISTRY[name](CdcOptions.from_options({**CDC, "row_format": name})) is (
                made[name])
        rows = made[name]
        assert all(hasattr(rows, member) for member in MEMBERS), name
        assert rows.name == name
        assert rows.refused_options == ROW_FORMAT_REFUSALS[name]
        assert rows.schemas()[0].names == SPARK_SCHEMA.names


def _as_is(image: dict[str, Any]) -> dict[str, Any]:
    return image


_ROW = StructType([StructField("id", LongType()), StructField("note", StringType())])
_KEY = StructType([StructField("id", LongType())])
_ROW_ARROW = pa.struct([pa.field("id", pa.int64()), pa.field("note", pa.string())])
_KEY_ARROW = pa.struct([pa.field("id", pa.int64())])


class ShoutRows:
    """A toy format: rows of ``(id bigint, note text)`` tables as structs, every note in
    capitals. Its images are dicts of its converters' values, as every format's that retypes
    the decoders' shapes."""

    name = "shout"
    fixed_tables = None
    json_in_sql = False
    encode_image = staticmethod(_as_is)
    refused_options: Mapping[str, str] = {}

    @property
    def retyping(self) -> ShoutRows:
        return self

    def schemas(self) -> tuple[StructType, pa.Schema]:
        return typed_schemas(_ROW, _KEY, _ROW_ARROW, _KEY_ARROW)

    def retyped(self, shape: RowShape, *, whole: bool = True,
                types: Sequence[int | str] | None = None) -> RowShape:
        assert types is not None
        by_name = {"text": str.upper, "bigint": int}
        converters = [by_name[t if isinstance(t, str) else TYPES[t].name] for t in types]
        return RowShape(shape.schema, shape.table, shape.names, converters, shape.key,
                        shape.keep, _as_is)

    def stamped(self, offset: dict[str, Any]) -> dict[str, Any]:
        return offset

    def check_offset(self, offset: Mapping[str, Any], options: CdcOptions) -> None:
        return None

    def value_json(self, column: str) -> Callable[[Any], Any] | None:
        return None

    def key_text(self) -> Callable[[Any], str | None] | None:
        return None

    def reselect_converters(
        self, schema: str, table: str, oids: Mapping[str, int], key: Sequence[str],
    ) -> tuple[dict[str, Converter], dict[str, Callable[[Any], Any]]] | None:
        return None


def test_a_new_format_needs_only_its_module_and_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shout: RowFormat = ShoutRows()
    monkeypatch.setitem(REGISTRY, "shout", lambda options: shout)  # type: ignore[index]
    options = dataclasses.replace(
        CdcOptions.from_options({**CDC, "topic_from": "note", "default_topic": "t"}),
        row_format="shout")
    rows = rows_for(options)
    assert rows is shout
    relation = m_relation(5, "shop", "orders", b"d", [(1, "id", TYPES.oid("bigint")),
                                                      (0, "note", TYPES.oid("text"))])
    events = PgOutputDecoder(typed=rows.retyping, keep_values=True).events(
        txn(relation, m_insert(5, ["7", "hello"])))
    (batch,) = record_batches(transactions(events, 100), Router(options, rows), 100,
                              rows.schemas()[1])
    assert batch.column("after").to_pylist() == [{"id": 7, "note": "HELLO"}]
    assert batch.column("key").to_pylist() == [{"id": 7}]
    assert batch.column("topic").to_pylist() == ["HELLO"]  # routed by the value it carries
    assert converter_for_oid(TYPES.oid("text")) is str  # the JSON mode's, untouched
