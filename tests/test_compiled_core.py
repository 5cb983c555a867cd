"""The compiled core and the pure-Python decoder give the same batches for the same WAL.

Random pgoutput sessions (relations of every type the type table names and some it does not,
keys, identities, filtered tables, TOAST values left out, messages, DDL, truncates, malformed
values), read through both paths (:mod:`postgres_cdc_source.decoding.compiled` and
:class:`~postgres_cdc_source.decoding.pgoutput.PgOutputDecoder`) with random fetch, batch and
spill sizes: the batches are equal row for row, or both paths raise the same error after the
same rows. The core is imported directly, so these run whatever ``IGGY_SPARK_CORE`` says.
"""

from __future__ import annotations

import importlib
import math
import struct
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.decoding import BlockCount, fetched
from support.pgoutput_messages import (
    m_begin,
    m_commit,
    m_delete,
    m_insert,
    m_message,
    m_relation,
    m_truncate,
    m_update,
)

from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.decoding import UNCHANGED, PeekRow
from postgres_cdc_source.decoding.blocks import ChangeBlock
from postgres_cdc_source.decoding.compiled import CompiledPgOutput
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.options import CdcOptions

CORE: ModuleType = importlib.import_module("iggy_spark_core")

# === the two paths =============================================================================


def _keeps(schema: str, table: str) -> bool:
    return not table.startswith("skip")


def _delivers(prefix: str) -> bool:
    return prefix.startswith("keep")


def _options(**routes: str) -> CdcOptions:
    return CdcOptions.from_options({"dsn": "postgresql://u@localhost/db", "slot": "s", **routes})


Outcome = tuple[list[dict[str, Any]], str | None]


def _read(events: Iterable[Any], router: Router, batch_rows: int, spill_rows: int) -> Outcome:
    rows: list[dict[str, Any]] = []
    try:
        for batch in record_batches(transactions(events, spill_rows), router, batch_rows):
            rows.extend(batch.to_pylist())
    except DecodeError as exc:
        return rows, str(exc)
    return rows, None


def both(rows: Sequence[PeekRow], *, fetch: int = 1000, batch_rows: int = 1000,
         spill_rows: int = 1000, routes: dict[str, str] | None = None,
         ) -> tuple[Outcome, Outcome, int]:
    """``(Python path's outcome, compiled path's, rows the core took in blocks)``."""
    router = Router(_options(**(routes or {})))
    python = _read(PgOutputDecoder(_keeps, messages=_delivers).events(rows), router,
                   batch_rows, spill_rows)
    count = BlockCount()
    compiled = CompiledPgOutput(PgOutputDecoder(_keeps, messages=_delivers), CORE)
    return (python, _read(count(compiled.events(fetched(rows, fetch))), router, batch_rows,
                          spill_rows), count.taken)


def session(*transactions_: Sequence[bytes], start: int = 0x1000) -> list[PeekRow]:
    """Peek rows of whole transactions (each message list wrapped in B and C), LSNs rising."""
    rows: list[PeekRow] = []
    lsn = start
    for xid, messages in enumerate(transactions_, start=700):
        for data in (m_begin(xid, 1000 * xid), *messages):
            rows.append((lsn, xid, data))
            lsn += 16
        rows.append((lsn, xid, m_commit(lsn + 8, 1000 * xid)))
        lsn += 16
    return rows


# === one column, value by value ===============================================================

# type OIDs: the built-ins the core writes itself, and some it hands to the converter
INT2, INT4, INT8, OID, BOOL, FLOAT4, FLOAT8, NUMERIC = 21, 23, 20, 26, 16, 700, 701, 1700
TEXT, VARCHAR, JSON, JSONB, BYTEA, TIMESTAMP, TIMESTAMPTZ = 25, 1043, 114, 3802, 17, 1114, 1184
DATE, UUID, TEXT_ARRAY, INT4_ARRAY, ENUM = 1082, 2950, 1009, 1007, 99_001


def one_column(oid: int, texts: Sequence[str | None]) -> list[PeekRow]:
    """A table ``t(id int4 key, v <oid>)`` and an insert of each value."""
    relation = m_relation(1, "public", "t", b"d", [(1, "id", INT4), (0, "v", oid)])
    return session([relation, *(m_insert(1, [str(i), text]) for i, text in enumerate(texts))])


def assert_same(rows: Sequence[PeekRow], **sizes: Any) -> int:
    python, compiled, taken = both(rows, **sizes)
    assert compiled == python
    return taken


