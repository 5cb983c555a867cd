"""Who may steer a query's backfills: only roles the owner of ``public.pg_cdc_requests``
grants ``INSERT``, as Postgres checks it. A role that can only log in writes every message and
notification it likes (``pg_logical_emit_message`` and ``NOTIFY`` check no privilege): none of
them starts, cancels or shapes a backfill, none stops the query, and each is skipped with a
warning naming its LSN. The readers are driven through their own calls, as Spark drives them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.driven_query import DrivenQuery

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.backfill import cancel_backfill, request_backfill
from postgres_cdc_source.backfill.requests import Malformed, request_of
from postgres_cdc_source.errors import BackfillRefused
from postgres_cdc_source.options import REQUEST_PREFIX
from postgres_cdc_source.replication import request_table
from postgres_cdc_source.replication.request_table import MAX_TABLES, RequestRow

PLUGINS = ["pgoutput", "test_decoding"]
_SKIPPED = re.compile(r"the request message at LSN [0-9A-F]+/[0-9A-F]+ is skipped")


def _emit(conn: psycopg.Connection[Any], content: str) -> None:
    conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (REQUEST_PREFIX, content))


@pytest.fixture
def intruder(pg: LocalPostgres, name: str) -> Iterator[str]:
    """The DSN of a role that may log in and nothing else."""
    role = f"{name}_intruder"
    with pg.connect() as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    yield pg.dsn.replace("user=postgres", f"user={role}")
    with pg.connect() as conn:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


def _table(pg: LocalPostgres, name: str, rows: int) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {name} SELECT i, 'old' FROM generate_series(1, %s) AS i",
                     (rows,))


def _drain(query: DrivenQuery, most: int = 6) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for _ in range(most):
        batch = query.batch()
        rows += batch
        if not batch and query.offset.get("backfill") is None:
            break
    return rows


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_role_that_can_only_log_in_neither_steers_nor_stops_a_query(
    pg: LocalPostgres, name: str, intruder: str, plugin: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reviewers' requests, word for word as today's release read them: a backfill whose
    ``where`` counts a table the role may not read, a forged ``created`` request, a request
    nested 100,000 deep and one naming no table; then a cancel, through the API and the
    table. The query delivers the insert written after them and nothing else."""
    caplog.set_level(logging.INFO, logger="postgres_cdc_source.backfill")
    _table(pg, name, 3)
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_secret AS SELECT generate_series(1, 7) AS s")
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin,  # its publication: the slot's name
                             "include_tables": rf"public\.{name}"})
    query.batch()
    with psycopg.connect(intruder, autocommit=True) as conn:
        _emit(conn, json.dumps({"id": "x", "slot": name, "tables": [["public", name]],
                                "where": f"id <= (SELECT count(*) FROM {name}_secret)"}))
        _emit(conn, json.dumps({"created": ["public", name], "publication": name,
                                "xmin": "1", "cid": "0"}))
        _emit(conn, "[" * 100_000)
        _emit(conn, json.dumps({"id": "y", "slot": name, "tables": []}))
        conn.execute("NOTIFY pg_cdc_backfill")
        with pytest.raises(BackfillRefused, match="may not request backfills") as refused:
            request_backfill(intruder, name, [name])
        assert isinstance(refused.value.__cause__, psycopg.errors.InsufficientPrivilege)
        with pytest.raises(BackfillRefused, match="may not request backfills"):
            cancel_backfill(intruder, name, "x")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO public.pg_cdc_requests (slot, tables) "
                         "VALUES (%s, ARRAY[%s]::regclass[])", (name, name))
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} VALUES (100, 'after')")
    rows = _drain(query)
    assert [(r["op"], json.loads(r["after"])["id"]) for r in rows] == [("insert", 100)]
    assert len(_SKIPPED.findall(caplog.text)) == 4
    assert query.reader.reportLatestOffset()["skipped_requests"] == 4
    assert query.offset.get("backfill") is None


