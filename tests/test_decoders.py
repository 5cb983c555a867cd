"""Both decoders: handmade plugin output for the edge cases, a real server for the rest.

The integration tests run every workload through a pgoutput slot and a test_decoding slot at
once and require identical changes and commits from both, besides checking the rows themselves.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import math
import pickle
import re
import secrets
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.catalog import CATALOG_QUERY, ColumnInfo, TableInfo, table_info_from_rows
from postgres_cdc_source.decoding import (
    UNCHANGED,
    Begin,
    Change,
    Commit,
    Event,
    PeekRow,
    RawValue,
)
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder, pgoutput_options
from postgres_cdc_source.decoding.text_format import TEST_DECODING_OPTIONS, TextFormatDecoder
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.lsn import format_lsn, parse_lsn
from postgres_cdc_source.values import SESSION_SETTINGS


def changes(events: Sequence[Event]) -> list[Change]:
    return [e for e in events if type(e) is Change]


def loads(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


# === pgoutput, handmade messages ================================================================

def _cstr(text: str) -> bytes:
    return text.encode() + b"\0"


def m_begin(xid: int, micros: int = 0) -> bytes:
    return b"B" + struct.pack(">QqI", 0x1000, micros, xid)


def m_commit(end_lsn: int, micros: int = 0) -> bytes:
    return b"C" + struct.pack(">BQQq", 0, end_lsn - 8, end_lsn, micros)


def m_relation(relid: int, schema: str, table: str, replident: bytes,
               columns: Sequence[tuple[int, str, int]]) -> bytes:
    """``columns``: (flags, name, type OID)."""
    body = b"".join(bytes([f]) + _cstr(n) + struct.pack(">Ii", oid, -1) for f, n, oid in columns)
    return (b"R" + struct.pack(">I", relid) + _cstr(schema) + _cstr(table) + replident
            + struct.pack(">H", len(columns)) + body)


def tup(values: Sequence[RawValue]) -> bytes:
    out = [struct.pack(">H", len(values))]
    for v in values:
        if v is None:
            out.append(b"n")
        elif v is UNCHANGED:
            out.append(b"u")
        else:
            data = str(v).encode()
            out.append(b"t" + struct.pack(">I", len(data)) + data)
    return b"".join(out)


def m_insert(relid: int, new: Sequence[RawValue]) -> bytes:
    return b"I" + struct.pack(">I", relid) + b"N" + tup(new)


def m_update(relid: int, new: Sequence[RawValue], old: Sequence[RawValue] | None = None,
             kind: bytes = b"K") -> bytes:
    old_part = b"" if old is None else kind + tup(old)
    return b"U" + struct.pack(">I", relid) + old_part + b"N" + tup(new)


def m_delete(relid: int, old: Sequence[RawValue], kind: bytes = b"K") -> bytes:
    return b"D" + struct.pack(">I", relid) + kind + tup(old)


def m_truncate(relids: Sequence[int], flags: int) -> bytes:
    return b"T" + struct.pack(">IB", len(relids), flags) + b"".join(struct.pack(">I", r)
                                                                     for r in relids)


INT4, TEXT, JSONB, TEXT_ARRAY, NUMERIC = 23, 25, 3802, 1009, 1700
ITEMS = m_relation(16400, "shop", "items", b"d", [
    (1, "id", INT4), (0, "name", TEXT), (0, "doc", JSONB), (0, "tags", TEXT_ARRAY),
    (0, "big", TEXT),
])


def txn(*messages: bytes, xid: int = 700, start: int = 0x100) -> list[PeekRow]:
    """Rows of one transaction: B, the messages, C, at consecutive LSNs."""
    body = [m_begin(xid), *messages, m_commit(start + 8 * (len(messages) + 1))]
    return [(start + 8 * i, xid, data) for i, data in enumerate(body)]


def decode_po(rows: Sequence[PeekRow], table_filter: Callable[[str, str], bool] | None = None
              ) -> list[Any]:  # Any: tests unpack events by position
    return list(PgOutputDecoder(table_filter).events(rows))


def test_pgoutput_insert_update_delete() -> None:
    events = decode_po(txn(
        ITEMS,
        m_insert(16400, ["1", "it's \"q\"", '{"a": [1, 2.5]}', '{x,"y z",NULL}', None]),
        m_update(16400, ["2", "n", None, "{}", "b"], old=["1", None, None, None, None]),
        m_update(16400, ["2", "m", None, None, "b"]),
        m_delete(16400, ["2", None, None, None, None]),
    ))
    begin, *middle, commit = events
    assert begin == Begin(700, 0x100)
    assert commit == Commit(700, 0x100 + 8 * 6, datetime(2000, 1, 1, tzinfo=UTC))
    ins, upd_key, upd, dele = middle
    assert ins == Change(0x110, 0, "shop", "items", "insert", '{"id":1}', None,
                         '{"id":1,"name":"it\'s \\"q\\"","doc":{"a": [1, 2.5]},'
                         '"tags":["x","y z",null],"big":null}', ())
    assert (upd_key.op, upd_key.seq, upd_key.key, upd_key.before) == ("update", 1, '{"id":1}', None)
    assert loads(upd_key.after) == {"id": 2, "name": "n", "doc": None, "tags": [], "big": "b"}
    assert (upd.key, upd.before) == ('{"id":2}', None)  # no old key sent: the new row's key
    assert (dele.op, dele.seq, dele.key, dele.before, dele.after) == ("delete", 3, '{"id":2}',
                                                                      None, None)


def test_pgoutput_unchanged_toast_column_is_omitted_and_named() -> None:
    (_, change, _) = decode_po(txn(ITEMS, m_update(16400, ["1", "x", None, None, UNCHANGED])))
    assert change.after == '{"id":1,"name":"x","doc":null,"tags":null}'
    assert change.unchanged == ("big",)
    assert change.key == '{"id":1}'
    # the new row with its placeholder is kept for completing it later, and a spilled change
    # (pickled) still holds the placeholder itself
    assert change.new_row == {"id": 1, "name": "x", "doc": None, "tags": None, "big": UNCHANGED}
    assert pickle.loads(pickle.dumps(change)).new_row["big"] is UNCHANGED
    (_, whole, _) = decode_po(txn(ITEMS, m_update(16400, ["1", "x", None, None, "b"])))
    assert whole.new_row is None  # only changes with unchanged columns carry it


def test_pgoutput_full_identity_sends_the_old_row() -> None:
    rel = m_relation(5, "public", "t", b"f", [(1, "a", INT4), (1, "b", TEXT)])
    _, upd, dele, _ = decode_po(txn(
        rel,
        m_update(5, ["1", "new"], old=["1", None], kind=b"O"),
        m_delete(5, ["1", "new"], kind=b"O"),
    ))
    assert upd.before == upd.key == '{"a":1,"b":null}'
    assert upd.after == '{"a":1,"b":"new"}'
    assert dele.before == dele.key == '{"a":1,"b":"new"}'


def test_pgoutput_truncate_with_flags_gives_one_change_per_table() -> None:
    other = m_relation(16401, "public", "other", b"n", [(0, "v", NUMERIC)])
    events = decode_po(txn(ITEMS, other, m_truncate([16400, 16401], 3),
                           m_insert(16401, ["1.50"])))
    assert [(c.schema, c.table, c.op, c.seq) for c in changes(events)] == [
        ("shop", "items", "truncate", 0), ("public", "other", "truncate", 1),
        ("public", "other", "insert", 2),
    ]
    assert changes(events)[2].after == '{"v":"1.50"}'
    assert all(c.key is c.before is c.after is None for c in changes(events)[:2])


def test_pgoutput_filter_skips_tuples_unparsed_but_counts_them() -> None:
    other = m_relation(9, "public", "other", b"d", [(1, "id", INT4)])
    garbage = b"I" + struct.pack(">I", 16400) + b"N\xff\xff"  # would not parse
    events = decode_po(
        txn(ITEMS, other, garbage, m_insert(9, ["1"]), m_truncate([16400, 9], 0)),
        table_filter=lambda schema, table: table == "other",
    )
    assert [(c.table, c.op, c.seq) for c in changes(events)] == [
        ("other", "insert", 1), ("other", "truncate", 3)]


def test_pgoutput_skips_type_origin_and_message_and_maps_empty_namespace() -> None:
    type_msg = b"Y" + struct.pack(">I", 16390) + _cstr("public") + _cstr("mood")
    origin = b"O" + struct.pack(">Q", 0x99) + _cstr("upstream")
    message = b"M" + struct.pack(">BQ", 1, 0x88) + _cstr("prefix") + struct.pack(">I", 2) + b"hi"
    rel = m_relation(7, "", "pg_thing", b"n", [(0, "mood", 16390)])
    events = decode_po(txn(type_msg, origin, message, rel, m_insert(7, ["ok"])))
    (change,) = changes(events)
    assert (change.schema, change.table, change.after, change.seq) == (
        "pg_catalog", "pg_thing", '{"mood":"ok"}', 0)


def test_pgoutput_commit_timestamp_and_seq_reset_per_transaction() -> None:
    micros = 789_000_000_123_456
    rows = [*txn(ITEMS, m_insert(16400, ["1", None, None, None, None]), xid=1),
            *txn(m_insert(16400, ["2", None, None, None, None]), xid=2, start=0x200)]
    rows[-1] = (rows[-1][0], 2, m_commit(rows[-1][0], micros))
    events = decode_po(rows)
    assert [c.seq for c in changes(events)] == [0, 0]
    commit = events[-1]
    assert isinstance(commit, Commit)
    assert commit.commit_ts == datetime(2000, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    assert commit.commit_ts.tzinfo is not None and commit.xid == 2


@pytest.mark.parametrize(
    ("message", "needle"),
    [
        (m_insert(16400, ["1", None, None, None, None])[:-3], "truncated 'I' message"),
        (m_insert(16400, ["1", None, None, None, None]) + b"\0", "does not match its content"),
        (m_insert(42, ["1"]), "no Relation message was sent for relation 42"),
        (b"S" + struct.pack(">IB", 1, 1), "unsupported message type 'S'"),
        (b"I" + struct.pack(">I", 16400) + b"N\0\1b\0\0\0\1x", "binary values are not supported"),
        (m_insert(16400, ["1", None, None]), "tuple has 3 columns but relation shop.items has 5"),
        (m_insert(16400, ["x", None, None, None, None]), "column 'id' of shop.items"),
        (m_insert(16400, ["1", None, "[1", None, None])[:-1], "truncated"),
        (b"I" + struct.pack(">I", 16400) + b"X", "expected 'N'"),
        (b"D" + struct.pack(">I", 16400) + b"N" + tup(["1"] + [None] * 4), "expected 'K' or 'O'"),
        (b"I" + struct.pack(">I", 16400) + b"N\0\5t\0\0\0\2\xff\xfennnn", "not UTF-8"),
        (b"", "truncated"),
    ],
)
def test_pgoutput_errors_name_the_lsn(message: bytes, needle: str) -> None:
    rows = txn(ITEMS, message)
    with pytest.raises(DecodeError, match=re.escape(needle)) as info:
        decode_po(rows)
    assert info.value.lsn == 0x110
    assert "LSN 0/110" in str(info.value)
    clone = pickle.loads(pickle.dumps(info.value))
    assert (str(clone), clone.lsn) == (str(info.value), info.value.lsn)


def test_pgoutput_rejects_changes_outside_a_transaction_and_text_rows() -> None:
    with pytest.raises(DecodeError, match="outside a transaction"):
        decode_po([(1, 1, ITEMS), (2, 1, m_insert(16400, ["1", None, None, None, None]))])
    with pytest.raises(DecodeError, match="got text, expected bytes"):
        decode_po([(1, 1, "BEGIN 1")])


# === test_decoding, handmade lines ==============================================================

def info_of(schema: str, table: str, identity: str,
            columns: Sequence[tuple[str, str, str, int, bool]],
            generated: Sequence[str] = ()) -> TableInfo:
    """``columns``: (name, quoted name, type name, type OID, key)."""
    return TableInfo(schema, table, identity, tuple(
        ColumnInfo(n, q, t, oid, key, n in generated) for n, q, t, oid, key in columns))


WEIRD = info_of("My Schema", 'Ta.b"le', "d", [
    ("id", "id", "integer", 23, True),
    ("Col 1", '"Col 1"', "text", 25, False),
    ("user", '"user"', "boolean", 16, False),
    ("e", "e", '"MyEnum"', 16386, False),
    ("w", "w", '"we]:ird"[]', 16390, False),
    ("bits", "bits", "bit varying", 1562, False),
    ("ts", "ts", "timestamp with time zone", 1184, False),
    ("arr", "arr", "text[]", 1009, False),
])
WEIRD_HEADER = 'table "My Schema"."Ta.b""le": '
WEIRD_ROW = ("id[integer]:1 \"Col 1\"[text]:'it''s \"x\" new-tuple: a[text]:''b'' \\ \n' "
             "\"user\"[boolean]:true e[\"MyEnum\"]:'b c' w[\"we]:ird\"[]]:'{q}' "
             "bits[bit varying]:B'0101' ts[timestamp with time zone]:'2024-01-02 03:04:05.5+00' "
             "arr[text[]]:'{a,\"b''c\",NULL}'")
WEIRD_AFTER = {"id": 1, "Col 1": "it's \"x\" new-tuple: a[text]:'b' \\ \n", "user": True,
               "e": "b c", "w": "{q}", "bits": "0101", "ts": "2024-01-02T03:04:05.5+00:00",
               "arr": ["a", "b'c", None]}


def td_rows(*lines: str, xid: int = 900, start: int = 0x200) -> list[PeekRow]:
    body = [f"BEGIN {xid}", *lines, f"COMMIT {xid} (at 2024-05-06 07:08:09.123456+00)"]
    return [(start + 8 * i, xid, line) for i, line in enumerate(body)]


def decode_td(rows: Sequence[PeekRow], *infos: TableInfo | None,
              table_filter: Callable[[str, str], bool] | None = None,
              calls: list[tuple[str, str]] | None = None) -> list[Any]:
    by_name = {(i.schema, i.table): i for i in infos if i is not None}

    def lookup(schema: str, table: str) -> TableInfo | None:
        if calls is not None:
            calls.append((schema, table))
        return by_name.get((schema, table))

    return list(TextFormatDecoder(lookup, table_filter).events(rows))


def test_test_decoding_quoted_identifiers_types_and_hostile_values() -> None:
    events = decode_td(td_rows(WEIRD_HEADER + "INSERT: " + WEIRD_ROW), WEIRD)
    begin, change, commit = events
    assert begin == Begin(900, 0x200)
    assert commit == Commit(900, 0x210, datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC))
    assert (change.schema, change.table, change.op, change.lsn) == ("My Schema", 'Ta.b"le',
                                                                    "insert", 0x208)
    assert loads(change.after) == WEIRD_AFTER
    assert list(loads(change.after)) == list(WEIRD_AFTER)  # column order kept


def test_test_decoding_without_catalog_match_parses_the_printed_columns() -> None:
    """The same line decodes the same when the catalog has changed (slow path)."""
    changed = info_of("My Schema", 'Ta.b"le', "d", [("id", "id", "integer", 23, True)])
    (_, change, _) = decode_td(td_rows(WEIRD_HEADER + "INSERT: " + WEIRD_ROW), changed)
    assert loads(change.after) == {**WEIRD_AFTER, "w": "{q}"}


def test_test_decoding_unchanged_toast_and_the_literal_text_of_the_marker() -> None:
    info = info_of("public", "t", "d", [("id", "id", "integer", 23, True),
                                         ("note", "note", "text", 25, False),
                                         ("big", "big", "text", 25, False)])
    (_, a, b, _) = decode_td(td_rows(
        "table public.t: UPDATE: id[integer]:1 note[text]:'unchanged-toast-datum' "
        "big[text]:unchanged-toast-datum",
        "table public.t: INSERT: id[integer]:2 note[text]:'unchanged-toast-datum' big[text]:null",
    ), info)
    assert a.after == '{"id":1,"note":"unchanged-toast-datum"}'
    assert (a.unchanged, a.key) == (("big",), '{"id":1}')
    assert b.after == '{"id":2,"note":"unchanged-toast-datum","big":null}'
    assert b.unchanged == ()


def test_test_decoding_full_identity_restores_skipped_nulls() -> None:
    info = info_of("public", "f", "f", [("a", "a", "integer", 23, True),
                                         ("b", "b", "text", 25, True),
                                         ("c", "c", "numeric", 1700, True)])
    (_, upd, dele, _) = decode_td(td_rows(
        "table public.f: UPDATE: old-key: a[integer]:1 c[numeric]:2.50 new-tuple: "
        "a[integer]:1 b[text]:'x' c[numeric]:NaN",
        "table public.f: DELETE: a[integer]:1 b[text]:'x'",
    ), info)
    assert upd.before == upd.key == '{"a":1,"b":null,"c":"2.50"}'
    assert upd.after == '{"a":1,"b":"x","c":"NaN"}'
    assert dele.before == dele.key == '{"a":1,"b":"x","c":null}'


def test_test_decoding_default_identity_key_from_old_key_or_new_row() -> None:
    info = info_of("public", "d", "d", [("k1", "k1", "integer", 23, True),
                                         ("v", "v", "double precision", 701, False),
                                         ("k2", "k2", "text", 25, True)])
    (_, moved, same, gone, nothing, _) = decode_td(td_rows(
        "table public.d: UPDATE: old-key: k1[integer]:1 k2[text]:'a' new-tuple: "
        "k1[integer]:2 v[double precision]:-Infinity k2[text]:'a'",
        "table public.d: UPDATE: k1[integer]:2 v[double precision]:1e+100 k2[text]:'a'",
        "table public.d: DELETE: k1[integer]:2 k2[text]:'a'",
        "table public.d: DELETE: (no-tuple-data)",
    ), info)
    assert (moved.key, moved.before) == ('{"k1":1,"k2":"a"}', None)
    assert loads(moved.after) == {"k1": 2, "v": "-Infinity", "k2": "a"}
    assert same.key == '{"k1":2,"k2":"a"}' and loads(same.after)["v"] == 1e100
    assert (gone.key, gone.before, gone.after) == ('{"k1":2,"k2":"a"}', None, None)
    assert (nothing.op, nothing.key, nothing.before, nothing.after) == ("delete", None, None, None)


def test_test_decoding_generated_columns_are_left_out_like_pgoutput() -> None:
    info = info_of("public", "g", "f", [("a", "a", "integer", 23, True),
                                         ("twice", "twice", "integer", 23, True),
                                         ("b", "b", "text", 25, True)], generated=["twice"])
    (_, ins, dele, _) = decode_td(td_rows(
        "table public.g: INSERT: a[integer]:1 twice[integer]:2 b[text]:'x'",
        "table public.g: DELETE: a[integer]:1 twice[integer]:2",
    ), info)
    assert ins.after == '{"a":1,"b":"x"}'
    assert dele.before == '{"a":1,"b":null}'


def test_test_decoding_truncate_filter_and_messages() -> None:
    calls: list[tuple[str, str]] = []
    events = decode_td(td_rows(
        "message: transactional: 1 prefix: p, sz: 3 content:a b",
        'table public.a, "S"."b c": TRUNCATE: restart_seqs cascade',
        "table public.a: INSERT: x[integer]:1",
        "table public.keep: INSERT: x[integer]:1",
        "table public.keep: TRUNCATE: (no-flags)",
    ), info_of("public", "keep", "n", [("x", "x", "integer", 23, False)]),
        table_filter=lambda s, t: t != "a", calls=calls)
    assert [(c.schema, c.table, c.op, c.seq) for c in changes(events)] == [
        ("S", "b c", "truncate", 1), ("public", "keep", "insert", 3),
        ("public", "keep", "truncate", 4)]
    assert calls == [("public", "keep")]  # filtered tables never reach the catalog


def test_test_decoding_catalog_lookup_runs_once_per_table() -> None:
    calls: list[tuple[str, str]] = []
    info = info_of("public", "t", "d", [("x", "x", "integer", 23, True)])
    decode_td(td_rows(*["table public.t: INSERT: x[integer]:1"] * 3), info, calls=calls)
    assert calls == [("public", "t")]


def test_test_decoding_table_gone_from_the_catalog() -> None:
    """Without a catalog the printed columns give the rows and the old tuple is the key."""
    (_, ins, upd, dele, _) = decode_td(td_rows(
        "table public.gone: INSERT: id[integer]:1 v[jsonb]:'{\"a\": 1}'",
        "table public.gone: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:2 v[jsonb]:null",
        "table public.gone: DELETE: id[integer]:2",
    ), None)
    assert ins.after == '{"id":1,"v":{"a": 1}}'
    assert (upd.key, upd.before, upd.after) == ('{"id":1}', None, '{"id":2,"v":null}')
    assert (dele.key, dele.before) == ('{"id":2}', None)


# The catalog as it is when read, after the changes below were written: the key column "id"
# was renamed to "key_id" / the primary key moved from "id" to "code".
RENAMED = info_of("public", "t", "d", [("key_id", "key_id", "integer", 23, True),
                                        ("data", "data", "text", 25, False)])
MOVED = info_of("public", "u", "d", [("id", "id", "integer", 23, False),
                                      ("code", "code", "text", 25, True)])


def test_test_decoding_keys_are_the_old_tuples_postgres_logged_not_the_catalogs() -> None:
    """A delete or key-changing update carries the identity as written: after a key column is
    renamed or the key moves to other columns, those changes keep the key they were logged
    with (what pgoutput's Relation message says too)."""
    events = decode_td(td_rows(
        "table public.t: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:10 data[text]:'a'",
        "table public.t: DELETE: id[integer]:2",
        "table public.u: UPDATE: old-key: id[integer]:2 new-tuple: id[integer]:20 code[text]:'x'",
        "table public.u: DELETE: id[integer]:1",
        "table public.u: DELETE: code[text]:'y'",  # written after the move: the catalog's key
    ), RENAMED, MOVED)
    assert [(c.table, c.op, loads(c.key), c.before) for c in changes(events)] == [
        ("t", "update", {"id": 1}, None),
        ("t", "delete", {"id": 2}, None),
        ("u", "update", {"id": 2}, None),
        ("u", "delete", {"id": 1}, None),
        ("u", "delete", {"code": "y"}, None),
    ]
    assert loads(changes(events)[2].after) == {"id": 20, "code": "x"}


_NAMES = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=5,
                  unique=True)


