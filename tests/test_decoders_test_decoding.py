"""The test_decoding decoder on handmade plugin lines: quoting, identities, catalog drift."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.decoding import changes, loads

from postgres_cdc_source.catalog import ColumnInfo, TableInfo
from postgres_cdc_source.decoding import (
    Begin,
    Commit,
    PeekRow,
)
from postgres_cdc_source.decoding.schema_changes import ColumnTracker
from postgres_cdc_source.decoding.text_format import TextFormatDecoder
from postgres_cdc_source.errors import DecodeError

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


def test_test_decoding_rejected_table_is_skipped_by_its_header() -> None:
    """A busy uncaptured table: the filter is asked once, the catalog never, and every later
    line of the same header is skipped (and counted) without its tuple being read."""
    asked: list[str] = []

    def captured(schema: str, table: str) -> bool:
        asked.append(table)
        return table == "keep"

    events = decode_td(td_rows(
        *["table public.log: INSERT: v[text]:'x'", "table public.log: UPDATE: v[text]:'x'",
          "table public.log: DELETE: (no-tuple-data)"] * 100,
        "table public.keep: INSERT: x[integer]:1",
    ), info_of("public", "keep", "n", [("x", "x", "integer", 23, False)]),
        table_filter=captured)
    assert [(c.table, c.op, c.seq) for c in changes(events)] == [("keep", "insert", 300)]
    assert asked == ["log", "keep"]


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


def test_test_decoding_printed_columns_other_than_the_last_put_a_ddl_change_before_them() -> None:
    """``include_schema_changes``: a column dropped then added again (the catalog's columns
    once more), each a ddl change; the hot path, which takes the catalog's columns without the
    tracker, leaves the table while its tracked columns are others."""
    info = info_of("public", "t", "d", [("id", "id", "integer", 23, True),
                                        ("n", "n", "text", 25, False)])
    tracker = ColumnTracker(describe=lambda old, new, keys: (
        ",".join(c[0] for c in old), ",".join(f"{c[0]}:{c[0] in keys}" for c in new)))
    rows = td_rows(*(f"table public.t: INSERT: id[integer]:{i}" + (" n[text]:'x'" if n else "")
                     for i, n in ((1, True), (2, False), (3, True), (4, True))),
                   "table public.t: DELETE: id[integer]:4")
    out = changes(TextFormatDecoder(lambda s, t: info, columns=tracker).events(rows))
    assert [(c.op, c.seq, loads(c.after) if c.op != "ddl" else c.after) for c in out] == [
        ("insert", 0, {"id": 1, "n": "x"}),
        ("ddl", 1, "id:True"),
        ("insert", 2, {"id": 2}),
        ("ddl", 3, "id:True,n:False"),
        ("insert", 4, {"id": 3, "n": "x"}),
        ("insert", 5, {"id": 4, "n": "x"}),
        ("delete", 6, None),
    ]
    assert out[1].before == "id,n"
    assert tracker.state() == (("public", "t", (("id", "integer"), ("n", "text"))),)
