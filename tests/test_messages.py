"""Logical messages (``pg_logical_emit_message``): decoded by both plugins from a real Postgres
through the reader's ``read``, filtered by prefix, placed in commit order, routed by prefix.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest

from connector_common.lsn import parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.decoding import Begin, Change, Commit, LoneMessage
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.decoding.text_format import TextFormatDecoder
from postgres_cdc_source.errors import ConfigError, DecodeError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader


def _read(pg: LocalPostgres, options: dict[str, str], sql: list[str]) -> list[dict[str, Any]]:
    """The rows a reader with ``options`` reads for what ``sql`` (one statement per item, each
    item its own transaction; ``;``-joined items in one) writes."""
    r = PgCdcStreamReader(CdcOptions.from_options({"dsn": pg.dsn, **options}))
    try:
        start = r.initialOffset()
        with pg.connect() as conn:
            conn.autocommit = True
            for statement in sql:
                conn.execute(statement)
        end = r.latestOffset(start, ReadAllAvailable())
        part = CdcPartition(parse_lsn(start["lsn"]), parse_lsn(end["lsn"]))
        return [row for batch in r.read(part) for row in batch.to_pylist()]
    finally:
        r.stop()
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (options["slot"],))


@pytest.fixture(params=["pgoutput", "test_decoding"])
def plugin(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def slot(pg: LocalPostgres, name: str, plugin: str) -> str:
    """A slot name, and a table of the same name with an ``int`` key and a ``text`` column."""
    slot = f"{name}_{plugin}"
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {slot} (id int PRIMARY KEY, v text)")
    return slot


def test_messages_arrive_in_commit_order_filtered_by_prefix_and_routed_by_it(
    pg: LocalPostgres, slot: str, plugin: str
) -> None:
    rows = _read(pg, {
        "slot": slot, "plugin": plugin, "include_tables": rf"public\.{slot}",
        "message_prefixes": "outbox, audit", "topic_from": "table", "stream_from": "schema",
        "default_stream": "cdc", "partition_key_from": "key",
    }, [
        "SELECT pg_logical_emit_message(false, 'audit', 'before')",
        # one transaction: a row, an outbox message, an unwanted prefix, a non-transactional
        # message written while it is open (delivered before it: at its place in the WAL)
        f"BEGIN; INSERT INTO {slot} VALUES (1, 'a');"
        " SELECT pg_logical_emit_message(true, 'outbox', '{\"order\": 1}');"
        " SELECT pg_logical_emit_message(true, 'other', 'not asked for');"
        " SELECT pg_logical_emit_message(false, 'audit', 'during');"
        f" UPDATE {slot} SET v = 'b'; COMMIT",
        "BEGIN; SELECT pg_logical_emit_message(true, 'outbox', 'rolled back'); ROLLBACK",
        "SELECT pg_logical_emit_message(true, 'outbox', 'alone')",
    ])
    seen = [(r["op"], r["table"], r["seq"], r["topic"], r["stream"], r["partition_key"],
             json.loads(r["after"]).get("content") if r["op"] == "message" else None)
            for r in rows]
    assert seen == [
        ("message", None, None, "audit", "cdc", '{"prefix":"audit"}', "before"),
        ("message", None, None, "audit", "cdc", '{"prefix":"audit"}', "during"),
        ("insert", slot, 0, slot, "public", '{"id":1}', None),
        ("message", None, 1, "outbox", "cdc", '{"prefix":"outbox"}', '{"order": 1}'),
        # seq 2 is the 'other' message: counted, not delivered
        ("update", slot, 3, slot, "public", '{"id":1}', None),
        ("message", None, 0, "outbox", "cdc", '{"prefix":"outbox"}', "alone"),
    ]
    lone, during, insert, outbox = rows[:4]
    assert lone["commit_lsn"] == lone["lsn"] and lone["commit_ts"] is None
    assert lone["id"] == f"{lone['lsn']}:message" and lone["xid"] is None
    assert during["xid"] == insert["xid"]  # written inside that transaction, delivered outside
    assert outbox["commit_lsn"] == insert["commit_lsn"] and outbox["xid"] == insert["xid"]
    assert outbox["id"] == f"{insert['commit_lsn']}:1"
    assert json.loads(outbox["after"])["content_base64"] == base64.b64encode(
        b'{"order": 1}').decode()
    assert len({r["id"] for r in rows}) == len(rows)


def test_without_message_prefixes_no_message_arrives_but_each_takes_its_seq(
    pg: LocalPostgres, slot: str, plugin: str
) -> None:
    rows = _read(pg, {"slot": slot, "plugin": plugin, "include_tables": rf"public\.{slot}"}, [
        "SELECT pg_logical_emit_message(false, 'x', 'lone')",
        f"BEGIN; SELECT pg_logical_emit_message(true, 'x', 'y'); INSERT INTO {slot} VALUES (1);"
        " COMMIT",
    ])
    assert [(r["op"], r["seq"]) for r in rows] == [("insert", 1)]  # ids never depend on it


def test_binary_content_arrives_as_base64_only(pg: LocalPostgres, slot: str, plugin: str
                                                ) -> None:
    rows = _read(pg, {"slot": slot, "plugin": plugin, "message_prefixes": "*"}, [
        # (a lone message first: the commit after it flushes its WAL, which makes it readable)
        "SELECT pg_logical_emit_message(false, 'bin, sz: 1 content:', '\\x00'::bytea)",
        "SELECT pg_logical_emit_message(true, 'bin', '\\xff00fe'::bytea)",
    ])
    assert [json.loads(row["after"]) for row in rows] == [
        {"prefix": "bin, sz: 1 content:", "content": "\x00", "content_base64": "AA=="},
        {"prefix": "bin", "content": None,
         "content_base64": base64.b64encode(b"\xff\x00\xfe").decode()},
    ]


def _td(*lines: str) -> list[Any]:
    rows = [(0x100 + 8 * i, 5, line) for i, line in enumerate(
        ["BEGIN 5", *lines, "COMMIT 5 (at 2024-05-06 07:08:09+00)"])]
    return list(TextFormatDecoder(lambda s, t: None, messages=lambda p: True).events(rows))


def test_test_decoding_finds_the_separator_a_prefix_or_content_may_also_hold() -> None:
    prefix = "p, sz: 3 content:abc"
    content = "x, sz: 2 content:é"  # a valid-looking tail: "é" is two bytes
    size = len(content.encode())
    (_, change, _) = _td(f"message: transactional: 1 prefix: {prefix}, sz: {size} "
                         f"content:{content}")
    assert json.loads(change.after)["prefix"] == prefix
    assert json.loads(change.after)["content"] == content
    with pytest.raises(DecodeError, match="does not match its printed size"):
        _td("message: transactional: 1 prefix: p, sz: 9 content:short")


def test_pgoutput_messages_outside_and_inside_transactions() -> None:
    def message(flags: int, prefix: str, content: bytes) -> bytes:
        return (b"M" + struct.pack(">BQ", flags, 0x88) + prefix.encode() + b"\0"
                + struct.pack(">I", len(content)) + content)

    begin = b"B" + struct.pack(">QqI", 0x300, 0, 7)
    commit = b"C" + struct.pack(">BQQq", 0, 0x300, 0x308, 0)
    decoder = PgOutputDecoder(messages=lambda prefix: prefix != "no")
    events = list(decoder.events([(0x100, 0, message(0, "lone", b"a")), (0x200, 7, begin),
                                  (0x200, 7, message(1, "no", b"")),
                                  (0x208, 7, message(1, "yes", b"b")), (0x300, 7, commit)]))
    assert [type(e) for e in events] == [LoneMessage, Begin, Change, Commit]
    lone = events[0]
    assert isinstance(lone, LoneMessage) and lone.xid is None and lone.change.seq is None
    assert isinstance(events[2], Change) and events[2].seq == 1
    with pytest.raises(DecodeError, match="truncated 'M' message"):
        list(decoder.events([(0x100, 0, message(0, "lone", b"abc")[:-5])]))
    with pytest.raises(DecodeError, match="bad 'M' message: transactional message outside"):
        list(decoder.events([(0x100, 0, message(1, "yes", b""))]))


@pytest.mark.parametrize(("value", "needle"), [
    ("a,,b", "empty prefix"), ("*,a", "give '\\*' alone"), (" ", "empty prefix"),
])
def test_message_prefixes_refuses_what_it_cannot_mean(value: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as info:
        CdcOptions.from_options({"dsn": "host=x", "slot": "s", "message_prefixes": value})
    assert info.value.option == "message_prefixes"


def test_message_prefixes_match_whole_prefixes_or_all() -> None:
    listed = CdcOptions.from_options({"dsn": "host=x", "slot": "s",
                                      "message_prefixes": "a, b.c"})
    assert [listed.keeps_message(p) for p in ("a", "b.c", "b", "ab", "*")] == [
        True, True, False, False, False]
    every = CdcOptions.from_options({"dsn": "host=x", "slot": "s", "message_prefixes": "*"})
    assert every.keeps_message("anything") and every.delivers_messages
    assert not CdcOptions.from_options({"dsn": "host=x", "slot": "s"}).delivers_messages
