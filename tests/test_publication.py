"""The publications pg_cdc creates never make the owner's writes fail, and follow the tables.

The reader's methods are called directly, as Spark's driver and executors do, against the real
Postgres: ``initialOffset`` starts a query, ``latestOffset`` plans a batch (and re-syncs the
publications), ``read`` peeks a batch.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
import pytest

from connector_common.lsn import format_lsn, parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import peeking, publication, slots
from postgres_cdc_source.replication.publication import MARKER, all_name
from postgres_cdc_source.stream.reader import PgCdcStreamReader

pytestmark = pytest.mark.services


def reader(pg: LocalPostgres, slot: str, **extra: str) -> PgCdcStreamReader:
    return PgCdcStreamReader(CdcOptions.from_options({"dsn": pg.dsn, "slot": slot, **extra}))


Seen = list[tuple[str, str, object]]


def batch(r: PgCdcStreamReader, start: int) -> tuple[int, list[dict[str, Any]]]:
    """Plan a batch from ``start`` (re-syncing the publications) and read its partitions, as
    Spark does: (end, rows)."""
    begin = {"lsn": format_lsn(start)}
    end = r.latestOffset(begin, ReadAllAvailable())
    return parse_lsn(end["lsn"]), [
        row for part in r.partitions(begin, end) for batch in r.read(part)
        for row in batch.to_pylist()
    ]


def changes(r: PgCdcStreamReader, start: int) -> tuple[int, Seen]:
    """:func:`batch`'s rows as (table, op, the new row or else the key)."""
    end, rows = batch(r, start)
    return end, [
        (row["table"], row["op"], json.loads(row["after"] or row["key"] or "null")) for row in rows
    ]


def members(pg: LocalPostgres, publication: str) -> set[str]:
    with pg.connect() as conn:
        return {
            t for (t,) in conn.execute(
                "SELECT tablename FROM pg_publication_tables WHERE pubname = %s", (publication,)
            ).fetchall()
        }


def test_the_owners_updates_and_deletes_on_a_table_without_a_key_still_succeed(
    pg: LocalPostgres, name: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_nokey (v int)")
        conn.execute(f"CREATE TABLE {name}_pk (id int PRIMARY KEY, v int)")
    r = reader(pg, name)  # pgoutput, no include_tables: every table is captured
    start = parse_lsn(r.initialOffset()["lsn"])
    with pg.connect() as conn:  # the owner's application, after pg_cdc started
        conn.execute(f"INSERT INTO {name}_nokey VALUES (1), (2)")
        conn.execute(f"UPDATE {name}_nokey SET v = 3 WHERE v = 1")
        conn.execute(f"DELETE FROM {name}_nokey WHERE v = 2")
        conn.execute(f"INSERT INTO {name}_pk VALUES (1, 1)")
        conn.execute(f"UPDATE {name}_pk SET v = 2")
        conn.execute(f"DELETE FROM {name}_pk")
        conn.execute(f"TRUNCATE {name}_nokey")
    _, seen = changes(r, start)
    assert seen == [
        (f"{name}_nokey", "insert", {"v": 1}),
        (f"{name}_nokey", "insert", {"v": 2}),
        (f"{name}_pk", "insert", {"id": 1, "v": 1}),
        (f"{name}_pk", "update", {"id": 1, "v": 2}),
        (f"{name}_pk", "delete", {"id": 1}),
        (f"{name}_nokey", "truncate", None),
    ]


def test_tables_created_later_are_captured_and_move_when_their_identity_changes(
    pg: LocalPostgres, name: str
) -> None:
    r = reader(pg, name, include_tables=rf"public\.{name}_.*")
    start = parse_lsn(r.initialOffset()["lsn"])
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_later (id int NOT NULL)")
        conn.execute(f"CREATE TABLE other_{name} (id int)")  # does not match
    start, _ = changes(r, start)  # in the pair since its creation (the guard), kept by planning
    assert members(pg, name) == set() and members(pg, f"{name}_inserts") == {f"{name}_later"}
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name}_later VALUES (1)")
        conn.execute(f"ALTER TABLE {name}_later ADD PRIMARY KEY (id)")
    start, seen = changes(r, start)
    assert seen == [(f"{name}_later", "insert", {"id": 1})]
    assert members(pg, name) == {f"{name}_later"} and members(pg, f"{name}_inserts") == set()
    with pg.connect() as conn:
        conn.execute(f"UPDATE {name}_later SET id = 2")
        conn.execute(f"ALTER TABLE {name}_later DROP CONSTRAINT {name}_later_pkey")
    start, seen = changes(r, start)
    assert seen == [(f"{name}_later", "update", {"id": 2})]
    assert members(pg, name) == set() and members(pg, f"{name}_inserts") == {f"{name}_later"}
    with pg.connect() as conn:  # moved back: the owner's updates work again
        conn.execute(f"UPDATE {name}_later SET id = 3")
        conn.execute(f"INSERT INTO {name}_later VALUES (4)")
    _, seen = changes(r, start)
    assert seen == [(f"{name}_later", "insert", {"id": 4})]


