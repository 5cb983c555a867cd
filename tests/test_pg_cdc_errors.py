"""What users hit when something is wrong around the slot: each a clear error saying what to do.

These call the reader's methods directly (as Spark's driver and executors do), against real
servers, so each failure is checked where it starts rather than through Spark's wrappers.
"""

from __future__ import annotations

import pickle
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from connector_common.lsn import format_lsn, parse_lsn
from iggy_spark_testing.harness import LocalPostgres, free_port
from postgres_cdc_source.connections import connect_with_retry
from postgres_cdc_source.errors import ConfigError, SlotError, SourceError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import lifecycle
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader


def reader(dsn: str, slot: str, **extra: str) -> PgCdcStreamReader:
    return PgCdcStreamReader(CdcOptions.from_options({"dsn": dsn, "slot": slot, **extra}))


def flush(pg: LocalPostgres) -> int:
    with pg.connect() as conn:
        return parse_lsn(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])  # type: ignore[index]


@pytest.fixture
def busy_slot(pg: LocalPostgres, name: str) -> Iterator[tuple[str, int]]:
    """A slot held by another consumer (pg_recvlogical streaming from it), and its position."""
    start = parse_lsn(reader(pg.dsn, name, plugin="test_decoding").initialOffset()["lsn"])
    proc = subprocess.Popen(
        ["pg_recvlogical", "-d", pg.dsn, "-S", name, "--start", "-f", "/dev/null"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    with pg.connect() as conn:
        while not conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (name,)
        ).fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline, "pg_recvlogical never took the slot"
            time.sleep(0.1)
    yield name, start
    proc.terminate()
    proc.wait(10)


@pytest.mark.contrib  # a test_decoding slot
def test_a_slot_in_use_by_another_session(pg: LocalPostgres, busy_slot: tuple[str, int]) -> None:
    slot, start = busy_slot
    r = reader(pg.dsn, slot, plugin="test_decoding")
    with pytest.raises(SlotError, match=r"in use by another session.*stop the other consumer"):
        list(r.read(CdcPartition(start, flush(pg))))


@pytest.mark.contrib  # a test_decoding slot
def test_a_slot_with_another_plugin(pg: LocalPostgres, name: str) -> None:
    reader(pg.dsn, name, plugin="test_decoding").initialOffset()
    with pytest.raises(SlotError, match="uses plugin 'test_decoding', not 'pgoutput'"):
        reader(pg.dsn, name, plugin="pgoutput").initialOffset()


def test_a_missing_slot_when_creation_is_off(pg: LocalPostgres, name: str) -> None:
    with pytest.raises(SlotError, match="does not exist: create it or set create_slot=true"):
        reader(pg.dsn, name, create_slot="false").initialOffset()


def test_wal_level_not_logical(name: str) -> None:
    with (
        LocalPostgres(settings={"wal_level": "replica"}) as other,
        pytest.raises(SlotError, match=r"wal_level is 'replica'.*set wal_level = logical"),
    ):
        reader(other.dsn, name).initialOffset()


def test_a_role_without_replication_privileges(pg: LocalPostgres, name: str) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
    dsn = pg.dsn.replace("user=postgres", f"user={name}")
    with pytest.raises(
        SlotError,
        match=f"role '{name}' may not create replication slots.*ALTER ROLE {name} REPLICATION",
    ):
        reader(dsn, name).initialOffset()


def test_an_unreachable_server() -> None:
    dsn = f"host=127.0.0.1 port={free_port()} user=postgres password=s3cret connect_timeout=2"
    with pytest.raises(SourceError, match="cannot connect to Postgres") as info:
        reader(dsn, "any", connect_retry_timeout="0s").initialOffset()
    assert "s3cret" not in str(info.value)


@pytest.mark.services  # its own server
def test_a_query_starting_while_postgres_restarts_waits_for_it(name: str) -> None:
    """Start-up rides out a restart as planning does; ``0s`` gives up at once."""
    with LocalPostgres() as server:  # its own server: the session's is shared with other tests
        down = threading.Thread(target=server.restart, kwargs={"down_for": 3.0})
        down.start()
        while psycopg.pq.PGconn.ping(server.dsn.encode()) == psycopg.pq.Ping.OK:
            time.sleep(0.05)
        with pytest.raises(SourceError) as info:
            reader(server.dsn, name, connect_retry_timeout="0s").initialOffset()
        assert info.value.transient
        offset = reader(server.dsn, name).initialOffset()  # waits for the server to come back
        down.join()
        with server.connect() as conn:
            row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots"
                               " WHERE slot_name = %s", (name,)).fetchone()
        assert row is not None and offset["lsn"] == row[0]


