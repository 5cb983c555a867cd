"""COPY out read by the compiled core straight from psycopg's libpq
(:mod:`postgres_cdc_source.snapshot.libpq`) gives what psycopg's ``Copy`` gives: the same rows,
the same errors as psycopg's own classes with the connection usable after them, the server's
notices to the connection's handlers; and a connection the library found cannot vouch for is
read through psycopg."""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import errors

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.decoding.blocks import strings_of
from postgres_cdc_source.decoding.compiled import core_columns
from postgres_cdc_source.snapshot import libpq

CORE: ModuleType = importlib.import_module("iggy_spark_core")
_ROWS = ("COPY (SELECT g, repeat(E'a\\tb\\\\', g % 4), CASE WHEN g % 3 = 0 THEN NULL END "
         "FROM generate_series(1, 50) g) TO STDOUT")
_FIFTH = {"c0": "5", "c1": "a\tb\\", "c2": None}  # the JSON of _ROWS's fifth row


@pytest.fixture
def conn(pg: LocalPostgres) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg.dsn) as connection:
        yield connection


class _Counting:
    """The core's reader of ``width`` text columns, its ``read`` calls counted: the core's
    path was the one taken."""

    def __init__(self, width: int) -> None:
        names, kinds, converters = core_columns(CORE, [f"c{i}" for i in range(width)],
                                                [str] * width)
        self._rows = CORE.CopyRows(orjson.dumps, "s", "t", names, kinds, converters, [], 0,
                                   b"x")
        self.calls: list[int] = []

    def read(self, *args: Any) -> tuple[Any, ...]:
        self.calls.append(args[-1])
        return tuple(self._rows.read(*args))

    def rows(self, data: bytes) -> tuple[Any, ...]:
        return tuple(self._rows.rows(data))


def _read(conn: psycopg.Connection[Any], statement: str, rows: int, reader: _Counting,
          monkeypatch: pytest.MonkeyPatch | None = None) -> list[list[str]]:
    """Each fetch's rows (as the ``after`` JSON ``reader`` wrote of them), read through the
    core, or with ``monkeypatch`` through psycopg (no libpq found)."""
    with pytest.MonkeyPatch.context() as patch:
        if monkeypatch is not None:
            patch.setattr(libpq, "_libpq", lambda: None)
        results = list(libpq.copy_out(conn, statement, rows, reader))
    assert all(failed is None for _, failed in results)
    return [strings_of(len(block), dict(block.buffers())["after"]).to_pylist()
            for block, _ in results if len(block)]  # the core's last fetch can be empty


def _flat(blocks: list[list[str]]) -> list[str]:
    return list(itertools.chain.from_iterable(blocks))


def test_this_machine_finds_the_libpq_psycopg_loaded() -> None:
    assert libpq._libpq() is not None  # else the suite never reads COPY through the core


@pytest.mark.parametrize("rows", [1, 7, 50, 1000])
def test_the_core_reads_the_rows_psycopg_reads_in_blocks_of_whole_rows(
    conn: psycopg.Connection[Any], rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = _Counting(3)
    through_core = _read(conn, _ROWS, rows, reader)
    through_psycopg = _read(conn, _ROWS, rows, _Counting(3), monkeypatch)
    assert reader.calls and through_core == through_psycopg
    assert [len(block) for block in through_core] == (
        [rows] * (50 // rows) + ([50 % rows] if 50 % rows else []))
    assert orjson.loads(_flat(through_core)[4]) == _FIFTH
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert conn.execute("SELECT 2").fetchone() == (2,)  # the connection is idle again


@pytest.mark.parametrize(("statement", "error"), [
    ("COPY (SELECT 1 / (g - 30) FROM generate_series(1, 40) g) TO STDOUT",
     errors.DivisionByZero),  # after rows were sent: at the COPY's end
    ("COPY (SELECT * FROM no_such_table) TO STDOUT", errors.UndefinedTable),  # at its start
    ("SELECT 1", psycopg.ProgrammingError),  # not a COPY
])
@pytest.mark.parametrize("through_core", [True, False])
def test_a_failing_copy_raises_psycopgs_error_and_leaves_the_connection_usable(
    conn: psycopg.Connection[Any], statement: str, error: type[Exception], through_core: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = _Counting(1)
    with pytest.raises(error):
        _read(conn, statement, 10, reader, None if through_core else monkeypatch)
    assert bool(reader.calls) is (through_core and statement.startswith("COPY (SELECT 1"))
    conn.rollback()
    assert conn.execute("SELECT 3").fetchone() == (3,)


def test_notices_sent_during_the_copy_reach_the_connections_handlers(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    conn.execute("CREATE FUNCTION pg_temp.noisy(g int) RETURNS int LANGUAGE plpgsql AS "
                 "$$ BEGIN RAISE NOTICE 'row %', g; RETURN g; END $$")
    statement = "COPY (SELECT pg_temp.noisy(g) FROM generate_series(1, 30) g) TO STDOUT"
    heard: list[str] = []
    conn.add_notice_handler(lambda diag: heard.append(str(diag.message_primary)))
    reader = _Counting(1)
    through_core = _read(conn, statement, 4, reader)
    assert reader.calls and heard == [f"row {g}" for g in range(1, 31)]
    heard.clear()
    assert _read(conn, statement, 4, _Counting(1), monkeypatch) == through_core
    assert heard == [f"row {g}" for g in range(1, 31)]


@pytest.mark.parametrize("vouches", [
    lambda found: None,  # no libpq found, or two
    lambda found: libpq._Libpq(found.get_copy_data, found.freemem, lambda pointer: -1),
])
def test_a_connection_the_found_libpq_cannot_vouch_for_is_read_through_psycopg(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch,
    vouches: Callable[[Any], Any],
) -> None:
    found = libpq._libpq()
    monkeypatch.setattr(libpq, "_libpq", lambda: vouches(found))
    reader = _Counting(3)
    rows = _flat(_read(conn, _ROWS, 8, reader))
    assert not reader.calls
    assert len(rows) == 50 and orjson.loads(rows[4]) == _FIFTH
