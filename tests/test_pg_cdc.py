"""pg_cdc end to end: real Spark streaming queries against a real Postgres.

Every query here is a ``trigger(availableNow=True)`` run that collects its micro-batches with
``foreachBatch``, so a test sees exactly the batches Spark committed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from support.streaming import rows_of, run_available_now

from connector_common.change_rows import SPARK_SCHEMA
from connector_common.lsn import format_lsn, parse_lsn
from connector_common.spark_versions import READ_LIMITS
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

PLUGINS = ["pgoutput", "test_decoding"]


def slot_position(pg: LocalPostgres, slot: str) -> int:
    with pg.connect() as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    assert row is not None
    return parse_lsn(row[0])


def batch_ends(checkpoint: str) -> list[int]:
    """The end LSN of every batch Spark planned, in order, from the checkpoint's offset log."""
    offsets = sorted((p for p in (Path(checkpoint) / "offsets").iterdir() if p.name.isdigit()),
                     key=lambda p: int(p.name))
    return [parse_lsn(json.loads(p.read_text().splitlines()[-1])["lsn"]) for p in offsets]


def last_batch_end(checkpoint: str) -> int:
    """The end LSN of the last batch Spark planned."""
    return batch_ends(checkpoint)[-1]


def make_slot(
    pg: LocalPostgres, slot: str, plugin: str = "pgoutput", **extra: str
) -> dict[str, str]:
    """Create the slot now (before the changes under test) and return the reader options."""
    options = {"dsn": pg.dsn, "slot": slot, "plugin": plugin, **extra}
    PgCdcStreamReader(CdcOptions.from_options(options)).initialOffset()
    return options


@pytest.mark.pg_versions(15, 18)  # both decoders through Spark on each tested version
def test_both_plugins_give_identical_rows_for_every_kind_of_change(
    spark: SparkSession, pg: LocalPostgres, name: str, tmp_path: Any
) -> None:
    """The same changes to a table of each replica identity, read by one query per plugin."""
    tables = {"DEFAULT": name, "FULL": f"{name}_full"}
    with pg.connect() as conn:
        for identity, table in tables.items():
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, note text, amount numeric)")
            conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY {identity}")
    options = {
        p: make_slot(pg, f"{name}_{p}", p, topic_from="table", partition_key_from="key")
        for p in PLUGINS
    }
    with pg.connect() as conn:
        for table in tables.values():
            conn.execute(f"INSERT INTO {table} VALUES (1, 'it''s', 1.50), (2, NULL, -3)")
            conn.execute(f"UPDATE {table} SET note = 'line\nbreak' WHERE id = 1")
            conn.execute(f"UPDATE {table} SET id = 20 WHERE id = 2")  # primary-key change
            conn.execute(f"DELETE FROM {table} WHERE id = 1")
            conn.execute(f"TRUNCATE {table}")
    got = {p: rows_of(run_available_now(spark, str(tmp_path / p), options[p])) for p in PLUGINS}

    assert {r.topic for r in got["pgoutput"]} == set(tables.values())
    assert all(r.stream is None for r in got["pgoutput"])
    for identity, table in tables.items():
        rows = [r for r in got["pgoutput"] if r.topic == table]
        assert [r.op for r in rows] == ["insert", "insert", "update", "update", "delete",
                                        "truncate"]
        assert json.loads(rows[0].after) == {"id": 1, "note": "it's", "amount": "1.50"}
        # inserts carry their key too, so routing by key sends every change of a row the same way
        assert json.loads(rows[0].key) == ({"id": 1} if identity == "DEFAULT" else
                                           json.loads(rows[0].after))
        assert json.loads(rows[2].after) == {"id": 1, "note": "line\nbreak", "amount": "1.50"}
        assert json.loads(rows[3].key) == (
            {"id": 2} if identity == "DEFAULT" else {"id": 2, "note": None, "amount": "-3"}
        )
        assert json.loads(rows[3].after)["id"] == 20
        if identity == "FULL":
            assert json.loads(rows[4].before) == {"id": 1, "note": "line\nbreak",
                                                  "amount": "1.50"}
        else:
            assert rows[4].before is None and json.loads(rows[4].key) == {"id": 1}
    rows = got["pgoutput"]
    assert [r.id for r in rows] == [f"{r.commit_lsn}:{r.seq}" for r in rows]
    commit_lsns = [parse_lsn(r.commit_lsn) for r in rows]
    assert commit_lsns == sorted(commit_lsns)
    assert_df_equality(
        spark.createDataFrame(got["pgoutput"], SPARK_SCHEMA),
        spark.createDataFrame(got["test_decoding"], SPARK_SCHEMA),
    )


