"""A snapshot or backfill chunk read through ``COPY`` and the compiled core gives the batches the
Python path gives: the core's reading of COPY's text format, value by value, and whole chunks of
real tables (every type, NULLs, text COPY escapes, keyless and composite keys, a backfill's
condition, routes) read both ways. The core is imported directly, so these run whatever
``IGGY_SPARK_CORE`` says."""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source import snapshot
from postgres_cdc_source.decoding import compiled
from postgres_cdc_source.decoding.compiled import core_columns
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows.json.values import converter_for_oid
from postgres_cdc_source.snapshot import reading as snapshot_reading

CORE: ModuleType = importlib.import_module("iggy_spark_core")
TEXT, BOOL, INT4 = 25, 16, 23


def _copy_text(value: str | None) -> bytes:
    """``value`` as COPY's text format writes a field (``\\N`` for NULL)."""
    if value is None:
        return b"\\N"
    escapes = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\b": "\\b", "\f": "\\f",
               "\v": "\\v"}
    return "".join(escapes.get(c, c) for c in value).encode()


def _rows(oids: list[int], key: list[int], extra: int = 1) -> Any:
    names, kinds, converters = core_columns(CORE, [f"c{i}" for i in range(len(oids))],
                                            [converter_for_oid(o) for o in oids])
    return CORE.CopyRows(orjson.dumps, "s", "t", names, kinds, converters, key, extra,
                         b'0/10:read:["s","t"')


def _columns(block: Any) -> dict[str, list[Any]]:
    from postgres_cdc_source.decoding.blocks import strings_of
    return {name: strings_of(len(block), buffers).to_pylist()
            for name, buffers in block.buffers()}


@given(st.lists(st.one_of(st.none(), st.text(st.characters(exclude_categories=("Cs",)))),
                min_size=1, max_size=4), st.integers(1, 3))
def test_any_text_in_copy_format_reads_back_as_the_python_path_writes_it(
    values: list[str | None], rows: int,
) -> None:
    line = b"\t".join([*map(_copy_text, values), _copy_text("k")]) + b"\n"
    block, failed = _rows([TEXT] * len(values), [0]).rows(line * rows)
    assert failed is None and len(block) == rows
    after = orjson.dumps({f"c{i}": v for i, v in enumerate(values)}).decode()
    columns = _columns(block)
    assert columns["after"] == [after] * rows
    assert columns["key"] == [orjson.dumps({"c0": values[0]}).decode()] * rows
    assert columns["id"] == ['0/10:read:["s","t","k"]'] * rows


@given(st.integers(0, 40), st.integers(0, 40), st.integers(1, 3),
       st.sampled_from(['"', "\\", "\t", "\n", "\x01", "\x1f", "\x7f", "\u00e9", "\U0001f980"]))
def test_a_character_to_escape_is_found_wherever_it_falls_in_a_long_text(
    length: int, at: int, copies: int, special: str,
) -> None:
    """The core skips text eight bytes at a time where nothing in them is escaped (COPY's tab
    and backslash, JSON's quote, backslash and control characters): a character that is, at
    any place in a word or across two, is still found."""
    text = ("abcdefgh" * 6)[:length]
    text = (text[:at] + special * copies + text[at:]) * 2
    line = b"\t".join([_copy_text(text), _copy_text(text[::-1]), _copy_text("k")]) + b"\n"
    block, failed = _rows([TEXT, TEXT], [1]).rows(line)
    assert failed is None
    assert _columns(block)["after"] == [orjson.dumps({"c0": text, "c1": text[::-1]}).decode()]
    assert _columns(block)["key"] == [orjson.dumps({"c1": text[::-1]}).decode()]


def test_octal_and_hex_escapes_and_a_null_chunk_key() -> None:
    block, failed = _rows([TEXT], []).rows(b"a\\101\\x42\\7z\t\\N\n")
    assert failed is None
    assert _columns(block) == {"key": [None], "after": ['{"c0":"aAB\\u0007z"}'],
                               "id": ['0/10:read:["s","t",null]']}


def test_a_value_the_converter_rejects_hands_back_the_row_and_the_rows_before_it() -> None:
    block, failed = _rows([INT4, BOOL], [0]).rows(b"1\tt\tk1\n2\tmaybe\tk2\n3\tf\tk3\n")
    assert len(block) == 1 and _columns(block)["after"] == ['{"c0":1,"c1":true}']
    assert failed == ["2", "maybe", "k2"]


def test_a_line_of_another_width_is_refused() -> None:
    with pytest.raises(ValueError, match="COPY row of 2 fields, expected 3"):
        _rows([INT4, BOOL], [0]).rows(b"1\tt\n")


# === whole chunks of real tables ==============================================================

