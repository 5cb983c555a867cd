"""``row_format=struct`` against the catalog: the structs of the tables the include rules cover,
tables of other shapes refused by ``load()``'s ``ConfigError``, the planning's check that a
captured table still has the columns (and the rules the tables) the query started with, and
``schema_evolution`` through each kind of ``ALTER TABLE`` with both decoders: where the batch
ends, what a restart on the checkpoint does, the structs ``add_columns`` evolves and keeps in
``schema_location``, and the changes typed with them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg import sql

from connector_common.lsn import parse_lsn
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.s3 import SeaweedS3
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.connections import connect_with_retry
from postgres_cdc_source.decoding.changes import Change, Event
from postgres_cdc_source.decoding.factory import make_decoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import ConfigError, SchemaChangedError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import peeking
from postgres_cdc_source.rows.struct.catalog import evolve_kept, struct_rows
from postgres_cdc_source.rows.struct.structs import StructRows, checkpoint_difference
from postgres_cdc_source.stream.schema_watch import catalog_changed, typed_end

pytestmark = pytest.mark.services


@pytest.fixture
def schema(pg: LocalPostgres) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    name = "rf_" + uuid.uuid4().hex[:10]
    with pg.connect() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        for table in ("a", "b"):
            conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, amount numeric(10,2))")
                         .format(sql.Identifier(name, table)))
        yield conn, name
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def _options(schema: str) -> CdcOptions:
    return CdcOptions.from_options({"dsn": "dbname=x", "slot": "s", "row_format": "struct",
                                    "include_tables": re.escape(schema) + r"\..*"})


def test_the_covered_tables_share_a_struct_and_changes_are_seen(
    schema: tuple[psycopg.Connection[Any], str],
) -> None:
    conn, name = schema
    options = _options(name)
    typed = struct_rows(conn, options.keeps)
    assert sorted(typed.tables) == [f"{name}.a", f"{name}.b"]
    assert typed.row.simpleString() == "struct<id:bigint,amount:decimal(10,2)>"
    assert not catalog_changed(conn, options, typed)
    conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, amount numeric(10,2))")
                 .format(sql.Identifier(name, "c")))
    assert catalog_changed(conn, options, typed)  # a table the rules cover now
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name, "c")))
    assert not catalog_changed(conn, options, typed)
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN note text").format(sql.Identifier(name, "b")))
    assert catalog_changed(conn, options, typed)


def test_tables_of_other_shapes_are_refused_naming_them(
    schema: tuple[psycopg.Connection[Any], str],
) -> None:
    conn, name = schema
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN note text").format(sql.Identifier(name, "b")))
    with pytest.raises(ConfigError, match=(
            f"option 'row_format': struct: row_format=struct needs tables of one shape, but "
            f"{name}.a and {name}.b differ: the second has more columns: 'note'")):
        struct_rows(conn, _options(name).keeps)


class Ddl(NamedTuple):
    """An ``ALTER TABLE`` of ``t (id int PRIMARY KEY, note text, amount int)`` between two
    inserts, and what each mode makes of it."""

    alter: str
    insert: str  # the insert after it
    running: str  # SchemaChangedError's difference for the insert after it (fail)
    running_add: str | None  # the same with add_columns (None: typed)
    restart: str  # the difference a restart on the checkpoint names (fail)
    union: str | None  # the row struct add_columns evolves (None: refused)
    later: dict[str, Any]  # the insert after it, typed with that struct
    unread: str | None  # a new checkpoint's add_columns on the insert before it (None: typed)


DDLS = {
    "add": Ddl("ADD COLUMN extra int", "(id, note, amount, extra) VALUES (2, 'b', 6, 7)",
               "column added: 'extra'", "column added: 'extra'", "columns added: 'extra'",
               "struct<id:int,note:string,amount:int,extra:int>",
               {"id": 2, "note": "b", "amount": 6, "extra": 7}, None),
    "drop": Ddl("DROP COLUMN note", "(id, amount) VALUES (2, 6)", "column dropped: 'note'",
                None, "columns dropped: 'note'", "struct<id:int,note:string,amount:int>",
                {"id": 2, "note": None, "amount": 6},
                "column 'note' not in the struct, before columns that are: this change was "
                "written before an ALTER TABLE dropped or renamed it"),
    "rename": Ddl("RENAME COLUMN note TO remark", "(id, remark, amount) VALUES (2, 'b', 6)",
                  "column renamed: 'note' to 'remark'", "column renamed: 'note' to 'remark'",
                  "column renamed: 'note' to 'remark'",
                  "struct<id:int,note:string,amount:int,remark:string>",
                  {"id": 2, "note": None, "amount": 6, "remark": "b"},
                  "column renamed: 'remark' to 'note'"),
    "widen": Ddl("ALTER COLUMN amount TYPE bigint", "VALUES (2, 'b', 6)",
                 "column 'amount' type changed from integer to bigint",
                 "column 'amount' type changed from integer to bigint",
                 "type changed: 'amount' (integer (int) in the checkpoint, bigint (bigint) now)",
                 "struct<id:int,note:string,amount:bigint>",
                 {"id": 2, "note": "b", "amount": 6}, None),
    "narrow": Ddl("ALTER COLUMN amount TYPE smallint", "VALUES (2, 'b', 6)",
                  "column 'amount' type changed from integer to smallint", None,
                  "type changed: 'amount' (integer (int) in the checkpoint, smallint (smallint) "
                  "now)", None, {}, "column 'amount' type changed from smallint to integer"),
}


def _events(options: CdcOptions, typed: StructRows, start: int, end: int) -> list[Event]:
    """The events of ``(start, end]`` as the reader decodes them with ``typed``."""
    conn = connect_with_retry(options, autocommit=False)
    try:
        return list(make_decoder(options, conn, None, typed).events(
            peeking.peek_range(conn, options, start, end)))
    finally:
        conn.close()


def _changes(options: CdcOptions, typed: StructRows, start: int, end: int) -> list[Change]:
    return [e for e in _events(options, typed, start, end) if isinstance(e, Change)]


@pytest.mark.contrib  # both decoders: test_decoding too
@pytest.mark.parametrize("kind", DDLS)
def test_each_kind_of_alter_table_with_fail_and_with_add_columns_through_both_decoders(
    pg: LocalPostgres, schema: tuple[psycopg.Connection[Any], str], kind: str, tmp_path: Path,
) -> None:
    conn, name = schema
    ddl = DDLS[kind]
    table = sql.Identifier(name, "t")
    conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, note text, amount int)")
                 .format(table))
    conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(name),
                                                                      table))
    given = {"dsn": pg.dsn, "row_format": "struct", "include_tables": re.escape(name) + r"\.t"}
    options = {"pgoutput": CdcOptions.from_options({**given, "slot": f"{name}_po",
                                                    "publication": name}),
               "test_decoding": CdcOptions.from_options({**given, "slot": f"{name}_td",
                                                         "plugin": "test_decoding"})}
    start = {plugin: _lsn(conn, "SELECT lsn::text FROM pg_create_logical_replication_slot"
                          f"('{opts.slot}', '{plugin}')") for plugin, opts in options.items()}
    kept = CdcOptions.from_options({**given, "slot": name, "schema_evolution": "add_columns",
                                    "schema_location": str(tmp_path)})
    typed = struct_rows(conn, kept.keeps)  # the structs the query started with (fail)
    adding = evolve_kept(kept, struct_rows(conn, kept.keeps, "add_columns"))  # load(), run 1
    try:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'a', 5)").format(table))
        conn.execute(sql.SQL("ALTER TABLE {} " + ddl.alter).format(table))
        conn.execute(sql.SQL("INSERT INTO {} " + ddl.insert).format(table))
        end = _lsn(conn, "SELECT pg_current_wal_lsn()::text")
        for plugin, opts in options.items():
            _check_plugin(name, opts, ddl, typed, adding, kept, (start[plugin], end), conn)
    finally:
        for opts in options.values():
            conn.execute("SELECT pg_drop_replication_slot(%s)", (opts.slot,))
        conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(name)))


def _lsn(conn: psycopg.Connection[Any], query: str) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    return parse_lsn(row[0])


def _check_plugin(name: str, options: CdcOptions, ddl: Ddl, typed: StructRows,
                  adding: StructRows, kept: CdcOptions, lsns: tuple[int, int],
                  conn: psycopg.Connection[Any]) -> None:
    """What ``ddl`` does through ``options.plugin``: ``typed`` and ``adding`` the structs the
    query started with under ``fail`` and ``add_columns``; ``lsns`` the slot's WAL range,
    read from its start first (the reader puts the slot at a batch's start: never back)."""
    start, end = lsns
    # fail: the batch ends after the change before the DDL; the next one fails naming it
    stop = typed_end(options, typed, start, end)
    assert start < stop < end
    (before,) = _changes(options, typed, start, stop)
    assert before.after == {"id": 1, "note": "a", "amount": 5}
    now = struct_rows(conn, options.keeps)
    assert ddl.restart in str(checkpoint_difference(typed.stamp(), now, "fail"))
    # add_columns, running: the change after the DDL is typed by name, or ends the batch
    assert typed_end(options, adding, start, end) == (end if ddl.running_add is None else stop)
    # add_columns, the restart: load() evolves the structs kept in schema_location
    if ddl.union is None:
        with pytest.raises(ConfigError, match=re.escape(
                f"option 'schema_evolution': add_columns: table {name}.t, column 'amount': "
                "integer (int) in the earlier structs cannot become smallint (smallint): ")
                + ".* start the query on a new checkpoint"):
            evolve_kept(kept, struct_rows(conn, kept.keeps, "add_columns"))
    else:
        union = evolve_kept(kept, struct_rows(conn, kept.keeps, "add_columns"))
        assert union.row.simpleString() == ddl.union
        assert checkpoint_difference(adding.stamp(), union, "add_columns") is None
        # every change, the one before the DDL too, typed with it; absent fields null
        events = _events(options, union, start, end)
        (batch,) = record_batches(transactions(iter(events), 100), Router(options), 100,
                                  union.schemas()[1])
        assert batch.column("after").to_pylist() == [
            {**dict.fromkeys(union.row.names), "id": 1, "note": "a", "amount": 5},
            {**dict.fromkeys(union.row.names), **ddl.later}]
    # a new checkpoint after a DDL it has not read: the older change with the columns now
    unread = struct_rows(conn, options.keeps, "add_columns")
    if ddl.unread is None:
        assert [c.after["id"] for c in _changes(options, unread, start, end)] == [1, 2]
    else:
        with pytest.raises(SchemaChangedError, match=re.escape(ddl.unread)):
            _changes(options, unread, start, end)
    # the batches after the stop: the change after the DDL fails them, naming it
    with pytest.raises(SchemaChangedError, match=re.escape(ddl.running)) as failed:
        typed_end(options, typed, stop, end)
    assert "with schema_evolution=add_columns it evolves the structs" in str(failed.value)
    if ddl.running_add is not None:
        with pytest.raises(SchemaChangedError, match=re.escape(ddl.running_add)):
            typed_end(options, adding, stop, end)


def test_the_structs_kept_in_an_object_store_give_a_restart_the_dropped_columns(
    schema: tuple[psycopg.Connection[Any], str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``schema_location`` on S3 (a real S3 server, through pyarrow as a user's driver would
    reach it, credentials from the environment): the structs written by the first ``load()``
    are read back by the next, which keeps the dropped column's field; a location pyarrow
    cannot open is a ConfigError naming the option, and a password in the URI is refused
    without being repeated."""
    conn, name = schema
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with SeaweedS3() as s3:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
        location = (s3.uri("checkpoints/q", scheme="s3") + f"?endpoint_override=127.0.0.1:"
                    f"{s3.port}&scheme=http&region=us-east-1")
        kept = CdcOptions.from_options({
            "dsn": "dbname=x", "slot": name, "row_format": "struct",
            "include_tables": re.escape(name) + r"\.a", "schema_evolution": "add_columns",
            "schema_location": location})
        first = evolve_kept(kept, struct_rows(conn, kept.keeps, "add_columns"))
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN amount").format(
            sql.Identifier(name, "a")))
        again = evolve_kept(kept, struct_rows(conn, kept.keeps, "add_columns"))
        assert again.row.names == first.row.names == ["id", "amount"]  # kept, null from now
        assert s3.filesystem().get_file_info(  # type: ignore[attr-defined]
            f"{s3.bucket}/checkpoints/q/pg_cdc_structs_{name}.json").size > 0
    with pytest.raises(ConfigError, match="option 'schema_location': a URI with a user") as no:
        CdcOptions.from_options({"dsn": "dbname=x", "slot": name, "row_format": "struct",
                                 "schema_evolution": "add_columns",
                                 "schema_location": "s3://key:hunter2@bucket/x"})
    assert "hunter2" not in str(no.value)
    gone = CdcOptions.from_options({"dsn": "dbname=x", "slot": name, "row_format": "struct",
                                    "schema_evolution": "add_columns",
                                    "schema_location": "nosuch://host/x"})
    with pytest.raises(ConfigError, match="option 'schema_location': cannot open "
                                          "'nosuch://host/x'"):
        evolve_kept(gone, first)