def test_rollback_emits_nothing_and_interleaved_transactions_come_whole_in_commit_order(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, tx text)")
    options = make_slot(pg, name)
    with pg.connect() as a, pg.connect() as b, pg.connect() as r:
        r.execute("BEGIN")
        r.execute(f"INSERT INTO {name} VALUES (100, 'rolled back')")
        a.execute("BEGIN")
        a.execute(f"INSERT INTO {name} VALUES (1, 'A')")
        b.execute("BEGIN")  # B starts after A ...
        b.execute(f"INSERT INTO {name} VALUES (2, 'B')")
        a.execute(f"INSERT INTO {name} VALUES (3, 'A')")
        b.execute(f"INSERT INTO {name} VALUES (4, 'B')")
        b.execute("COMMIT")  # ... and commits first
        a.execute(f"INSERT INTO {name} VALUES (5, 'A')")
        a.execute("COMMIT")
        r.execute("ROLLBACK")
    rows = rows_of(run_available_now(spark, checkpoint, options))
    assert [(json.loads(r.after)["id"], r.seq) for r in rows] == [
        (2, 0),
        (4, 1),
        (1, 0),
        (3, 1),
        (5, 2),
    ]
    assert len({r.commit_lsn for r in rows[:2]}) == 1 and len({r.commit_lsn for r in rows[2:]}) == 1
    # position: the commit LSN as a number and seq; Spark orders the struct as the stream
    assert [(r.position.commit_lsn, r.position.seq) for r in rows] == [
        (parse_lsn(r.commit_lsn), r.seq) for r in rows]
    shuffled = spark.createDataFrame(rows[::-1], SPARK_SCHEMA)
    assert [r.id for r in shuffled.orderBy("position").collect()] == [r.id for r in rows]
    assert shuffled.selectExpr("max(position).seq AS seq").first().seq == 2


def _commit_record(pg: LocalPostgres, since: int, xid: int) -> tuple[int, int]:
    """Start and end LSN of transaction ``xid``'s commit record (pg_walinspect)."""
    with pg.connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        row = conn.execute(
            "SELECT start_lsn::text, end_lsn::text FROM pg_get_wal_records_info(%s::pg_lsn,"
            " pg_current_wal_flush_lsn()) WHERE record_type = 'COMMIT' AND xid::text = %s",
            (format_lsn(since), str(xid)),
        ).fetchone()
    assert row is not None
    return parse_lsn(row[0]), parse_lsn(row[1])


def _ids(reader: PgCdcStreamReader, start: int, end: int) -> list[int]:
    batches = list(reader.read(CdcPartition(start, end)))
    table = pa.Table.from_batches(batches) if batches else None
    return [json.loads(a)["id"] for a in table.column("after").to_pylist()] if table else []


