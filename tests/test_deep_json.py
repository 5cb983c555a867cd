"""A json/jsonb value nested thousands deep, in each row format.

``json`` and ``struct`` carry the value's text as Postgres wrote it (nothing parses it);
``variant`` parses and encodes it with recursion, so beyond
:data:`~postgres_cdc_source.variant_types.MAX_JSON_DEPTH` it is refused as a value its type
cannot hold: a :class:`DecodeError` naming the change's LSN and the column, never a
``RecursionError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql
from test_decoders_pgoutput import m_insert, m_relation, txn

from connector_common.change_rows import ARROW_SCHEMA
from connector_common.lsn import parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows.variant import encoding as variant
from postgres_cdc_source.rows.variant.format import VARIANT_ROWS
from postgres_cdc_source.rows.variant.values import MAX_JSON_DEPTH, converter_for
from postgres_cdc_source.source import PgCdcDataSource
from postgres_cdc_source.stream.reader import CdcPartition

JSONB = 3802
DEEP = 5000


def _nested(depth: int, inner: str = "1.50") -> str:
    return "[" * depth + inner + "]" * depth


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text("[]{}\"\\a,:"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("[]{}\"a"), inner,
                                                                 max_size=3),
    max_leaves=40)


@given(_JSON, st.integers(0, MAX_JSON_DEPTH + 2))
def test_the_depth_check_counts_brackets_outside_strings(value: Any, wrap: int) -> None:
    """Brackets inside strings (escaped quotes too) do not count; every level does."""
    text = "[" * wrap + json.dumps(value) + "]" * wrap
    depth = wrap + _depth(value)
    convert = converter_for(JSONB)
    if depth <= MAX_JSON_DEPTH:
        convert(text)
    else:
        with pytest.raises(ValueError, match=f"json nested deeper than {MAX_JSON_DEPTH}"):
            convert(text)


def _deep_stack(frames: int, then: Callable[[], Any]) -> Any:
    return then() if frames == 0 else _deep_stack(frames - 1, then)


@pytest.mark.parametrize("kind", ["[", '{"k":'])
def test_the_deepest_value_taken_is_encoded_below_a_deep_caller(kind: str) -> None:
    """:data:`MAX_JSON_DEPTH` levels of arrays or objects parse and encode with 400 frames of
    the recursion limit already used by callers (a Spark worker uses far fewer)."""
    close = "]" if kind == "[" else "}"
    text = kind * MAX_JSON_DEPTH + "1" + close * MAX_JSON_DEPTH
    value = _deep_stack(400, lambda: variant.encode({"doc": converter_for(JSONB)(text)}))
    assert value[0]


def _decode(rows: Any, typed: Any) -> list[dict[str, Any]]:
    """The change rows of pgoutput ``rows`` as the reader builds them (``typed`` None: json)."""
    options = CdcOptions.from_options({"dsn": "dbname=x", "slot": "s"})
    schema = ARROW_SCHEMA if typed is None else typed.schemas()[1]
    events = PgOutputDecoder(typed=typed).events(rows)
    return [row for batch in record_batches(transactions(events, 100), Router(options), 100,
                                            schema) for row in batch.to_pylist()]


def test_variant_refuses_a_value_nested_thousands_deep_naming_the_change_and_column() -> None:
    rows = txn(m_relation(5, "shop", "docs", b"d", [(1, "id", 23), (0, "doc", JSONB)]),
               m_insert(5, ["1", _nested(DEEP)]))
    with pytest.raises(DecodeError, match=r"change at LSN 0/[0-9A-F]+: column 'doc' of "
                       rf"shop\.docs: cannot convert '\[\[\[.*nested deeper than "
                       rf"{MAX_JSON_DEPTH}") as refused:
        _decode(rows, VARIANT_ROWS)
    assert refused.value.lsn == rows[2][0]  # the insert (after BEGIN and the relation)


def test_json_rows_carry_a_value_nested_thousands_deep_as_its_text() -> None:
    rows = txn(m_relation(5, "shop", "docs", b"d", [(1, "id", 23), (0, "doc", JSONB)]),
               m_insert(5, ["1", _nested(DEEP)]))
    [row] = _decode(rows, None)
    assert row["after"] == '{"id":1,"doc":' + _nested(DEEP) + "}"


@pytest.mark.pg_versions(18)
@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
@pytest.mark.parametrize("row_format", ["json", "struct", "variant"])
def test_a_jsonb_nested_thousands_deep_in_each_row_format(
    pg: LocalPostgres, name: str, plugin: str, row_format: str
) -> None:
    """From a real Postgres: ``json`` and ``struct`` deliver the text Postgres wrote (``1.50``
    kept), ``variant`` fails the batch with a :class:`DecodeError` naming the insert's LSN and
    the column."""
    slot = f"{name}_{plugin}_{row_format}"
    with pg.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, doc jsonb)").format(
            sql.Identifier(name)))
    source = PgCdcDataSource({"dsn": pg.dsn, "slot": slot, "plugin": plugin,
                              "row_format": row_format, "include_tables": rf"public\.{name}"})
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    try:
        with pg.connect() as conn:
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, %s::jsonb)").format(
                sql.Identifier(name)), (_nested(DEEP),))
        end = reader.latestOffset(start, ReadAllAvailable())
        part = CdcPartition(parse_lsn(start["lsn"]), parse_lsn(end["lsn"]))
        if row_format == "variant":
            with pytest.raises(DecodeError, match=rf"column 'doc' of public\.{name}: cannot "
                               rf"convert .*nested deeper than {MAX_JSON_DEPTH}") as refused:
                list(reader.read(part))
            assert refused.value.lsn is not None
            return
        [row] = [row for batch in reader.read(part) for row in batch.to_pylist()]
    finally:
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    doc = row["after"]["doc"] if row_format == "struct" else row["after"].removeprefix(
        '{"id":1,"doc":').removesuffix("}")
    assert doc == _nested(DEEP)
