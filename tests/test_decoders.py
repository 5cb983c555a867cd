"""Both decoders against a real server (handmade plugin output: test_decoders_pgoutput.py and
test_decoders_test_decoding.py).

The integration tests run every workload through a pgoutput slot and a test_decoding slot at
once and require identical changes and commits from both, besides checking the rows themselves.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import secrets
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from support.decoding import changes, loads

from connector_common.lsn import format_lsn, parse_lsn
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.catalog import CATALOG_QUERY, TableInfo, table_info_from_rows
from postgres_cdc_source.decoding import (
    Begin,
    Change,
    Commit,
    Event,
    PeekRow,
)
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder, pgoutput_options
from postgres_cdc_source.decoding.text_format import TEST_DECODING_OPTIONS, TextFormatDecoder
from postgres_cdc_source.pg_types import SESSION_SETTINGS

pytestmark = pytest.mark.contrib  # every real-server test compares the two plugins

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