FLOAT_TEXTS = ["0", "-0", "1", "1.5", "-2.25", "0.1", "0.30000000000000004", "0.0001", "1e-05",
               "1.5e-07", "1e+100", "-1.7976931348623157e+308", "5e-324", "123456789012345",
               "1234567890123456", "1e+15", "NaN", "Infinity", "-Infinity", "1.50", "01.5",
               ".5", "5.", "1E5", " 1.5", "3.4028235e+38", "100"]
INT_TEXTS = ["0", "-1", "7", "2147483647", "-9223372036854775808", "9223372036854775807",
             "007", "+5", "-0", "1_000", "123456789012345678"]
TEXTS = ["", "plain", 'quo"te', "back\\slash", "new\nline", "tab\tcr\r", "\x01\x1f\x7f",
         "\b\f", "é ü 中文 🎉", "\u2028\u2029", "/slash", "{\"looks\": \"json\"}"]
TIMESTAMPS = ["2024-01-02 03:04:05.5", "2024-01-02 03:04:05", "infinity", "-infinity",
              "0044-03-15 12:00:00 BC", "2024-01-02 03:04:05.123456"]
TIMESTAMPTZS = ["2024-01-02 03:04:05.5+00", "2024-01-02 03:04:05+05:30", "2024-01-02 03:04:05+05",
                "2024-01-02 03:04:05-03", "infinity", "-infinity", "0044-03-15 12:00:00+00 BC",
                "2024-01-02 03:04:05+05:45:30", "2024-01-02", "x+"]


@pytest.mark.parametrize(("oid", "texts"), [
    (FLOAT8, FLOAT_TEXTS), (FLOAT4, FLOAT_TEXTS), (INT2, INT_TEXTS), (INT4, INT_TEXTS),
    (INT8, INT_TEXTS), (OID, ["0", "4294967295"]), (NUMERIC, ["1.50", "NaN", "-0.000"]),
    (BOOL, ["t", "f", "true", "false"]), (TEXT, TEXTS), (VARCHAR, TEXTS), (UUID, TEXTS),
    (ENUM, TEXTS), (DATE, ["2024-01-02", "infinity"]),
    (JSON, ['{"a": [1, 2.50, "x"]}', "[]", "null", '"s"', "1e400"]),
    (JSONB, ['{"a": 1}', "3", '{"deep": {"er": [true, false]}}']),
    (BYTEA, ["\\x", "\\x00ff", "\\xDEADbeef", "\\x0102030405", "\\x" + "ab" * 100]),
    (TIMESTAMP, TIMESTAMPS), (TIMESTAMPTZ, TIMESTAMPTZS),
    (TEXT_ARRAY, ["{}", "{a,b}", '{NULL,"x y","q\\"uote"}', "{{a,b},{c,d}}"]),
    (INT4_ARRAY, ["{1,2,NULL}", "{}"]),
])
def test_every_value_of_the_type_table_is_written_as_the_python_path_writes_it(
    oid: int, texts: list[str],
) -> None:
    rows = one_column(oid, [*texts, None])
    assert assert_same(rows) == len(texts) + 1  # the core took every insert


@pytest.mark.parametrize(("oid", "bad"), [
    (BOOL, "yes"), (BYTEA, "abc"), (BYTEA, "\\xabc"), (BYTEA, "\\xzz"), (INT4, "one"),
    (FLOAT8, "fast"), (TEXT_ARRAY, "{unclosed"),
])
def test_a_value_its_converter_rejects_fails_both_paths_with_the_same_error(
    oid: int, bad: str,
) -> None:
    rows = one_column(oid, ["fine" if oid in (TEXT_ARRAY,) else None, bad])
    python, compiled, _ = both(rows)
    assert python[1] is not None and "column 'v'" in python[1]
    assert compiled == python


def test_text_that_is_not_utf8_fails_both_paths_naming_the_lsn() -> None:
    relation = m_relation(1, "public", "t", b"d", [(0, "v", TEXT)])
    bad = b"I" + struct.pack(">IcHcI", 1, b"N", 1, b"t", 2) + b"\xff\xfe"
    python, compiled, _ = both(session([relation, bad]))
    assert python[1] is not None and "not UTF-8" in python[1]
    assert compiled == python


@settings(max_examples=2000)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                 st.floats(width=32), st.integers(-10**20, 10**20).map(float),
                 st.builds(lambda m, e: m * 10.0**e, st.integers(-99, 99), st.integers(-8, 18))))
@example(0.1 + 0.2)
@example(1e-5)
@example(1e-6)
@example(1e16)
@example(5e-324)
@example(1e-4)
@example(9.999999999999999e14)
@example(-0.0)
@example(562949953421312.2)  # ...312.25: two shortest digits as close, the even one is orjson's
def test_any_double_in_postgres_text_is_written_as_the_python_path_writes_it(x: float) -> None:
    assert_same(one_column(FLOAT8, [_pg_float(x)]))