@settings(max_examples=100, deadline=None)
@given(_NAMES, st.data())
def test_test_decoding_a_printed_old_key_is_the_key_whatever_the_catalog_says_now(
    written: list[str], data: st.DataObject
) -> None:
    """For any key a delete or key-changing update was logged with, and any catalog now (key
    moved to other columns, a column renamed away, no key, or the same key), ``key`` is exactly
    the printed old key; only a catalog predicting that very key lets its shape be used."""
    key = data.draw(st.lists(st.sampled_from(written), min_size=1, unique=True), label="key")
    key = [n for n in written if n in key]  # printed in column order
    now = data.draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "z"]), min_size=1,
                             max_size=6, unique=True), label="columns now")
    now_key = data.draw(st.lists(st.sampled_from(now), unique=True), label="key now")
    info = info_of("public", "h", "d", [(n, n, "integer", 23, n in now_key) for n in now])
    values = {n: i + 1 for i, n in enumerate(written)}
    old = " ".join(f"{n}[integer]:{values[n]}" for n in key)
    new = " ".join(f"{n}[integer]:{values[n] + 100}" for n in written)
    (_, dele, upd, _) = decode_td(td_rows(
        f"table public.h: DELETE: {old}",
        f"table public.h: UPDATE: old-key: {old} new-tuple: {new}",
    ), info)
    expected = {n: values[n] for n in key}
    assert (loads(dele.key), dele.before, dele.after) == (expected, None, None)
    assert (loads(upd.key), upd.before) == (expected, None)
    assert loads(upd.after) == {n: values[n] + 100 for n in written}


