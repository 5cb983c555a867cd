"""mode=polling against the real Postgres, without Spark: the checks at load(), the row JSON
against the decoders', updated rows under the destructive step, a server without logical WAL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.errors import ConfigError, SourceError
from postgres_cdc_source.options import CdcOptions, PollingOptions
from postgres_cdc_source.polling.reader import PgPollingStreamReader
from postgres_cdc_source.polling.table import inspect
from postgres_cdc_source.source import PgCdcDataSource
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

pytestmark = pytest.mark.services


def polling(dsn: str, table: str, **extra: str) -> dict[str, str]:
    return {"dsn": dsn, "mode": "polling", "table": table, "tracking_column": "ts", **extra}


def read_batch(reader: PgPollingStreamReader, start: dict[str, Any]) -> tuple[
    dict[str, Any], list[dict[str, Any]]
]:
    """Plan and read one batch the way Spark does; ``(end, rows)``."""
    end = reader.latestOffset(start, ReadAllAvailable())
    rows = [
        row
        for partition in reader.partitions(start, end)
        for batch in reader.read(partition)
        for row in batch.to_pylist()
    ]
    return end, rows


@pytest.mark.parametrize(
    ("ddl", "extra", "option", "message"),
    [
        ("(id serial PRIMARY KEY, ts int)", {"table": "no_such_table"}, "table", "does not exist"),
        ("(id serial PRIMARY KEY, ts int)", {"table": "a.b.c.d"}, "table",
         "option 'table': bad value"),
        ("(id serial PRIMARY KEY, other int)", {}, "tracking_column", "has no column 'ts'"),
        ("(id serial PRIMARY KEY, ts json)", {}, "tracking_column", "cannot be ordered"),
        ("(id serial PRIMARY KEY, ts point)", {}, "tracking_column", "cannot be ordered"),
        ("(id serial PRIMARY KEY, ts int, done int)", {"processed_column": "done"},
         "processed_column", "non-boolean column 'done'"),
        ("(id serial PRIMARY KEY, ts int)", {"processed_column": "done"},
         "processed_column", "no column 'done'"),
        ("(id int, ts int)", {"delete_after_read": "true"}, "delete_after_read", "needs a key"),
    ],
)
def test_bad_tables_and_columns_are_refused_at_load_naming_the_option(
    pg: LocalPostgres, name: str, ddl: str, extra: dict[str, str], option: str, message: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} {ddl}")
        conn.execute(f"INSERT INTO {name} DEFAULT VALUES")
    with pytest.raises(ConfigError, match=message) as err:
        PgCdcDataSource({**polling(pg.dsn, name), **extra}).schema()
    assert err.value.option == option
    with pg.connect() as conn:  # nothing moved
        assert conn.execute(f"SELECT count(*) FROM {name}").fetchone() == (1,)


# (column, value of row 1, value of row 2); the last three have no SQL rendering (sql_json), so
# without them the JSON is built by Postgres, with them in Python
_COLUMNS = [
    ("id int", "1", "2"), ("sub text", "'x''y'", "'é'"), ('"p%s" text', "'%'", "NULL"),
    ("ts timestamptz", "'2024-01-02 03:04:05.5+02'", "'infinity'"), ("b boolean", "true", "NULL"),
    ("c char(5)", "'ab'", "NULL"), ("ip inet", "'10.0.0.1'", "'::1/128'"),
    ("j jsonb", "'{\"k\": [1, 2.50]}'", "'null'"), ("u uuid", "gen_random_uuid()", "NULL"),
    ("iv interval", "'1 day 2 hours'", "NULL"), ("f float8", "1.5", "'NaN'"),
    ("a int[]", "'{1,NULL}'", "'{}'"), ("bin bytea", "'\\x00ff'", "''"),
]


@pytest.mark.parametrize(("plugin", "in_sql"), [
    ("pgoutput", True), ("test_decoding", True), ("pgoutput", False), ("test_decoding", False)])
def test_a_read_row_is_the_decoders_insert_of_the_same_row(
    pg: LocalPostgres, name: str, plugin: str, in_sql: bool
) -> None:
    slot = f"{name}_{plugin}"
    cdc_options = {"dsn": pg.dsn, "slot": slot, "plugin": plugin, "topic_from": "table",
                   "partition_key_from": "key"}
    cdc = PgCdcStreamReader(CdcOptions.from_options(cdc_options))
    columns = _COLUMNS[:-3] if in_sql else _COLUMNS
    with pg.connect() as conn:
        conn.execute(
            f"CREATE TABLE {name} (n numeric, {', '.join(c for c, _, _ in columns)},"
            " g int GENERATED ALWAYS AS (id * 2) STORED, PRIMARY KEY (id, sub))"
        )
        conn.execute(f"ALTER TABLE {name} DROP COLUMN n")  # dropped columns are skipped
        table = inspect(conn, PollingOptions(name, "id", None, False, None))
        assert (table.json_columns() is not None) is in_sql
        start = cdc.initialOffset()
        names = ", ".join(c.split()[0] for c, _, _ in columns)
        conn.execute(
            f"INSERT INTO {name} ({names}) VALUES ({', '.join(v for _, v, _ in columns)}),"
            f" ({', '.join(v for _, _, v in columns)})"
        )
    end = cdc.latestOffset(start, ReadAllAvailable())
    decoded = [r for b in cdc.read(CdcPartition(*(_lsn(o) for o in (start, end))))
               for r in b.to_pylist()]
    polled = read_batch(PgPollingStreamReader(CdcOptions.from_options(
        polling(pg.dsn, name, tracking_column="id", topic_from="table",
                partition_key_from="key"))), {"frontier": 0, "tracking": None})[1]
    with pg.connect() as conn:  # a publication FOR ALL TABLES would bother later tests
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        conn.execute(f"DROP PUBLICATION IF EXISTS {slot}")

    assert [r["op"] for r in decoded] == ["insert", "insert"]
    assert [r["op"] for r in polled] == ["read", "read"]
    for field in ("schema", "table", "key", "after", "xid", "topic", "partition_key"):
        assert [r[field] for r in polled] == [r[field] for r in decoded], field
    assert json.loads(polled[0]["key"]) == {"id": 1, "sub": "x'y"}
    assert [r["id"] for r in polled] == [f"{r['xid']}:{r['key']}" for r in polled]


def _lsn(offset: dict[str, str]) -> int:
    from connector_common.lsn import parse_lsn

    return parse_lsn(offset["lsn"])


@pytest.mark.parametrize("floats", [False, True])  # the JSON built by Python either way
def test_routes_by_a_row_column_read_the_rows_values(
    pg: LocalPostgres, name: str, floats: bool
) -> None:
    extra = ", f float8" if floats else ""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, ts int, kind text, n int{extra})")
        conn.execute(f"INSERT INTO {name} (id, ts, kind, n) VALUES (1, 1, 'order', 7),"
                     " (2, 2, 'refund', NULL), (3, 3, NULL, 9)")
    reader = PgPollingStreamReader(CdcOptions.from_options(polling(
        pg.dsn, name, stream_from="kind", topic_from="n", partition_key_from="id",
        default_stream="misc", default_topic="none")))
    _, rows = read_batch(reader, reader.initialOffset())
    assert [(r["stream"], r["topic"], r["partition_key"]) for r in rows] == [
        ("order", "7", "1"), ("refund", "none", "2"), ("misc", "9", "3")]


def test_a_row_updated_after_it_was_read_is_not_deleted_unseen(
    pg: LocalPostgres, name: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, ts int, note text)")
        conn.execute(f"INSERT INTO {name} SELECT g, g, 'v1' FROM generate_series(1, 3) g")
    reader = PgPollingStreamReader(CdcOptions.from_options(
        polling(pg.dsn, name, delete_after_read="true")))
    end, rows = read_batch(reader, reader.initialOffset())
    assert [json.loads(r["after"])["note"] for r in rows] == ["v1"] * 3
    with pg.connect() as conn:  # after the read, before Spark's commit
        conn.execute(f"UPDATE {name} SET note = 'v2' WHERE id = 2")
    reader.commit(end)
    with pg.connect() as conn:
        assert conn.execute(f"SELECT id, note FROM {name}").fetchall() == [(2, "v2")]
    end2, rows2 = read_batch(reader, end)  # the update is a late row of the next batch
    assert [(json.loads(r["after"])["id"], json.loads(r["after"])["note"]) for r in rows2] == [
        (2, "v2")
    ]
    assert rows2[0]["id"] != rows[1]["id"]  # a new version, a new message id
    reader.commit(end2)
    with pg.connect() as conn:
        assert conn.execute(f"SELECT count(*) FROM {name}").fetchone() == (0,)


def test_polling_needs_no_logical_decoding() -> None:
    with LocalPostgres(settings={"wal_level": "minimal", "max_wal_senders": "0"}) as server:
        with server.connect() as conn:
            conn.execute("CREATE TABLE events (id int PRIMARY KEY, ts int)")
            conn.execute("INSERT INTO events SELECT g, g FROM generate_series(1, 5) g")
        options = polling(server.dsn, "events", delete_after_read="true")
        PgCdcDataSource(options).schema()
        reader = PgPollingStreamReader(CdcOptions.from_options(options))
        end, rows = read_batch(reader, reader.initialOffset())
        assert [json.loads(r["key"])["id"] for r in rows] == [1, 2, 3, 4, 5]
        reader.commit(end)
        with server.connect() as conn:
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (0,)
            assert conn.execute("SHOW wal_level").fetchone() == ("minimal",)


def test_a_table_without_a_key_is_read_with_ids_from_the_row_place(
    pg: LocalPostgres, name: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (ts int, v text)")
        conn.execute(f"INSERT INTO {name} VALUES (1, 'same'), (1, 'same'), (NULL, 'never')")
    reader = PgPollingStreamReader(CdcOptions.from_options(polling(pg.dsn, name)))
    _, rows = read_batch(reader, reader.initialOffset())
    assert [(r["key"], r["after"]) for r in rows] == [(None, '{"ts":1,"v":"same"}')] * 2
    assert len({r["id"] for r in rows}) == 2  # identical rows, distinct ids: (0,1) and (0,2)
    assert all(r["id"].endswith(")") for r in rows)


def test_a_role_without_delete_privilege_is_refused_at_load(pg: LocalPostgres, name: str) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, ts int)")
        conn.execute(f"CREATE ROLE {name} LOGIN")
        conn.execute(f"GRANT SELECT ON {name} TO {name}")
    dsn = pg.dsn.replace("user=postgres", f"user={name}")
    PgCdcDataSource(polling(dsn, name)).schema()  # reading alone is allowed
    with pytest.raises(ConfigError, match=f"role '{name}' lacks DELETE") as err:
        PgCdcDataSource(polling(dsn, name, delete_after_read="true")).schema()
    assert err.value.option == "delete_after_read"


def test_a_session_ended_mid_read_fails_transient_and_keeps_its_cause(
    pg: LocalPostgres, name: str
) -> None:
    """Rows may leave a polled range between two selects, so a read that lost its session after
    giving rows cannot skip what it gave: it fails, transient, with the server's code (a
    cluster's task retry reads it whole again)."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, ts int)")
        conn.execute(f"INSERT INTO {name} SELECT g, g FROM generate_series(1, 300) g")
    reader = PgPollingStreamReader(
        CdcOptions.from_options(polling(pg.dsn, name, batch_rows="50", fetch_rows="50"))
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    (partition,) = reader.partitions(start, end)
    batches = reader.read(partition)
    assert next(batches).num_rows == 50
    assert pg.end_reads() == 1
    with pytest.raises(SourceError) as info:
        list(batches)
    assert info.value.transient and info.value.sqlstate in ("57P01", None)
    assert "after 50 rows of the partition" in str(info.value)
    assert [len(b) for b in reader.read(partition)] == [50] * 6  # and a new read is whole