@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_any_text_is_escaped_as_orjson_escapes_it(text: str) -> None:
    rows = one_column(TEXT, [text])
    python, compiled, taken = both(rows)
    assert compiled == python and taken == 1
    assert orjson.loads(python[0][0]["after"])["v"] == text


@given(st.binary(max_size=64), st.booleans())
def test_any_bytes_in_hex_are_written_as_base64_as_the_python_path_writes_them(
    data: bytes, upper: bool,
) -> None:
    text = "\\x" + (data.hex().upper() if upper else data.hex())
    assert assert_same(one_column(BYTEA, [text])) == 1


def _pg_float(x: float) -> str:
    """``x`` as float8out prints it with the session's settings (shortest exact)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    text = repr(x)  # shortest exact, and an exponent of at least two digits, as float8out's
    whole, _, fraction = text.partition(".")
    if "e" not in text and len(whole.lstrip("-")) > 15:  # float8out's exponent from 1e15 on
        digits = (whole.lstrip("-") + fraction).rstrip("0")
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{'-' if x < 0 else ''}{mantissa}e+{len(whole.lstrip('-')) - 1:02d}"
    return text.removesuffix(".0")


# === whole sessions ===========================================================================

_COLUMN_TYPES: list[tuple[int, st.SearchStrategy[str]]] = [
    (INT4, st.integers(-2**31, 2**31 - 1).map(str)),
    (INT8, st.one_of(st.integers(-2**63, 2**63 - 1).map(str), st.sampled_from(INT_TEXTS))),
    (FLOAT8, st.one_of(st.floats().map(_pg_float), st.sampled_from(FLOAT_TEXTS))),
    (BOOL, st.sampled_from(["t", "f", "true", "false"])),
    (TEXT, st.text(st.characters(exclude_categories=("Cs",)), max_size=12)),
    (NUMERIC, st.decimals(allow_nan=False, allow_infinity=False, places=2).map(str)),
    (JSONB, st.sampled_from(['{"a": 1}', "[1, 2]", '"x"', "null"])),
    (BYTEA, st.binary(max_size=8).map(lambda b: "\\x" + b.hex())),
    (TIMESTAMP, st.sampled_from(TIMESTAMPS)),
    (TIMESTAMPTZ, st.sampled_from(TIMESTAMPTZS)),
    (TEXT_ARRAY, st.sampled_from(["{}", "{a,b}", '{NULL,"x y"}'])),
    (UUID, st.uuids().map(str)),
]


@st.composite
def relations(draw: st.DrawFn, relid: int) -> tuple[bytes, list[st.SearchStrategy[str]], int]:
    """A Relation message, its columns' value strategies, and how many key columns lead."""
    types = draw(st.lists(st.sampled_from(_COLUMN_TYPES), min_size=1, max_size=5))
    keys = draw(st.integers(0, len(types)))
    table = draw(st.sampled_from(["orders", "items", "skip_me", "Odd \"Name\"", "日本"]))
    columns = [(int(i < keys), f"c{i}", oid) for i, (oid, _) in enumerate(types)]
    identity = b"f" if keys == len(types) and keys else b"d"
    return (m_relation(relid, "s", table, identity, columns), [s for _, s in types], keys)