def test_test_decoding_insert_whose_key_the_catalog_cannot_find_is_keyless_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """test_decoding prints no key for an insert or a key-keeping update: when the catalog's
    key columns are not in the printed row, the key is null and a warning (once per table and
    peek) says so, never a key of nulls on the new column."""
    with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
        events = decode_td(td_rows(
            "table public.t: INSERT: id[integer]:1 data[text]:'a'",
            "table public.t: UPDATE: id[integer]:1 data[text]:'b'",
            "table public.t: INSERT: key_id[integer]:3 data[text]:'c'",  # after the rename
            "table public.gone: INSERT: id[integer]:4",
        ), RENAMED)
    assert [(c.table, c.key) for c in changes(events)] == [
        ("t", None), ("t", None), ("t", '{"key_id":3}'), ("gone", None)]
    assert caplog.text.count("key is null") == 2
    assert "public.t changed" in caplog.text and "public.gone changed" in caplog.text


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("table public.t: INSERT: x[integer]:1 garbage", "cannot parse the new tuple"),
        ("table public.t: UPDATE: old-key: x[integer]:1", "cannot parse the old tuple"),
        ("table public.t: DELETE: x[integer]:1 y", "cannot parse the old tuple"),
        ("table public.t: MERGE: x", "unrecognized table line"),
        ("table public.t: INSERT: x[integer]:abc", "column 'x' of public.t"),
        ("something else", "unrecognized line"),
        ("COMMIT 900", "include-timestamp"),
        ("COMMIT 901 (at 2024-05-06 07:08:09+00)", "COMMIT of xid 901"),
    ],
)
def test_test_decoding_errors_name_the_lsn(line: str, needle: str) -> None:
    info = info_of("public", "t", "d", [("x", "x", "integer", 23, True)])
    with pytest.raises(DecodeError, match=re.escape(needle)) as info_exc:
        decode_td(td_rows(line), info)
    assert info_exc.value.lsn == 0x208
    assert "LSN 0/208" in str(info_exc.value)