@pytest.mark.contrib  # pg_walinspect
@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_batch_holds_exactly_the_transactions_whose_commit_starts_before_its_end(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """The LSN rule, at the exact boundary: a commit record starting at ``end`` is the next
    batch's; one starting just before ``end`` is this batch's, and advancing to ``end`` then
    hides it from every later read."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    reader = PgCdcStreamReader(
        CdcOptions.from_options({"dsn": pg.dsn, "slot": name, "plugin": plugin})
    )
    start = parse_lsn(reader.initialOffset()["lsn"])
    with pg.connect() as conn:
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {name} VALUES (1), (2)")
        xid = int(conn.execute("SELECT txid_current()").fetchone()[0])  # type: ignore[index]
        conn.execute("COMMIT")
        conn.execute(f"INSERT INTO {name} VALUES (3)")
    commit_start, commit_end = _commit_record(pg, start, xid)
    with pg.connect() as conn:
        flush = parse_lsn(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])  # type: ignore[index]

    assert _ids(reader, start, commit_start) == []  # commit starts at `end`: not this batch
    assert _ids(reader, start, commit_start + 1) == [1, 2]  # starts before `end`: this batch
    assert _ids(reader, start, commit_end) == [1, 2]  # a replay yields the same rows
    reader.commit({"lsn": format_lsn(commit_start + 1)})
    assert slot_position(pg, name) == commit_start + 1
    assert _ids(reader, commit_start + 1, flush) == [3]  # the next batch does not repeat it


def test_a_transaction_larger_than_the_byte_limit_arrives_whole_in_one_batch(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, pad text)")
    options = make_slot(pg, name, max_bytes_per_trigger="64KB", spill_rows="5000")
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} VALUES (0, 'before')")
        conn.execute(f"INSERT INTO {name} SELECT g, md5(g::text) FROM generate_series(1, 50000) g")
        conn.execute(f"INSERT INTO {name} VALUES (-1, 'after')")
    seen: list[tuple[int, int, int]] = []

    def count(df: DataFrame, batch_id: int) -> None:
        for r in df.groupBy("commit_lsn").count().collect():
            seen.append((batch_id, parse_lsn(r["commit_lsn"]), r["count"]))

    run_available_now(spark, checkpoint, options, on_batch=count, keep_rows=False)
    per_txn = sorted(seen, key=lambda s: s[1])
    assert [c for _, _, c in per_txn] == [1, 50000, 1]
    # whole, and in one batch: the 50,000 rows (megabytes, 64KB allowed) never split
    assert len([s for s in seen if s[2] == 50000]) == 1


@pytest.mark.oldest_spark
def test_available_now_runs_back_to_back_lose_and_repeat_nothing(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    options = make_slot(pg, name)
    ids: list[int] = []
    for run in range(3):
        with pg.connect() as conn:
            conn.execute(
                f"INSERT INTO {name} SELECT g FROM generate_series({run * 10}, {run * 10 + 9}) g"
            )
        batches = run_available_now(spark, checkpoint, options, drain=False)
        ids += [json.loads(r.after)["id"] for r in rows_of(batches)]
    assert ids == list(range(30))
    ends = batch_ends(checkpoint)
    if READ_LIMITS:
        # Spark plans once more after a run's last batch, finding nothing new: that planning
        # releases the batch, so the slot does not wait for the next run (or the next write)
        assert slot_position(pg, name) == ends[-1]
    else:
        # 4.0/4.1 run one batch and call nothing after it: the run's start released the last
        # run's batch, and its own waits for the next run
        assert slot_position(pg, name) == ends[-2] < ends[-1]


def test_a_failed_batch_is_replayed_identically_after_restart(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
        conn.execute(f"INSERT INTO {name} SELECT g FROM generate_series(1, 50) g")
    options = make_slot(pg, name)
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} SELECT g FROM generate_series(51, 100) g")
    before_crash = slot_position(pg, name)
    attempted: list[list[tuple[Any, ...]]] = []

    def crash(df: DataFrame, batch_id: int) -> None:
        attempted.append([tuple(r) for r in df.collect()])
        raise RuntimeError("injected crash before the batch commits")

    with pytest.raises(StreamingQueryException, match="RuntimeError: injected crash"):
        run_available_now(spark, checkpoint, options, on_batch=crash)
    assert slot_position(pg, name) == before_crash  # nothing was released
    replayed = run_available_now(spark, checkpoint, options)
    assert [tuple(r) for r in rows_of(replayed)] == attempted[0]
    assert [json.loads(r.after)["id"] for r in rows_of(replayed)] == list(range(51, 101))


def test_a_filtered_idle_table_still_releases_wal(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_wanted (id int PRIMARY KEY)")
        conn.execute(f"CREATE TABLE {name}_other (id int PRIMARY KEY)")
    options = make_slot(pg, name, include_tables=rf"public\.{name}_wanted")
    start = slot_position(pg, name)
    for run in range(2):
        with pg.connect() as conn:
            conn.execute(
                f"INSERT INTO {name}_other SELECT g FROM generate_series({run * 1000},"
                f" {run * 1000 + 999}) g"
            )
        assert rows_of(run_available_now(spark, checkpoint, options)) == []
    # the slot moved past the ignored writes, up to the end of the last batch Spark planned
    assert start < slot_position(pg, name) == last_batch_end(checkpoint)


def test_quoted_names_with_spaces_dots_quotes_and_upper_case(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    schema, table, column = f'My "Schema" {name}', "Tab.le X", 'Col "1"'
    with pg.connect() as conn:
        from psycopg import sql

        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, {} text)").format(
                sql.Identifier(schema, table), sql.Identifier(column)
            )
        )
    options = make_slot(pg, name, publication=f"Pub {name}", topic_from="table")
    with pg.connect() as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES (1, 'x')").format(sql.Identifier(schema, table))
        )
    [row] = rows_of(run_available_now(spark, checkpoint, options))
    assert (row.schema, row.table, row.topic) == (schema, table, table)
    assert json.loads(row.after) == {"id": 1, column: "x"}


def test_bad_options_fail_at_load_naming_the_option(spark: SparkSession, pg: LocalPostgres) -> None:
    with pytest.raises(
        AnalysisException,
        match=r"ConfigError: option 'slot': bad value: 'Bad-Name' \(Postgres allows",
    ):
        spark.readStream.format("pg_cdc").option("dsn", pg.dsn).option("slot", "Bad-Name").load()
    with pytest.raises(
        AnalysisException,
        match="ConfigError: option 'max_bytes_per_triger': unknown option for format pg_cdc; "
        "did you mean 'max_bytes_per_trigger'",
    ):
        (
            spark.readStream.format("pg_cdc")
            .option("dsn", pg.dsn)
            .option("slot", "ok")
            .option("max_bytes_per_triger", "1MB")
            .load()
        )


@pytest.mark.pg_versions(18)
def test_rows_of_a_table_created_and_filled_while_the_query_was_stopped_arrive(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    """A migration between two runs creates and fills a table, re-creates another with other
    columns, and copies one with ``CREATE TABLE AS``, while a busy uncaptured table takes most
    of the writes: every captured row arrives (the copied ones as a backfill's ``read`` rows,
    pgoutput never sends them), though no planning had added the tables yet, and no row of the
    busy table reaches Spark."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_old (id int PRIMARY KEY)")
        conn.execute(f"CREATE TABLE busy_{name} (id int)")
    options = make_slot(pg, name, include_tables=rf"public\.{name}_.*")
    run_available_now(spark, checkpoint, options)
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO busy_{name} SELECT generate_series(1, 5000)")
        conn.execute(f"CREATE TABLE {name}_copy AS SELECT generate_series(1, 3) AS n")
        with conn.transaction():
            conn.execute(f"CREATE TABLE {name}_new (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {name}_new VALUES (1, 'a')")
            conn.execute(f"UPDATE {name}_new SET v = 'b'")
        with conn.transaction():
            conn.execute(f"DROP TABLE {name}_old")
            conn.execute(f"CREATE TABLE {name}_old (k text PRIMARY KEY)")
            conn.execute(f"INSERT INTO {name}_old VALUES ('x')")
    rows = rows_of(run_available_now(spark, checkpoint, options))
    assert [(r.table, r.op, json.loads(r.after)) for r in rows] == [
        (f"{name}_new", "insert", {"id": 1, "v": "a"}),
        (f"{name}_new", "update", {"id": 1, "v": "b"}),
        (f"{name}_old", "insert", {"k": "x"}),
        *((f"{name}_copy", "read", {"n": n}) for n in (1, 2, 3)),
    ]