def test_a_publication_pg_cdc_did_not_create_is_left_alone(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_a (v int)")
        conn.execute(f"CREATE TABLE {name}_b (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}_a")
    r = reader(pg, name, publication=name)
    with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
        start = parse_lsn(r.initialOffset()["lsn"])
    assert f"public.{name}_a" in caplog.text and "without a replica identity" in caplog.text
    changes(r, start)
    assert members(pg, name) == {f"{name}_a"}
    with pg.connect() as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_publication WHERE pubname = %s", (f"{name}_inserts",)
        ).fetchone() == (0,)


def test_the_owners_update_after_replica_identity_nothing_succeeds_while_the_stream_runs(
    pg: LocalPostgres, name: str
) -> None:
    """The guard moves a table inside the DDL that changes its identity: the owner's next UPDATE
    never meets a publication that publishes updates of a table without identity, and a table
    that gains a key has its updates and deletes sent from that statement on."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_pk (id int PRIMARY KEY, v int)")
        conn.execute(f"CREATE TABLE {name}_gains (id int NOT NULL, v int)")
        conn.execute(f"INSERT INTO {name}_pk VALUES (1, 1)")
        conn.execute(f"INSERT INTO {name}_gains VALUES (1, 1)")
    r = reader(pg, name, include_tables=rf"public\.{name}_.*")
    start = parse_lsn(r.initialOffset()["lsn"])
    assert members(pg, name) == {f"{name}_pk"}
    with pg.connect() as conn:  # no planning in between: the stream's batch is still open
        conn.execute(f"ALTER TABLE {name}_pk REPLICA IDENTITY NOTHING")
        conn.execute(f"UPDATE {name}_pk SET v = 2")  # refused without the guard
        conn.execute(f"ALTER TABLE {name}_gains ADD PRIMARY KEY (id)")
        conn.execute(f"UPDATE {name}_gains SET v = 2")
        conn.execute(f"DELETE FROM {name}_gains")
    assert members(pg, name) == {f"{name}_gains"}
    assert members(pg, f"{name}_inserts") == {f"{name}_pk"}
    _, seen = changes(r, start)
    assert seen == [
        (f"{name}_gains", "update", {"id": 1, "v": 2}),
        (f"{name}_gains", "delete", {"id": 1}),
    ]


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_rows_of_tables_created_between_two_plannings_all_arrive(
    pg: LocalPostgres, name: str, plugin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A migration that creates a table and fills it in one transaction, and one that drops a
    table and creates it again with other columns, lose nothing before a planning adds them."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_old (id int PRIMARY KEY, v text)")
    r = reader(pg, name, plugin=plugin, include_tables=rf"public\.{name}_.*")
    with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
        start = parse_lsn(r.initialOffset()["lsn"])
    assert caplog.text == ""  # a new slot and a superuser: nothing to warn about
    with pg.connect() as conn:
        with conn.transaction():
            conn.execute(f"CREATE TABLE {name}_new (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {name}_new VALUES (1, 'a'), (2, 'b'), (3, 'c')")
            conn.execute(f"UPDATE {name}_new SET v = 'B' WHERE id = 2")
            conn.execute(f"DELETE FROM {name}_new WHERE id = 3")
        conn.execute(f"INSERT INTO {name}_old VALUES (1, 'x')")
        with conn.transaction():
            conn.execute(f"DROP TABLE {name}_old")
            conn.execute(f"CREATE TABLE {name}_old (k text PRIMARY KEY, n int)")
            conn.execute(f"INSERT INTO {name}_old VALUES ('y', 2)")
        conn.execute(f"INSERT INTO {name}_old VALUES ('z', 3)")
        conn.execute(f"CREATE TABLE {name}_copy AS SELECT 7 AS n")  # written as it is created
        conn.execute(f"CREATE TABLE other_{name} (id int)")  # not captured
        conn.execute(f"INSERT INTO other_{name} VALUES (1)")
    _, seen = changes(r, start)
    assert seen == [
        (f"{name}_new", "insert", {"id": 1, "v": "a"}),
        (f"{name}_new", "insert", {"id": 2, "v": "b"}),
        (f"{name}_new", "insert", {"id": 3, "v": "c"}),
        (f"{name}_new", "update", {"id": 2, "v": "B"}),
        (f"{name}_new", "delete", {"id": 3}),
        (f"{name}_old", "insert", {"id": 1, "v": "x"}),
        (f"{name}_old", "insert", {"k": "y", "n": 2}),
        (f"{name}_old", "insert", {"k": "z", "n": 3}),
        # pgoutput never sends rows a CREATE TABLE AS wrote: the event trigger asks for them,
        # and they arrive as a backfill's rows
        (f"{name}_copy", "insert" if plugin == "test_decoding" else "read", {"n": 7}),
    ]


def test_a_slot_older_than_the_all_tables_publication_peeks_it_once_its_restart_point_passes(
    pg: LocalPostgres, name: str
) -> None:
    """An upgrade: the managed pair and the slot exist (an earlier version made them), then
    ``<publication>_all`` is created. Before Postgres 18, pgoutput fails a peek that decodes a
    change older than one of its publications, so the slot must not peek with it until its
    restart point is past it, and then must."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_a (id int PRIMARY KEY)")
        for pub, publish in ((name, "insert, update, delete, truncate"),
                             (f"{name}_inserts", "insert, truncate")):
            conn.execute(f"CREATE PUBLICATION {pub} WITH (publish = '{publish}')")
            conn.execute(f"COMMENT ON PUBLICATION {pub} IS '{MARKER}'")
        conn.execute(f"ALTER PUBLICATION {name} ADD TABLE {name}_a")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
        conn.execute(f"INSERT INTO {name}_a VALUES (1)")  # older than <publication>_all
    r = reader(pg, name, include_tables=rf"public\.{name}_.*", all_tables_publication="true")
    start = parse_lsn(r.initialOffset()["lsn"])  # creates <publication>_all
    rounds = []
    for n in range(2, 6):
        with pg.connect() as conn:
            conn.execute(f"INSERT INTO {name}_a VALUES ({n})")
            conn.execute("CHECKPOINT")  # logs the running transactions: a restart point
            rounds.append(all_name(name) in peeking.publications(conn, r.options, start))
        start, seen = changes(r, start)
        assert seen[-1] == (f"{name}_a", "insert", {"id": n})
        r.commit({"lsn": format_lsn(start)})
    assert rounds[0] == (pg.version >= 18)  # at once from 18 on, which skips it when too new
    assert rounds[-1]