def test_a_session_lost_between_the_starts_statements_is_started_again(
    pg: LocalPostgres, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server goes away after the start connected (here: the session is ended from the
    server, as a restart ends it), so waiting for the connection is not enough: the start runs
    again instead of failing the query, and finds the slot it may have made."""
    check = lifecycle.check_failover_supported
    ended: list[int] = []

    def end_the_first_session(conn: psycopg.Connection[Any], options: Any) -> None:
        if not ended:
            ended.append(conn.info.backend_pid)
            with pg.connect() as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (ended[0],))
        check(conn, options)

    monkeypatch.setattr(lifecycle, "check_failover_supported", end_the_first_session)
    offset = reader(pg.dsn, name).initialOffset()
    assert ended
    with pg.connect() as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots"
                           " WHERE slot_name = %s", (name,)).fetchone()
    assert row is not None and offset["lsn"] == row[0]


def test_a_slot_moved_beyond_the_checkpoint_by_someone_else(pg: LocalPostgres, name: str) -> None:
    start = parse_lsn(reader(pg.dsn, name).initialOffset()["lsn"])
    with pg.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS ahead (id int PRIMARY KEY)")
        conn.execute("INSERT INTO ahead SELECT g FROM generate_series(1, 10) g")
        end = flush(pg)
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (name, format_lsn(end)))
    with pytest.raises(SlotError, match=r"beyond this batch's start.*fail_on_data_loss=false"):
        list(reader(pg.dsn, name).read(CdcPartition(start, end)))
    # explicitly accepted: the read goes on from where the slot is
    assert (
        list(reader(pg.dsn, name, fail_on_data_loss="false").read(CdcPartition(start, end))) == []
    )


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"slot": "s"}, "dsn"),
        ({"dsn": "host=x"}, "slot"),
        ({"dsn": "host=x", "slot": "UPPER"}, "slot"),
        ({"dsn": "host=x", "slot": "a" * 64}, "slot"),
        ({"dsn": "host=x", "slot": "s", "plugin": "wal2json"}, "plugin"),
        ({"dsn": "host=x", "slot": "s", "max_bytes_per_trigger": "lots"}, "max_bytes_per_trigger"),
        ({"dsn": "host=x", "slot": "s", "include_tables": "("}, "include_tables"),
        (
            {"dsn": "host=x", "slot": "s", "plugin": "test_decoding", "publication": "p"},
            "publication",
        ),
        ({"dsn": "host=x", "slot": "s", "topic_form": "table"}, "topic_form"),
        ({"dsn": "'unterminated", "slot": "s"}, "dsn"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], option: str) -> None:
    with pytest.raises(ConfigError) as info:
        CdcOptions.from_options(options)
    assert info.value.option == option
    assert option in str(info.value)


def test_the_password_never_shows_in_repr() -> None:
    options = CdcOptions.from_options({"dsn": "host=x user=u password=hunter2", "slot": "s"})
    assert "hunter2" not in repr(options) and "hunter2" not in options.safe_dsn
    assert "hunter2" not in repr(PgCdcStreamReader(options).options)


def test_what_waiting_cannot_heal_fails_at_once_with_the_servers_message_and_sqlstate(
    pg: LocalPostgres, monkeypatch: pytest.MonkeyPatch,
) -> None:
    dsn = pg.dsn + " dbname=no_such_db password=s3cret"
    attempts: list[str] = []
    connect = psycopg.connect

    def counting(conninfo: str = "", **kwargs: Any) -> Any:
        attempts.append(conninfo)
        return connect(conninfo, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counting)
    with pytest.raises(SourceError) as info:
        list(reader(dsn, "any").read(CdcPartition(1, 2)))
    # one connect: its one more try (the server may just have started), never retried for
    # connect_retry_timeout as a server that is down would be
    assert attempts == [dsn, dsn]
    assert not info.value.transient  # libpq reports no SQLSTATE for a failed connection
    assert 'database "no_such_db" does not exist' in str(info.value)
    assert "s3cret" not in str(info.value)


def test_no_host_in_the_state_target_session_attrs_asks_for_is_waited_for(
    pg: LocalPostgres,
) -> None:
    """As while a standby is promoted: the server takes the login, but is not (yet) what the DSN
    asks for. A refused login with the same attribute still fails at once."""
    waiting = CdcOptions.from_options({"dsn": pg.dsn + " target_session_attrs=standby",
                                       "slot": "s", "connect_retry_timeout": "0s"})
    with pytest.raises(SourceError, match="no host is in the state target_session_attrs asks "
                       "for: a failover in progress") as info:
        connect_with_retry(waiting)
    assert info.value.transient
    refused = CdcOptions.from_options({
        "dsn": pg.dsn + " dbname=no_such_db target_session_attrs=standby", "slot": "s"})
    with pytest.raises(SourceError) as info:
        connect_with_retry(refused)
    assert not info.value.transient and "failover in progress" not in str(info.value)


def test_connection_failures_are_transient_and_keep_their_cause(
    pg: LocalPostgres,
) -> None:
    refused = f"host=127.0.0.1 port={free_port()} user=postgres connect_timeout=2"
    with pytest.raises(SourceError) as info:
        reader(refused, "any", connect_retry_timeout="0s").initialOffset()
    assert info.value.transient and info.value.sqlstate is None
    # a server that ends the session (57P01) on both attempts: its message and code reach the user
    r = reader(pg.dsn, "any", create_slot="true")
    r._phases.checked = True  # no slot needed for this
    with pytest.raises(SourceError) as info:
        r._phases.run(lambda conn: conn.execute("SELECT pg_terminate_backend(pg_backend_pid())"))
    assert info.value.sqlstate == "57P01" and info.value.transient
    assert "terminating connection due to administrator command" in str(info.value)
    shipped = pickle.loads(pickle.dumps(info.value))  # as an executor's error reaches the driver
    assert (shipped.sqlstate, shipped.transient, str(shipped)) == ("57P01", True, str(info.value))