_TABLE = """
CREATE TYPE {s}.mood AS ENUM ('sad', 'ok');
CREATE TABLE {s}.wide (
    id int PRIMARY KEY, b boolean, i2 smallint, i8 bigint, n numeric(10,3), nn numeric,
    t text, c char(5), j json, jb jsonb, d date, ts timestamp, tz timestamptz,
    iv interval, u uuid, m {s}.mood, r real, f float8, by bytea, ia int[], ta text[],
    g int GENERATED ALWAYS AS (id * 2) STORED);
INSERT INTO {s}.wide (id, b, i2, i8, n, nn, t, c, j, jb, d, ts, tz, iv, u, m, r, f, by, ia, ta)
SELECT i, i % 2 = 0, (i - 50)::int2, i::int8 * 1000003 * 1000003, i / 7.0, 'NaN',
       CASE i % 5 WHEN 0 THEN E'tab\\there\\nnew \\\\ back "q" \\u00e9 \\U0001F980'
                  WHEN 1 THEN NULL WHEN 2 THEN '' ELSE repeat('x', i) END,
       'ab', '{{"k": [1,  2.50]}}', '{{"k": [1, 2.50]}}', date '2024-02-29' + i,
       timestamp '2024-01-02 03:04:05.5' + i * interval '1 hour',
       CASE WHEN i = 3 THEN '-infinity'::timestamptz
            ELSE timestamptz '2024-01-02 03:04:05+05' + i * interval '1 second' END,
       i * interval '1 day', md5(i::text)::uuid, 'ok', i / 3.0, CASE i % 4 WHEN 0 THEN 'NaN'
       WHEN 1 THEN 1e-5 WHEN 2 THEN 1e100 ELSE 0.1 END, decode(md5(i::text), 'hex'),
       ARRAY[i, NULL], ARRAY['a b', NULL, E'c,\\td']
FROM generate_series(1, 60) AS i;
CREATE TABLE {s}.keyless (n int, t text);
INSERT INTO {s}.keyless SELECT i, E'line\\n' || i FROM generate_series(1, 30) AS i;
CREATE TABLE {s}.pair (a text, b int, v text, PRIMARY KEY (b, a));
INSERT INTO {s}.pair SELECT 'k' || i, i % 3, E'v\\\\' || i FROM generate_series(1, 40) AS i;
"""


@pytest.fixture
def tables(pg: LocalPostgres, name: str) -> dict[str, snapshot.SnapshotTable]:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(_TABLE.format(s=name))  # type: ignore[arg-type]  # a test's own SQL
        described = {t: snapshot.describe(conn, name, t) for t in ("wide", "keyless", "pair")}
    assert all(d is not None for d in described.values())
    return described  # type: ignore[return-value]


def _read(options: CdcOptions, partition: snapshot.SnapshotPartition, *, core: bool,
          monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    copies: list[object] = []
    through_copy = snapshot_reading.copied_columns

    def counted(*args: Any) -> Any:
        copies.append(args)
        return through_copy(*args)

    with monkeypatch.context() as patch:
        patch.setattr(compiled, "core", (lambda: CORE) if core else (lambda: None))
        patch.setattr(snapshot_reading, "copied_columns", counted)
        rows = [row for batch in snapshot.read_chunk(options, partition)
                for row in batch.to_pylist()]
    assert bool(copies) is core  # the path asked for is the path taken
    return rows


@pytest.mark.parametrize("routes", [{}, {"topic_from": "table", "stream_from": "schema",
                                         "partition_key_from": "key"},
                                    {"default_stream": "s", "default_topic": "t"}])
@pytest.mark.parametrize("table", ["wide", "keyless", "pair"])
def test_a_chunk_read_through_copy_is_the_chunk_the_python_path_reads(
    pg: LocalPostgres, name: str, tables: dict[str, snapshot.SnapshotTable], table: str,
    routes: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    options = CdcOptions.from_options({"dsn": pg.dsn, "slot": name, "batch_rows": "7",
                                       "fetch_rows": "5", **routes})
    whole = snapshot.SnapshotPartition(tables[table], None, None, None, 0x1234)
    python = _read(options, whole, core=False, monkeypatch=monkeypatch)
    assert _read(options, whole, core=True, monkeypatch=monkeypatch) == python
    assert len(python) == {"wide": 60, "keyless": 30, "pair": 40}[table]
    described = tables[table]
    if described.chunk_key != ("ctid",):  # a key range, and a backfill's condition in it
        low = ["10"] if table == "wide" else ["1", "k10"]
        part = snapshot.SnapshotPartition(described, low, None, None, 0x1234,
                                          where="t IS NOT NULL" if table == "wide" else "true")
        python = _read(options, part, core=False, monkeypatch=monkeypatch)
        assert python and len(python) < {"wide": 60, "pair": 40}[table]
        assert _read(options, part, core=True, monkeypatch=monkeypatch) == python


def test_a_value_the_core_hands_back_fails_the_chunk_naming_the_column(
    pg: LocalPostgres, name: str, tables: dict[str, snapshot.SnapshotTable],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The core refuses ``bool`` text other than ``t``/``f``: a table described with a boolean
    where the server sends text makes the converter reject a value, and the error names it."""
    wide = tables["wide"]
    oids = list(wide.type_oids)
    oids[wide.columns.index("t")] = BOOL  # t holds text: not a boolean's output
    broken = dataclasses.replace(wide, type_oids=tuple(oids))
    options = CdcOptions.from_options({"dsn": pg.dsn, "slot": name})
    partition = snapshot.SnapshotPartition(broken, None, None, None, 0x1234)
    with pytest.raises(DecodeError, match=r"column 't' of .*wide") as compiled_error:
        _read(options, partition, core=True, monkeypatch=monkeypatch)
    with pytest.raises(DecodeError) as python_error:
        _read(options, partition, core=False, monkeypatch=monkeypatch)
    assert str(compiled_error.value) == str(python_error.value)
