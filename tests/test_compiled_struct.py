"""``row_format=struct`` through the compiled core and the pure-Python decoder: the same batches.

Random pgoutput sessions of tables of one shape (every Spark type of the struct table: integers,
floats, booleans, text, decimals and unconstrained numerics, json, bytea, dates, timestamps,
arrays, uuids), with keys or none, NULLs, TOAST values left out, texts Postgres does not print
(``007``, ``true``, ``\\x01 02``), values a field cannot hold, relations announced again with
other columns under both ``schema_evolution`` modes: read through both paths with random fetch,
batch and spill sizes, the batches are equal row for row, or both paths raise the same error
after the same rows. The core is imported directly, so these run whatever ``IGGY_SPARK_CORE``
says.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.decoding import BlockCount, fetched
from support.pgoutput_messages import m_begin, m_commit, m_delete, m_insert, m_relation, m_update

from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.catalog import ColumnInfo
from postgres_cdc_source.decoding import UNCHANGED, PeekRow
from postgres_cdc_source.decoding.blocks import ChangeBlock
from postgres_cdc_source.decoding.compiled import CompiledPgOutput
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import DecodeError, SchemaChangedError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.pg_types import builtin_types
from postgres_cdc_source.rows.struct.structs import StructRows
from postgres_cdc_source.rows.struct.types import PgType, TableStruct, typed_columns

CORE: ModuleType = importlib.import_module("iggy_spark_core")

INT2, INT4, INT8, OID, BOOL, FLOAT4, FLOAT8, NUMERIC = 21, 23, 20, 26, 16, 700, 701, 1700
TEXT, VARCHAR, JSONB, BYTEA, DATE, TIMESTAMP, TIMESTAMPTZ, UUID = (
    25, 1043, 3802, 17, 1082, 1114, 1184, 2950)
TEXT_ARRAY, INT4_ARRAY, FLOAT8_ARRAY = 1009, 1007, 1022
AMOUNT = ((10 << 16) | 2) + 4  # numeric(10,2)

TYPES: dict[int, PgType] = {}
for _oid, _array, _name in builtin_types():
    TYPES[_oid] = PgType(_oid, _name, "b", 0, -1, 0, ",")
    TYPES[_array] = PgType(_array, "_" + _name, "b", 0, -1, _oid, ",")


def _rare(common: st.SearchStrategy[str], rare: Sequence[str]) -> st.SearchStrategy[str]:
    """Mostly ``common``; now and then one of ``rare`` (odd or unholdable texts)."""
    return st.one_of(*[common] * 12, st.sampled_from(rare))


def _float_text(x: float) -> str:
    return repr(x).removesuffix(".0") if x == x and abs(x) != float("inf") else (
        "NaN" if x != x else "Infinity" if x > 0 else "-Infinity")


_ODD_INTS = ["007", "+5", "-0", "1_000", " 1"]  # each in every integer's range
COLUMNS: list[tuple[int, int, st.SearchStrategy[str]]] = [  # (type OID, typmod, texts)
    (INT2, -1, _rare(st.integers(-2**15, 2**15 - 1).map(str), _ODD_INTS)),
    (INT4, -1, _rare(st.integers(-2**31, 2**31 - 1).map(str), _ODD_INTS)),
    (INT8, -1, _rare(st.integers(-2**63, 2**63 - 1).map(str),
                     [*_ODD_INTS, "123456789012345678", "one"])),
    (OID, -1, st.integers(0, 2**32 - 1).map(str)),
    (FLOAT4, -1, _rare(st.floats(width=32).map(_float_text), ["1e400", "1.5e-50", " 1", "fast"])),
    (FLOAT8, -1, _rare(st.floats().map(_float_text),
                       ["1e400", "1e-400", "01.5", ".5", "5.", "1E5", "inf"])),
    (BOOL, -1, _rare(st.sampled_from(["t", "f"]), ["true", "false", "yes"])),
    (TEXT, -1, st.text(st.characters(exclude_categories=("Cs",)), max_size=12)),
    (VARCHAR, -1, st.text(max_size=4)),
    (NUMERIC, AMOUNT, _rare(st.decimals(-10**7, 10**7, places=2).map(str),
                            ["1.5", "12345678901.00", "NaN", "0.001", "1E+2"])),
    (NUMERIC, -1, st.decimals(allow_nan=False, places=3).map(str)),
    (JSONB, -1, st.sampled_from(['{"a": 1}', "[1, 2]", '"x"', "null"])),
    (BYTEA, -1, _rare(st.binary(max_size=8).map(lambda b: "\\x" + b.hex()),
                      ["\\xABCD", "\\x01 02", "abc", "\\xabc"])),
    (DATE, -1, _rare(st.dates().map(str), ["infinity", "0044-03-15 BC"])),
    (TIMESTAMP, -1, _rare(st.datetimes().map(lambda d: str(d)),
                          ["infinity", "2024-01-02 03:04:05+00"])),
    (TIMESTAMPTZ, -1, _rare(st.datetimes().map(lambda d: f"{d}+00"),
                            ["2024-01-02 03:04:05+05:30", "-infinity", "2024-01-02 03:04:05"])),
    (TEXT_ARRAY, -1, _rare(st.sampled_from(["{}", "{a,b}", '{NULL,"x y"}']), ["{{a},{b}}",
                                                                               "{unclosed"])),
    (INT4_ARRAY, -1, st.sampled_from(["{}", "{1,NULL,3}"])),
    (FLOAT8_ARRAY, -1, st.sampled_from(["{1.5,NaN,-Infinity}"])),
    (UUID, -1, st.uuids().map(str)),
]

Column = tuple[str, int, int, st.SearchStrategy[str]]  # name, type OID, typmod, texts
TABLES = ("orders", "items", "more")


def _structs(columns: Sequence[Column], keys: int, evolution: str) -> StructRows:
    infos = [ColumnInfo(name, name, TYPES[oid].name, oid, i < keys, False, typmod)
             for i, (name, oid, typmod, _) in enumerate(columns)]
    table = TableStruct(typed_columns(TYPES, infos), tuple(c[0] for c in columns[:keys]))
    return StructRows.of({f"s.{name}": table for name in TABLES}, evolution)


@st.composite
def column_sets(draw: st.DrawFn) -> list[Column]:
    picked = draw(st.lists(st.sampled_from(range(len(COLUMNS))), min_size=1, max_size=6,
                           unique=True))
    return [(f"c{i}", *COLUMNS[i]) for i in picked]


@st.composite
def sessions(draw: st.DrawFn) -> tuple[StructRows, list[PeekRow]]:
    """The query's structs (tables of one shape) and transactions of changes of up to three of
    its tables, each announced before its first change; now and then announced again with
    other columns (DDL), which ``fail`` refuses and ``add_columns`` may type by name."""
    columns = draw(column_sets())
    keys = draw(st.integers(0, min(2, len(columns))))
    structs = _structs(columns, keys, draw(st.sampled_from(["fail", "add_columns"])))
    relids = draw(st.lists(st.sampled_from([10, 11, 12]), min_size=1, max_size=3, unique=True))
    shapes = {relid: columns for relid in relids}
    announced: set[int] = set()
    rows: list[PeekRow] = []
    lsn = 0x1000
    for xid in range(700, 700 + draw(st.integers(1, 3))):
        messages = [m_begin(xid, 1000 * xid)]
        for _ in range(draw(st.integers(0, 14))):
            relid = draw(st.sampled_from(relids))
            if relid not in announced or draw(st.integers(0, 30)) == 0:
                if relid in announced:
                    shapes[relid] = draw(st.one_of(
                        column_sets(), st.just(shapes[relid][:max(keys, 1)])))
                identity = b"f" if keys == len(shapes[relid]) and keys else b"d"
                messages.append(m_relation(
                    relid, "s", TABLES[relid - 10], identity,
                    [(int(i < keys), name, oid) for i, (name, oid, _, _) in
                     enumerate(shapes[relid])]))
                announced.add(relid)
            texts = [draw(c[3]) for c in shapes[relid]]
            row: list[Any] = [t if i < keys else draw(st.one_of(
                *[st.just(t)] * 6, st.none(), st.just(UNCHANGED)))
                for i, t in enumerate(texts)]
            what = draw(st.sampled_from(["insert"] * 4 + ["update"] * 4 + ["update_key",
                                                                           "delete"]))
            plain = [None if v is UNCHANGED else v for v in row]
            if what == "insert":
                messages.append(m_insert(relid, plain))
            elif what == "update":
                messages.append(m_update(relid, row))
            elif what == "update_key":
                messages.append(m_update(relid, row, plain))
            else:
                messages.append(m_delete(relid, plain))
        for data in messages:
            rows.append((lsn, xid, data))
            lsn += 16
        rows.append((lsn, xid, m_commit(lsn + 8, 1000 * xid)))
        lsn += 16
    return structs, rows


Outcome = tuple[list[dict[str, Any]], str | None]


def _read(events: Iterable[Any], structs: StructRows, batch_rows: int, spill_rows: int,
          router: Router) -> Outcome:
    """The batches' rows, and the error that ended them."""
    rows: list[dict[str, Any]] = []
    try:
        for batch in record_batches(transactions(events, spill_rows), router, batch_rows,
                                    structs.schemas()[1]):
            rows.extend(batch.to_pylist())
    except (DecodeError, SchemaChangedError) as exc:
        return rows, f"{type(exc).__name__}: {exc}"
    return rows, None


