"""The pgoutput decoder on handmade plugin messages: the edge cases a real server rarely sends."""

from __future__ import annotations

import pickle
import re
import struct
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.decoding import changes, loads
from support.pgoutput_messages import (
    cstr,
    m_commit,
    m_delete,
    m_insert,
    m_relation,
    m_truncate,
    m_update,
    tup,
    txn,
)

from postgres_cdc_source.decoding import (
    UNCHANGED,
    Begin,
    Change,
    Commit,
    PeekRow,
)
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.decoding.schema_changes import ColumnTracker
from postgres_cdc_source.errors import DecodeError

# === pgoutput, handmade messages ================================================================

INT4, TEXT, JSONB, TEXT_ARRAY, NUMERIC = 23, 25, 3802, 1009, 1700
ITEMS = m_relation(16400, "shop", "items", b"d", [
    (1, "id", INT4), (0, "name", TEXT), (0, "doc", JSONB), (0, "tags", TEXT_ARRAY),
    (0, "big", TEXT),
])


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


def test_pgoutput_rejected_relation_is_skipped_by_its_id_alone_until_it_is_kept() -> None:
    """A busy uncaptured table costs one set lookup per change: the filter is asked once per
    Relation message, every I/U/D of the relation is skipped whatever its body, and a Relation
    message that makes it kept (a rename into the rules) brings its changes back."""
    asked: list[str] = []

    def captured(schema: str, table: str) -> bool:
        asked.append(table)
        return table.startswith("keep")

    noise = m_relation(9, "public", "log", b"n", [(0, "v", TEXT)])
    garbage = [kind + struct.pack(">I", 9) + b"\xff" for kind in (b"I", b"U", b"D")]
    renamed = m_relation(9, "public", "keep_log", b"n", [(0, "v", TEXT)])
    events = decode_po(txn(noise, *garbage * 100, renamed, m_insert(9, ["x"])),
                       table_filter=captured)
    assert [(c.table, c.op, c.seq) for c in changes(events)] == [("keep_log", "insert", 300)]
    assert asked == ["log", "keep_log"]


def test_pgoutput_skips_type_origin_and_message_and_maps_empty_namespace() -> None:
    type_msg = b"Y" + struct.pack(">I", 16390) + cstr("public") + cstr("mood")
    origin = b"O" + struct.pack(">Q", 0x99) + cstr("upstream")
    message = b"M" + struct.pack(">BQ", 1, 0x88) + cstr("prefix") + struct.pack(">I", 2) + b"hi"
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


def _names(old: Sequence[Sequence[Any]], new: Sequence[Sequence[Any]],
           keys: frozenset[str]) -> tuple[str, str]:
    return ",".join(c[0] for c in old), ",".join(c[0] for c in new)


def test_pgoutput_a_relation_with_other_columns_puts_a_ddl_change_before_its_change() -> None:
    """``include_schema_changes``: the first Relation of a table sets its columns, the same one
    again is no change, other columns are: the ddl change takes the seq before the change."""
    before = m_relation(5, "public", "t", b"d", [(1, "id", INT4)])
    after = m_relation(5, "public", "t", b"d", [(1, "id", INT4), (0, "n", TEXT)])
    tracker = ColumnTracker(describe=_names)
    rows = txn(before, m_insert(5, ["1"]), before, m_insert(5, ["2"]), after,
               m_insert(5, ["3", "x"]), m_delete(5, ["3", None]))
    out = changes(PgOutputDecoder(columns=tracker).events(rows))
    assert [(c.op, c.seq) for c in out] == [("insert", 0), ("insert", 1), ("ddl", 2),
                                            ("insert", 3), ("delete", 4)]
    assert (out[2].table, out[2].key, out[2].before, out[2].after) == ("t", None, "id", "id,n")
    state = tracker.state()
    assert state == (("public", "t", (("id", INT4, -1, True), ("n", TEXT, -1, False))),)
    # a new peek session starting from a state: its first Relation is a change when it differs
    again = ColumnTracker((("public", "t", (("id", INT4, -1, True),)),), _names)
    out = changes(PgOutputDecoder(columns=again).events(txn(after, m_insert(5, ["4", "y"]))))
    assert [(c.op, c.seq) for c in out] == [("ddl", 0), ("insert", 1)]
    assert again.state() == state