def test_test_decoding_rejects_bytes_and_missing_xids() -> None:
    with pytest.raises(DecodeError, match="got bytes"):
        decode_td([(1, 1, b"BEGIN 1")])
    with pytest.raises(DecodeError, match="unrecognized line"):
        decode_td([(1, 1, "BEGIN")])
    with pytest.raises(DecodeError, match="outside a transaction"):
        decode_td([(1, 1, "table public.t: INSERT: x[integer]:1")])


# === against a real server =====================================================================

SESSION = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())
PEEK = ("SELECT lsn::text, xid::text::int8, data FROM {}(%s, NULL, NULL, VARIADIC %s::text[])")


def _flat(options: dict[str, str]) -> list[str]:
    return [item for pair in options.items() for item in pair]


class Slots:
    """A pgoutput slot and a test_decoding slot created together, read by the two decoders."""

    def __init__(self, admin: psycopg.Connection[Any], session: psycopg.Connection[Any],
                 tables: Sequence[str], publish: str = "insert, update, delete, truncate",
                 consume: bool = False) -> None:
        self.admin, self.session, self.consume = admin, session, consume
        self.name = "s" + uuid.uuid4().hex[:12]
        admin.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (publish = {})").format(
            sql.Identifier(self.name), sql.SQL(", ").join(sql.SQL(t) for t in tables),
            sql.Literal(publish)))
        for suffix, plugin in (("_po", "pgoutput"), ("_td", "test_decoding")):
            admin.execute("SELECT pg_create_logical_replication_slot(%s, %s)",
                          (self.name + suffix, plugin))

    def rows(self, plugin: str) -> list[PeekRow]:
        """Peek the plugin's slot (and, if ``consume``, advance it past what was read)."""
        if plugin == "pgoutput":
            slot = self.name + "_po"
            query = PEEK.format("pg_logical_slot_peek_binary_changes")
            options = _flat(pgoutput_options([self.name]))
        else:
            slot = self.name + "_td"
            query = PEEK.format("pg_logical_slot_peek_changes")
            options = _flat(TEST_DECODING_OPTIONS)
        rows: list[PeekRow] = [(parse_lsn(lsn), xid, data) for lsn, xid, data in
                               self.session.execute(query, (slot, options)).fetchall()]
        if self.consume and rows:
            self.session.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                                 (slot, format_lsn(rows[-1][0])))
        return rows

    def lookup(self, schema: str, table: str) -> TableInfo | None:
        return table_info_from_rows(
            schema, table, self.session.execute(CATALOG_QUERY, (schema, table)).fetchall())

    def decode(self, table_filter: Callable[[str, str], bool] | None = None
               ) -> tuple[list[Event], list[Event]]:
        po = list(PgOutputDecoder(table_filter).events(self.rows("pgoutput")))
        td = list(TextFormatDecoder(self.lookup, table_filter).events(self.rows("test_decoding")))
        return po, td

    def both(self, table_filter: Callable[[str, str], bool] | None = None) -> list[Any]:
        """Decode with both plugins, require the same changes and commits, return them.

        Transactions without changes are left out: test_decoding reports them (DDL, or the
        catalog updates of an autovacuum ANALYZE running meanwhile), pgoutput does not.
        """
        po, td = self.decode(table_filter)
        assert _transactions(po) == _transactions(td)
        return [e for _, txn, commit in _transactions(po) for e in (*txn, commit)]

    def drop(self) -> None:
        for suffix in ("_po", "_td"):
            self.admin.execute("SELECT pg_drop_replication_slot(%s)", (self.name + suffix,))
        self.admin.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(self.name)))