def test_a_granted_role_requests_backfills_and_a_where_only_with_the_condition_grant(
    pg: LocalPostgres, name: str, intruder: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """``INSERT (slot, kind, id, tables)`` lets a role request and cancel backfills; the
    ``where`` the query runs as SQL needs ``INSERT (condition)`` as well."""
    caplog.set_level(logging.INFO, logger="postgres_cdc_source.backfill")
    role = f"{name}_intruder"
    _table(pg, name, 5)
    query = DrivenQuery(pg, {"slot": name, "include_tables": rf"public\.{name}"})
    with pg.connect() as conn:
        conn.execute("GRANT INSERT (slot, kind, id, tables) ON public.pg_cdc_requests "
                     f"TO {role}")
    with pytest.raises(BackfillRefused, match=r"INSERT \(condition\)"):
        request_backfill(intruder, name, [name], where="id > 2")
    backfill = request_backfill(intruder, name, [name])
    rows = _drain(query)
    assert sorted(json.loads(r["after"])["id"] for r in rows if r["op"] == "read") == [
        1, 2, 3, 4, 5]
    assert f"backfill {backfill}: requested by {role}" in caplog.text
    with pg.connect() as conn:
        conn.execute(f"GRANT INSERT (condition) ON public.pg_cdc_requests TO {role}")
    request_backfill(intruder, name, [name], where="id > 3")
    rows = _drain(query)
    assert sorted(json.loads(r["after"])["id"] for r in rows if r["op"] == "read") == [4, 5]
    assert not _SKIPPED.search(caplog.text)


def test_a_requests_table_owned_by_another_role_is_not_trusted(
    pg: LocalPostgres, name: str, intruder: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Its owner may grant what it likes, so its rows are not requests (as when a role with
    ``CREATE`` on ``public`` made the table before any query did)."""
    role = f"{name}_intruder"
    _table(pg, name, 2)
    query = DrivenQuery(pg, {"slot": name, "include_tables": rf"public\.{name}"})
    with pg.connect() as conn:
        conn.execute(f"ALTER TABLE public.pg_cdc_requests OWNER TO {role}")
    try:
        request_backfill(intruder, name, [name])  # allowed by Postgres: the role owns it
        rows = _drain(query)
    finally:
        with pg.connect() as conn:
            conn.execute("ALTER TABLE public.pg_cdc_requests OWNER TO postgres")
    assert rows == []
    assert f"public.pg_cdc_requests is owned by {role}" in caplog.text
    assert len(_SKIPPED.findall(caplog.text)) == 1


_text = st.one_of(st.none(), st.text(max_size=300))
_rows = st.builds(
    RequestRow, lsn=st.integers(0, 2**64 - 1), kind=st.text(max_size=50), id=st.text(max_size=300),
    slot=_text, tables=st.one_of(st.none(), st.lists(st.lists(_text, min_size=2, max_size=2),
                                                     max_size=5)),
    table_count=st.one_of(st.none(), st.integers(0, 2 * MAX_TABLES)), condition=_text,
    publication=_text, created_xmin=st.one_of(st.none(), st.integers(0, 2**32)),
    created_cid=st.one_of(st.none(), st.integers(0, 2**32)), requested_by=st.text(max_size=63))


@given(_rows, st.sampled_from(["s", "slot"]), st.sampled_from([None, "p"]))
def test_any_row_is_a_request_a_cancel_nothing_or_malformed(
    row: RequestRow, slot: str, publication: str | None
) -> None:
    """Whatever a granted role writes, reading it never raises anything but :class:`Malformed`
    (which the planner skips with a warning), and what it gives names only tables the row
    does."""
    try:
        request = request_of(row, slot, publication)
    except Malformed:
        return
    if isinstance(request, str):
        assert (row.kind, row.slot, request) == ("cancel", slot, row.id)
    elif request is not None:
        assert row.tables is not None and set(request.tables) <= {
            (s, t) for s, t in row.tables}
        assert 1 <= len(request.tables) <= MAX_TABLES
        assert (request.created is None) == (row.kind == "backfill")


@pytest.mark.parametrize("plugin", PLUGINS)
def test_the_requests_table_is_never_captured(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """Not even by a query without filters: its rows are the connector's."""
    _table(pg, name, 2)
    query = DrivenQuery(pg, {"slot": name, "plugin": plugin})
    request_backfill(pg.dsn, name, [name])
    rows = _drain(query)
    assert {(r["op"], r["table"]) for r in rows} == {("read", name)}


def test_a_start_searches_the_wal_only_where_the_table_may_hold_a_request(
    pg: LocalPostgres, name: str, intruder: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A request is a row, so a query starting on a backlog reads the WAL for requests only
    when the table has a row in the batch's range (or a session writing one): the forged
    message written while it was down is never read as one (no warning), the insert after it
    arrives; a ``NOTIFY`` makes the next planning read every message, and name the forged."""
    caplog.set_level(logging.INFO, logger="postgres_cdc_source.backfill")
    _table(pg, name, 1)
    query = DrivenQuery(pg, {"slot": name, "include_tables": rf"public\.{name}"})
    with psycopg.connect(intruder, autocommit=True) as conn:
        _emit(conn, json.dumps({"id": "x", "slot": name, "tables": [["public", name]]}))
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} VALUES (2, 'new')")
    rows = _drain(query)
    assert [json.loads(r["after"])["id"] for r in rows] == [2]
    assert not _SKIPPED.search(caplog.text)
    with psycopg.connect(intruder, autocommit=True) as conn:
        _emit(conn, json.dumps({"id": "y", "slot": name, "tables": [["public", name]]}))
        conn.execute("NOTIFY pg_cdc_backfill")
    assert _drain(query) == []
    assert len(_SKIPPED.findall(caplog.text)) == 1
    assert query.reader.reportLatestOffset()["skipped_requests"] == 1


def test_the_table_may_hold_a_request_while_a_session_writes_one_or_a_row_is_in_range(
    pg: LocalPostgres, name: str
) -> None:
    """:func:`~postgres_cdc_source.replication.request_table.may_hold`: a row in ``(after,
    upto]``, or any session still inserting (its commit may be flushed before it is
    visible); nothing else."""
    _table(pg, name, 1)
    DrivenQuery(pg, {"slot": name, "include_tables": rf"public\.{name}"})  # slot and table
    with pg.connect() as conn:

        def flush() -> int:
            row = conn.execute("SELECT pg_current_wal_flush_lsn() - '0/0'").fetchone()
            assert row is not None
            return int(row[0])

        assert not request_table.may_hold(conn, name, 0, flush())
        with psycopg.connect(pg.dsn) as writer:  # a transaction, left open
            writer.execute("INSERT INTO public.pg_cdc_requests (slot, tables) "
                           "VALUES (%s, ARRAY[%s]::regclass[])", (name, name))
            assert request_table.may_hold(conn, name, 0, flush())
            writer.rollback()
        assert not request_table.may_hold(conn, name, 0, flush())
        before = flush()
        request_backfill(pg.dsn, name, [name])
        (lsn,) = conn.execute("SELECT max(lsn) - '0/0' FROM public.pg_cdc_requests").fetchone()
        assert before < int(lsn) <= flush()
        assert request_table.may_hold(conn, name, before, flush())
        assert request_table.may_hold(conn, name, int(lsn) - 1, int(lsn))
        assert not request_table.may_hold(conn, name, int(lsn), flush())
        assert not request_table.may_hold(conn, name, 0, before)