def test_a_role_that_may_not_create_them_is_told_the_window_and_the_grant(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Without superuser rights there is no event trigger: the stream runs on the managed pair,
    and the warning at start names what is not captured and the fixes."""
    with pg.connect() as conn:
        conn.execute(f"CREATE DATABASE {name}")  # no guard from other tests in it
        conn.execute(f"CREATE ROLE {name} LOGIN REPLICATION")
        conn.execute(f"GRANT CREATE ON DATABASE {name} TO {name}")
    with psycopg.connect(f"{pg.dsn} dbname={name}", autocommit=True) as conn:
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {name}")
    dsn = f"host=127.0.0.1 port={pg.port} dbname={name} user={name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE public.{name}_t (id int PRIMARY KEY)")
    try:
        r = PgCdcStreamReader(CdcOptions.from_options({"dsn": dsn, "slot": name}))
        with caplog.at_level(logging.WARNING, logger="postgres_cdc_source"):
            start = parse_lsn(r.initialOffset()["lsn"])
        assert "cannot create event trigger pg_cdc_identity_guard" in caplog.text
        assert f'ALTER PUBLICATION "{name}" ADD TABLE <table>, or "{name}_inserts"' in caplog.text
        assert f"{name}_all" not in caplog.text
        # the window closed by hand, as the warning says
        with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
            conn.execute(f"CREATE TABLE {name}_new (v int)")
            conn.execute(f"ALTER PUBLICATION {name}_inserts ADD TABLE {name}_new")
            conn.execute(f"INSERT INTO {name}_new VALUES (5)")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"INSERT INTO {name}_t VALUES (1)")
        _, seen = changes(r, start)
        assert seen == [(f"{name}_new", "insert", {"v": 5}), (f"{name}_t", "insert", {"id": 1})]
    finally:
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                         " WHERE slot_name = %s", (name,))
            conn.execute(f"DROP DATABASE {name} (FORCE)")
            conn.execute(f"DROP ROLE {name}")


@pytest.mark.pg_versions(15)  # 18 reads it in every batch: pgoutput skips it for older changes
def test_batches_read_the_all_tables_publication_only_after_the_position_recorded_at_admission(
    pg: LocalPostgres, name: str
) -> None:
    """A batch is read with the same publications however often it is replayed: an existing
    slot admits ``<publication>_all`` only for batches starting after its position when
    admitted, since a batch starting there may already have been read without it."""
    r = reader(pg, name, all_tables_publication="true")
    r.initialOffset()
    with pg.connect() as conn:
        state = slots.slot_state(conn, name)
        assert state is not None
        at = state.confirmed_flush
        # as if created before the slot's restart point and not admitted yet
        conn.execute(f"COMMENT ON PUBLICATION {name}_all IS '{MARKER}; created before LSN 0/1'")
        assert all_name(name) not in peeking.publications(conn, r.options, at + 1)
        publication.admit(conn, r.options)
        assert all_name(name) not in peeking.publications(conn, r.options, at)
        assert all_name(name) in peeking.publications(conn, r.options, at + 1)


def test_the_guard_never_fails_the_owners_statement(pg: LocalPostgres, name: str) -> None:
    """A pair the guard cannot alter (here: a broken one, whose ``_inserts`` is FOR ALL TABLES)
    gives the owner a warning, never an error, and the other pairs are still served."""
    r = reader(pg, name, include_tables=rf"public\.{name}_.*")
    r.initialOffset()  # a working pair, and the guard
    broken = f"{name}_b"
    with pg.connect() as conn:
        conn.execute(f"CREATE PUBLICATION {broken}")
        conn.execute(f"CREATE PUBLICATION {broken}_inserts FOR ALL TABLES")
        for pub in (broken, f"{broken}_inserts"):
            conn.execute(f"COMMENT ON PUBLICATION {pub} IS '{MARKER}'")
    notices: list[str] = []
    try:
        with pg.connect() as conn:
            conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
            conn.execute(f"CREATE TABLE {name}_nokey (v int)")  # added to both _inserts
            conn.execute(f"INSERT INTO {name}_nokey VALUES (1)")
        assert any(f"publication {broken}:" in n and "FOR ALL TABLES" in n for n in notices)
        assert members(pg, f"{name}_inserts") == {f"{name}_nokey"}
    finally:
        with pg.connect() as conn:
            conn.execute(f"DROP PUBLICATION {broken}, {broken}_inserts")