def _transactions(events: Sequence[Event]) -> list[tuple[int, list[Change], Commit]]:
    """(xid, changes, commit) of every transaction with changes."""
    found: list[tuple[int, list[Change], Commit]] = []
    pending: list[Change] = []
    for event in events:
        if type(event) is Begin:
            pending = []
        elif type(event) is Change:
            pending.append(event)
        elif type(event) is Commit and pending:
            found.append((event.xid, pending, event))
    return found


@pytest.fixture(scope="module")
def admin(pg: LocalPostgres) -> Iterator[psycopg.Connection[Any]]:
    with pg.connect() as conn:
        yield conn


@pytest.fixture(scope="module")
def session(pg: LocalPostgres) -> Iterator[psycopg.Connection[Any]]:
    with pg.connect(options=SESSION) as conn:
        yield conn


@pytest.fixture
def slots(admin: psycopg.Connection[Any], session: psycopg.Connection[Any]
          ) -> Iterator[Callable[..., Slots]]:
    made: list[Slots] = []

    def make(*tables: str, **kwargs: Any) -> Slots:
        made.append(Slots(admin, session, tables, **kwargs))
        return made[-1]

    yield make
    for s in made:
        s.drop()


def test_real_insert_update_delete_truncate(
    admin: psycopg.Connection[Any], slots: Callable[..., Slots], name: str
) -> None:
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text, n numeric)")
    pair = slots(name)
    admin.execute(f"INSERT INTO {name} VALUES (1, 'a', 1.0), (2, NULL, NULL)")
    admin.execute(f"UPDATE {name} SET v = 'b' WHERE id = 1")
    admin.execute(f"UPDATE {name} SET id = 10 WHERE id = 1")  # primary key update
    admin.execute(f"DELETE FROM {name} WHERE id = 2")
    admin.execute(f"TRUNCATE {name}")
    events = pair.both()
    rows = [(c.op, c.seq, loads(c.key), loads(c.before), loads(c.after)) for c in changes(events)]
    assert rows == [
        ("insert", 0, {"id": 1}, None, {"id": 1, "v": "a", "n": "1.0"}),
        ("insert", 1, {"id": 2}, None, {"id": 2, "v": None, "n": None}),
        ("update", 0, {"id": 1}, None, {"id": 1, "v": "b", "n": "1.0"}),
        ("update", 0, {"id": 1}, None, {"id": 10, "v": "b", "n": "1.0"}),
        ("delete", 0, {"id": 2}, None, None),
        ("truncate", 0, None, None, None),
    ]
    commits = [e for e in events if type(e) is Commit]
    assert len(commits) == 5
    for commit in commits:
        assert commit.commit_ts.tzinfo is not None
        assert abs(commit.commit_ts - datetime.now(UTC)) < timedelta(minutes=5)
    lsns = [e.lsn for e in changes(events)]
    assert lsns == sorted(lsns)