def both(structs: StructRows, rows: Sequence[PeekRow], *, fetch: int = 1000,
         batch_rows: int = 1000, spill_rows: int = 1000, routes: dict[str, str] | None = None,
         ) -> tuple[Outcome, Outcome, int]:
    """``(Python path's outcome, compiled path's, rows the core took in blocks)``; compare
    them as text, in which NaN equals NaN."""
    options = CdcOptions.from_options({"dsn": "postgresql://u@localhost/db", "slot": "s",
                                       "row_format": "struct", **(routes or {})})
    router = Router(options, structs)
    python = _read(PgOutputDecoder(typed=structs).events(rows), structs, batch_rows, spill_rows,
                   router)
    count = BlockCount()
    compiled = CompiledPgOutput(PgOutputDecoder(typed=structs), CORE, structs)
    return (python, _read(count(compiled.events(fetched(rows, fetch))), structs, batch_rows,
                          spill_rows, router), count.taken)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.integers(1, 40), st.integers(1, 30), st.integers(1, 30),
       st.sampled_from([{}, {"topic_from": "table", "stream_from": "schema"},
                        {"default_stream": "s", "default_topic": "t"}]))
def test_random_struct_sessions_give_the_same_batches_on_both_paths(
    session: tuple[StructRows, list[PeekRow]], fetch: int, batch_rows: int, spill_rows: int,
    routes: dict[str, str],
) -> None:
    structs, rows = session
    python, compiled, _ = both(structs, rows, fetch=fetch, batch_rows=batch_rows,
                               spill_rows=spill_rows, routes=routes)
    assert repr(compiled) == repr(python)