def test_a_column_change_is_a_ddl_row_between_the_tables_changes_across_a_restart(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    """``include_schema_changes``: the ALTER is read by one run, the first change written with
    the new column by the next one on the same checkpoint, which puts the ddl row before it."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    options = make_slot(pg, name, include_tables=rf"public\.{name}",
                        include_schema_changes="true")
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name} VALUES (1, 'a')")
        conn.execute(f"ALTER TABLE {name} ADD COLUMN n int")
    first = rows_of(run_available_now(spark, checkpoint, options))
    offsets = Path(checkpoint) / "offsets"
    last = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    [[_, table, columns]] = json.loads(last.read_text().splitlines()[-1])["columns"]
    assert (table, [c[0] for c in columns]) == (name, ["id", "v"])  # as of the last change
    with pg.connect() as conn:
        conn.execute(f"UPDATE {name} SET n = 2 WHERE id = 1")
    second = rows_of(run_available_now(spark, checkpoint, options))
    rows = first + second
    assert [r.op for r in rows] == ["insert", "ddl", "update"]
    ddl = rows[1]
    assert [c["name"] for c in json.loads(ddl.before)] == ["id", "v"]
    assert json.loads(ddl.after)[2] == {"name": "n", "type": "integer", "type_oid": 23,
                                        "key": False}
    assert (ddl.table, ddl.key, ddl.commit_lsn, ddl.seq) == (name, None, rows[2].commit_lsn, 0)
    assert ddl.position < rows[2].position