def test_real_replica_identity_full_with_nulls(
    admin: psycopg.Connection[Any], slots: Callable[..., Slots], name: str
) -> None:
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, a text, b int[])")
    admin.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    pair = slots(name)
    admin.execute(f"INSERT INTO {name} VALUES (1, NULL, '{{1,NULL}}')")
    admin.execute(f"UPDATE {name} SET a = 'x'")
    admin.execute(f"DELETE FROM {name}")
    upd, dele = changes(pair.both())[1:]
    assert loads(upd.before) == loads(upd.key) == {"id": 1, "a": None, "b": [1, None]}
    assert loads(upd.after) == {"id": 1, "a": "x", "b": [1, None]}
    assert loads(dele.before) == {"id": 1, "a": "x", "b": [1, None]}


def test_real_replica_identity_nothing_and_no_primary_key(
    admin: psycopg.Connection[Any], slots: Callable[..., Slots], name: str
) -> None:
    admin.execute(f"CREATE TABLE {name}_n (id int PRIMARY KEY, v text)")
    admin.execute(f"ALTER TABLE {name}_n REPLICA IDENTITY NOTHING")
    admin.execute(f"CREATE TABLE {name}_k (v text)")
    # pgoutput refuses updates/deletes on published tables without identity, so publish inserts
    pair = slots(f"{name}_n", f"{name}_k", publish="insert")
    admin.execute(f"INSERT INTO {name}_n VALUES (1, 'a')")
    admin.execute(f"INSERT INTO {name}_k VALUES ('a')")
    both = changes(pair.both())
    assert [(c.table[-1], c.op, c.key, c.after) for c in both] == [
        ("n", "insert", None, '{"id":1,"v":"a"}'), ("k", "insert", None, '{"v":"a"}')]
    admin.execute(f"UPDATE {name}_n SET v = 'b'")
    admin.execute(f"DELETE FROM {name}_k")
    _, td = pair.decode()
    upd, dele = changes(td)[2:]
    assert (upd.op, upd.key, upd.before, upd.after) == ("update", None, None, '{"id":1,"v":"b"}')
    assert (dele.op, dele.key, dele.before, dele.after) == ("delete", None, None, None)


def test_real_replica_identity_using_index(
    admin: psycopg.Connection[Any], slots: Callable[..., Slots], name: str
) -> None:
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, code text NOT NULL, v int)")
    admin.execute(f"CREATE UNIQUE INDEX {name}_code ON {name} (code)")
    admin.execute(f"ALTER TABLE {name} REPLICA IDENTITY USING INDEX {name}_code")
    pair = slots(name)
    admin.execute(f"INSERT INTO {name} VALUES (1, 'c1', 1)")
    admin.execute(f"UPDATE {name} SET v = 2")
    admin.execute(f"UPDATE {name} SET code = 'c2'")
    admin.execute(f"DELETE FROM {name}")
    keys = [c.key for c in changes(pair.both())[1:]]
    assert keys == ['{"code":"c1"}', '{"code":"c1"}', '{"code":"c2"}']


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_real_unchanged_toast_column(
    admin: psycopg.Connection[Any], slots: Callable[..., Slots], name: str, identity: str
) -> None:
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, big text, small int)")
    admin.execute(f"ALTER TABLE {name} REPLICA IDENTITY {identity}")
    pair = slots(name)
    big = secrets.token_hex(3000)  # 6 kB of hex: too random for pglz, so stored out of line
    admin.execute(f"INSERT INTO {name} VALUES (1, %s, 1)", (big,))
    admin.execute(f"UPDATE {name} SET small = 2")
    admin.execute(f"DELETE FROM {name}")
    ins, upd, dele = changes(pair.both())
    assert loads(ins.after)["big"] == big
    assert upd.after == '{"id":1,"small":2}'  # never a silent "big":null
    assert upd.unchanged == ("big",)
    if identity == "FULL":  # the old row is logged whole, TOAST value included
        assert loads(upd.before) == {"id": 1, "big": big, "small": 1}
        assert loads(dele.before) == {"id": 1, "big": big, "small": 2}
    else:
        assert (upd.before, upd.key, dele.key) == (None, '{"id":1}', '{"id":1}')