# === one table, every type ======================================================================

EVERY = [(f"c{i}", *column) for i, column in enumerate(COLUMNS)]
GOOD = ["-7", "7", "-9223372036854775808", "4294967295", "1.5", "-0.1", "t", "tekst", "v",
        "-12.50", "3.14159", '{"a": [1]}', "\\x00ff", "2024-02-29", "2024-01-02 03:04:05.5",
        "2024-01-02 03:04:05.123456+00", '{a,"b c",NULL}', "{1,2}", "{1.5,NaN}",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]


def _one_table(values: Sequence[Sequence[str | None]], keys: int = 1) -> tuple[StructRows,
                                                                               list[PeekRow]]:
    structs = _structs(EVERY, keys, "fail")
    relation = m_relation(10, "s", "orders", b"d",
                          [(int(i < keys), name, oid) for i, (name, oid, _, _) in enumerate(EVERY)])
    body = [m_begin(700), relation, *(m_insert(10, list(v)) for v in values)]
    rows = [(0x1000 + 16 * i, 700, data) for i, data in enumerate(body)]
    return structs, [*rows, (0x1000 + 16 * len(body), 700, m_commit(0x2000))]


def test_every_type_is_taken_by_the_core_and_typed_as_the_python_path_types_it() -> None:
    assert len(GOOD) == len(EVERY)
    structs, rows = _one_table([GOOD, [GOOD[0], *[None] * (len(GOOD) - 1)]])
    python, compiled, taken = both(structs, rows)
    assert repr(compiled) == repr(python) and python[1] is None and taken == 2
    after = python[0][0]["after"]
    assert after["c1"] == 7 and after["c6"] is True and after["c12"] == b"\x00\xff"
    assert after["c16"] == ["a", "b c", None] and str(after["c9"]) == "-12.50"


@pytest.mark.parametrize(("column", "bad"), [
    (9, "12345678901.00"), (13, "infinity"), (14, "infinity"), (15, "-infinity"),
    (16, "{{a},{b}}"), (6, "yes"), (2, "one"), (12, "abc"),
])
def test_a_value_its_field_cannot_hold_fails_both_paths_with_the_same_error(
    column: int, bad: str,
) -> None:
    values = [GOOD, [*GOOD[:column], bad, *GOOD[column + 1:]], GOOD]
    structs, rows = _one_table(values)
    python, compiled, _ = both(structs, rows)
    assert python[1] is not None and f"column 'c{column}'" in python[1]
    assert repr(compiled) == repr(python)


def test_typed_blocks_hold_the_fields_as_the_core_keeps_them() -> None:
    structs, rows = _one_table([GOOD, GOOD], keys=2)
    blocks = [e for e in CompiledPgOutput(PgOutputDecoder(typed=structs), CORE, structs)
              .events([rows]) if isinstance(e, ChangeBlock)]
    (block,) = blocks
    assert block.after.type.field("c0").type == pa.string()  # an int2's checked text
    assert block.after.type.field("c12").type == pa.binary()  # a bytea's bytes
    assert block.after.type.field("c16").type == pa.list_(pa.string())  # the converter's
    assert block.key.to_pylist() == [{"c0": "-7", "c1": "7"}] * 2
    assert block[1:].after.field("c6").to_pylist() == ["t"]