@st.composite
def sessions(draw: st.DrawFn) -> list[PeekRow]:
    """Transactions of random changes of up to three relations, announced (and sometimes
    announced again with other columns) before their changes, as pgoutput does."""
    relids = draw(st.lists(st.sampled_from([10, 11, 12]), min_size=1, max_size=3, unique=True))
    shapes = {relid: draw(relations(relid)) for relid in relids}
    transactions_: list[list[bytes]] = []
    announced: set[int] = set()
    for _ in range(draw(st.integers(1, 4))):
        messages: list[bytes] = []
        for _ in range(draw(st.integers(0, 12))):
            relid = draw(st.sampled_from(relids))
            if relid not in announced or draw(st.integers(0, 15)) == 0:
                if relid in announced:  # DDL: the relation comes again, other columns
                    shapes[relid] = draw(relations(relid))
                messages.append(shapes[relid][0])
                announced.add(relid)
            _, values, keys = shapes[relid]
            row = [draw(st.one_of(st.none(), st.just(UNCHANGED), v) if i >= keys else v)
                   for i, v in enumerate(values)]
            if not draw(st.integers(0, 5)):
                row = [v if v is not UNCHANGED else None for v in row]
            what = draw(st.sampled_from(["insert", "insert", "update", "update", "update_key",
                                         "update_full", "delete", "truncate", "message"]))
            if what == "insert":
                messages.append(m_insert(relid, [None if v is UNCHANGED else v for v in row]))
            elif what == "update":
                messages.append(m_update(relid, row))
            elif what in ("update_key", "update_full"):
                old = [None if v is UNCHANGED else v for v in row]
                messages.append(m_update(relid, row, old, b"K" if what == "update_key" else b"O"))
            elif what == "delete":
                messages.append(m_delete(relid, [None if v is UNCHANGED else v for v in row]))
            elif what == "truncate":
                messages.append(m_truncate([relid], 0))
            else:
                prefix = draw(st.sampled_from(["keep", "keep.me", "other"]))
                messages.append(m_message(prefix, draw(st.binary(max_size=6)),
                                          transactional=draw(st.booleans())))
        transactions_.append(messages)
    rows = session(*transactions_)
    # a message written outside a transaction stands between transactions
    return [(lsn, 0 if data[:2] == b"M\x00" else xid, data) for lsn, xid, data in rows]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.integers(1, 40), st.integers(1, 30), st.integers(1, 30),
       st.sampled_from([{}, {"topic_from": "table", "stream_from": "schema",
                             "partition_key_from": "key"},
                        {"default_stream": "s", "default_topic": "t"}]))
def test_random_sessions_give_the_same_batches_on_both_paths(
    rows: list[PeekRow], fetch: int, batch_rows: int, spill_rows: int, routes: dict[str, str],
) -> None:
    python, compiled, _ = both(rows, fetch=fetch, batch_rows=batch_rows, spill_rows=spill_rows,
                               routes=routes)
    assert compiled == python


def _workload(relid: int = 5, changes: int = 60) -> list[PeekRow]:
    relation = m_relation(relid, "app", "events", b"d", [
        (1, "id", INT8), (0, "kind", TEXT), (0, "amount", NUMERIC), (0, "at", TIMESTAMPTZ)])
    body: list[bytes] = [relation]
    for i in range(changes):
        values = [str(i), f"kind {i % 3}", f"{i}.50", "2024-01-02 03:04:05+00"]
        body.append(m_insert(relid, values) if i % 2 else m_update(relid, values))
    return session(body, body[1:], body[1:])


@pytest.mark.parametrize("fetch", [1, 2, 7, 1000])
@pytest.mark.parametrize(("batch_rows", "spill_rows"), [(1000, 1000), (7, 5), (1, 1), (50, 13)])
def test_blocks_split_across_fetches_batches_and_spills_give_the_same_rows(
    fetch: int, batch_rows: int, spill_rows: int,
) -> None:
    rows = _workload()
    taken = assert_same(rows, fetch=fetch, batch_rows=batch_rows, spill_rows=spill_rows)
    assert taken == 180


def test_a_busy_table_the_filter_rejects_is_counted_in_seq_by_the_core() -> None:
    rows = session([m_relation(9, "s", "skip_busy", b"d", [(1, "id", INT4)]),
                    *(m_insert(9, [str(i)]) for i in range(5)),
                    m_relation(3, "s", "kept", b"d", [(1, "id", INT4)]), m_insert(3, ["1"])])
    python, compiled, taken = both(rows)
    assert compiled == python and taken == 1
    assert [r["seq"] for r in python[0]] == [5]


def test_the_core_leaves_a_toast_value_left_out_to_the_python_decoder() -> None:
    relation = m_relation(1, "public", "t", b"d", [(1, "id", INT4), (0, "big", TEXT)])
    rows = session([relation, m_update(1, ["1", UNCHANGED]), m_update(1, ["2", "x"])])
    python, compiled, taken = both(rows)
    assert compiled == python and taken == 1
    assert [r["unchanged"] for r in python[0]] == [["big"], []]


def test_block_columns_are_arrow_arrays_over_the_cores_buffers() -> None:
    blocks = [e for e in CompiledPgOutput(PgOutputDecoder(), CORE).events([_workload()])
              if isinstance(e, ChangeBlock)]
    assert [len(b) for b in blocks] == [60, 60, 60]
    block = blocks[0]
    assert block.lsn.type == pa.string() and block.seq.type == pa.int32()
    assert block.key.to_pylist()[:2] == ['{"id":0}', '{"id":1}']
    assert block.op.to_pylist()[:2] == ["update", "insert"]
    part = block[10:13]
    assert part.seq.to_pylist() == [10, 11, 12] and len(part) == 3