def test_real_table_altered_between_changes(
    admin: psycopg.Connection[Any], slots: Callable[..., Slots], name: str
) -> None:
    """Rows keep the columns the table had when they were written, with both plugins."""
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, a text)")
    pair = slots(name)
    admin.execute(f"INSERT INTO {name} VALUES (1, 'x')")
    admin.execute(f"ALTER TABLE {name} ADD COLUMN b int DEFAULT 7")
    admin.execute(f"INSERT INTO {name} VALUES (2, 'y', 8)")
    admin.execute(f"ALTER TABLE {name} DROP COLUMN a")
    admin.execute(f"INSERT INTO {name} VALUES (3, 9)")
    admin.execute(f"DELETE FROM {name} WHERE id = 1")
    assert [c.after or c.key for c in changes(pair.both())] == [
        '{"id":1,"a":"x"}', '{"id":2,"a":"y","b":8}', '{"id":3,"b":9}', '{"id":1}']


def test_real_rollback_savepoint_and_interleaved_transactions(
    admin: psycopg.Connection[Any], pg: LocalPostgres, slots: Callable[..., Slots], name: str
) -> None:
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, who text)")
    pair = slots(name)
    with pg.connect() as a, pg.connect() as b:
        a.execute("BEGIN")
        b.execute("BEGIN")
        a.execute(f"INSERT INTO {name} VALUES (1, 'a')")
        b.execute(f"INSERT INTO {name} VALUES (2, 'b')")
        a.execute(f"INSERT INTO {name} VALUES (3, 'a')")
        b.execute(f"INSERT INTO {name} VALUES (4, 'b')")
        b.execute("COMMIT")  # b commits first, so it is decoded first
        a.execute("SAVEPOINT s")
        a.execute(f"INSERT INTO {name} VALUES (5, 'a')")
        a.execute("ROLLBACK TO SAVEPOINT s")
        a.execute(f"INSERT INTO {name} VALUES (6, 'a')")
        a.execute("COMMIT")
        a.execute("BEGIN")
        a.execute(f"INSERT INTO {name} VALUES (7, 'rolled back')")
        a.execute("ROLLBACK")
    events = pair.both()
    assert [(type(e).__name__, loads(e.after)["id"] if type(e) is Change else None,
             getattr(e, "seq", None)) for e in events] == [
        ("Change", 2, 0), ("Change", 4, 1), ("Commit", None, None),
        ("Change", 1, 0), ("Change", 3, 1), ("Change", 6, 2), ("Commit", None, None),
    ]


def test_real_quoted_identifiers(
    admin: psycopg.Connection[Any], slots: Callable[..., Slots]
) -> None:
    schema = "My Schema." + uuid.uuid4().hex[:6]
    table = 'Ta.b"le: INSERT: x'
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    admin.execute(sql.SQL(
        'CREATE TABLE {} ("Col 1" int PRIMARY KEY, "UPPER" text, "a.b" text, "x""y]:" text,'
        ' "user" text, "select" int, "é" text)').format(sql.Identifier(schema, table)))
    qualified = sql.Identifier(schema, table).as_string(admin)
    pair = slots(qualified)
    admin.execute(sql.SQL("INSERT INTO {} VALUES (1, 'U', 'ab', 'xy', 'me', 2, 'e')").format(
        sql.Identifier(schema, table)))
    admin.execute(sql.SQL('UPDATE {} SET "Col 1" = 5').format(sql.Identifier(schema, table)))
    ins, upd = changes(pair.both())
    assert (ins.schema, ins.table) == (schema, table)
    assert list(loads(ins.after)) == ["Col 1", "UPPER", "a.b", 'x"y]:', "user", "select", "é"]
    assert upd.key == '{"Col 1":1}'


def test_real_generated_columns_enums_and_table_filter(
    admin: psycopg.Connection[Any], slots: Callable[..., Slots], name: str
) -> None:
    admin.execute(f"CREATE TYPE {name}_mood AS ENUM ('ok', 'not ok')")
    admin.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, m {name}_mood, ms {name}_mood[],"
                  " twice int GENERATED ALWAYS AS (id * 2) STORED)")
    admin.execute(f"CREATE TABLE {name}_skip (id int PRIMARY KEY)")
    pair = slots(name, f"{name}_skip")
    admin.execute(f"INSERT INTO {name}_skip VALUES (1)")
    admin.execute(f"INSERT INTO {name} VALUES (1, 'not ok', '{{ok,\"not ok\"}}')")
    admin.execute(f"INSERT INTO {name}_skip VALUES (2)")
    admin.execute(f"BEGIN; INSERT INTO {name}_skip VALUES (3); INSERT INTO {name} VALUES (2);"
                  " COMMIT")
    kept = changes(pair.both(table_filter=lambda s, t: not t.endswith("_skip")))
    assert [(c.seq, c.after) for c in kept] == [
        (0, '{"id":1,"m":"not ok","ms":"{ok,\\"not ok\\"}"}'),
        (1, '{"id":2,"m":null,"ms":null}'),
    ]


# --- the property test -------------------------------------------------------------------------

def _iso(value: datetime) -> str:
    """Postgres's ISO text of a timestamp: fraction without trailing zeros, offset +00:00."""
    text = value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    head, offset = (text[:-6], text[-6:]) if value.tzinfo else (text, "")
    if "." in head:
        head = head.rstrip("0").rstrip(".")
    return head + offset


def _float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


@st.composite
def _numerics(draw: st.DrawFn) -> str:
    special = draw(st.sampled_from([None] * 8 + ["NaN", "Infinity", "-Infinity"]))
    if special:
        return special
    whole = draw(st.integers(0, 10**40))
    scale = draw(st.integers(0, 20))
    fraction = draw(st.integers(0, 10**scale - 1)) if scale else 0
    negative = draw(st.booleans()) and (whole or fraction)
    return ("-" if negative else "") + str(whole) + (f".{fraction:0{scale}d}" if scale else "")


_hostile = st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                   max_size=12) | st.sampled_from([
    "'", "''", '"', "\\", "\\'", "null", "NULL", "unchanged-toast-datum", "", " ",
    " new-tuple: x[text]:'y'", "a[text]:", "B'101'", "true", "{", "}", ",", "\n\t\r", "😀",
    'x" y', "{a,b}", "(no-tuple-data)",
])
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _hostile
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_hostile, inner, max_size=3),
    max_leaves=6,
)
_zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                          timezone(-timedelta(hours=8))])

# (column, SQL type, strategy of (parameter, expected JSON value))
_COLUMNS: list[tuple[str, str, st.SearchStrategy[tuple[Any, Any]]]] = [
    ("i2", "int2", st.integers(-(2**15), 2**15 - 1).map(lambda v: (v, v))),
    ("i4", "int4", st.integers(-(2**31), 2**31 - 1).map(lambda v: (v, v))),
    ("i8", "int8", st.integers(-(2**63), 2**63 - 1).map(lambda v: (v, v))),
    ("num", "numeric", _numerics().map(lambda v: (v, v))),
    ("f4", "real", st.floats(width=32).map(lambda v: (v, _float(v)))),
    ("f8", "float8", st.floats().map(lambda v: (v, _float(v)))),
    ("b", "bool", st.booleans().map(lambda v: (v, v))),
    ("t", "text", _hostile.map(lambda v: (v, v))),
    ("vc", "varchar(40)", _hostile.map(lambda v: (v, v))),
    ("by", "bytea", st.binary(max_size=24).map(lambda v: (v, base64.b64encode(v).decode()))),
    ("j", "json", st.tuples(_json, st.booleans()).map(
        lambda v: (json.dumps(v[0], ensure_ascii=v[1], indent=1 if v[1] else None), v[0]))),
    ("jb", "jsonb", _json.map(lambda v: (json.dumps(v), v))),
    ("d", "date", st.dates().map(lambda v: (v, v.isoformat()))),
    ("ts", "timestamp", st.datetimes().map(lambda v: (v, _iso(v)))),
    ("tz", "timestamptz", st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1),
                                       timezones=_zones).map(lambda v: (v, _iso(v)))),
    ("u", "uuid", st.uuids().map(lambda v: (v, str(v)))),
    ("ia", "int4[]", st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=4)
     .map(lambda v: (v, v))),
    ("ta", "text[]", st.lists(st.none() | _hostile, max_size=4).map(lambda v: (v, v))),
    ("m", "int8[]", st.integers(1, 3).flatmap(lambda w: st.lists(
        st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), min_size=w, max_size=w),
        min_size=1, max_size=3)).map(lambda v: (v, v))),
]
_ROW = st.tuples(*(st.none() | strategy for _, _, strategy in _COLUMNS))
_NAMES = ["id"] + [c for c, _, _ in _COLUMNS]


def _same(column: str, actual: Any, expected: Any) -> bool:
    if column == "f4" and isinstance(actual, float):  # compare as float4, as stored
        return struct.pack("f", actual) == struct.pack("f", expected)
    return bool(actual == expected)


@pytest.fixture(scope="module")
def typed(admin: psycopg.Connection[Any], session: psycopg.Connection[Any]) -> Iterator[Slots]:
    """A REPLICA IDENTITY FULL table of many types with a consuming slot pair."""
    columns = ", ".join(f"{c} {t}" for c, t, _ in _COLUMNS)
    admin.execute(f"CREATE TABLE typed (id int8 PRIMARY KEY, {columns})")
    admin.execute("ALTER TABLE typed REPLICA IDENTITY FULL")
    pair = Slots(admin, session, ["typed"], consume=True)
    yield pair
    pair.drop()


_ids = itertools.count(1)
Row = tuple[tuple[Any, Any] | None, ...]  # per column: None or (parameter, expected JSON value)


def _params(row: Row) -> list[Any]:
    return [None if v is None else v[0] for v in row]


def _expected(row_id: int, row: Row) -> dict[str, Any]:
    return {"id": row_id} | {c: None if v is None else v[1]
                             for c, v in zip(_NAMES[1:], row, strict=True)}


def _check(text: str | None, want: dict[str, Any]) -> None:
    got = loads(text)
    assert list(got) == _NAMES  # the table's column order
    assert all(_same(c, got[c], want[c]) for c in _NAMES), (got, want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_ROW, _ROW), min_size=1, max_size=3))
def test_property_both_plugins_give_the_expected_json(
    admin: psycopg.Connection[Any], typed: Slots, rows: list[tuple[Row, Row]]
) -> None:
    """Insert rows, update every column of each, delete them; check all three images."""
    casts = ", ".join(f"%s::{t}" for _, t, _ in _COLUMNS)
    columns = ", ".join(_NAMES[1:])
    ids = [next(_ids) for _ in rows]
    with admin.transaction():
        for row_id, (first, _) in zip(ids, rows, strict=True):
            admin.execute(f"INSERT INTO typed VALUES (%s, {casts})", [row_id, *_params(first)])
    with admin.transaction():
        for row_id, (_, second) in zip(ids, rows, strict=True):
            admin.execute(f"UPDATE typed SET ({columns}) = ({casts}) WHERE id = %s",
                          [*_params(second), row_id])
    admin.execute("DELETE FROM typed")
    found = changes(typed.both())
    n = len(rows)
    inserts, updates = found[:n], found[n:2 * n]
    deletes = sorted(found[2 * n:], key=lambda c: loads(c.before)["id"])  # heap order
    assert [c.op for c in found] == ["insert"] * n + ["update"] * n + ["delete"] * n
    for row_id, (first, second), ins, upd, dele in zip(ids, rows, inserts, updates, deletes,
                                                       strict=True):
        _check(ins.after, _expected(row_id, first))
        _check(upd.before, _expected(row_id, first))
        _check(upd.after, _expected(row_id, second))
        _check(dele.before, _expected(row_id, second))
        assert upd.key == upd.before and dele.key == dele.before  # FULL: the row is the key


def test_property_fixture_dates_are_iso() -> None:
    """The expectation helpers themselves (timestamps trimmed as Postgres prints them)."""
    assert _iso(datetime(2024, 1, 2, 3, 4, 5, 120000)) == "2024-01-02T03:04:05.12"
    assert _iso(datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=1)))) == \
        "2024-01-02T02:04:05+00:00"
    assert date(44, 3, 15).isoformat() == "0044-03-15"
