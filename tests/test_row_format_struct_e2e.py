"""``row_format=struct`` end to end: real Spark, real Postgres, both decoders.

A table of the usual types (a TOASTed text among them) is read by two queries, one per row
format: the snapshot, then inserts, an update that leaves the TOASTed value alone, an update
of it, and a delete. ``before``/``after``/``key`` of the struct query are structs a filter like
``after.amount > 100`` reads, and their values equal the JSON query's, parsed, field by field;
through ``pg-to-iggy`` they reach Iggy as the JSON mode's payloads, byte for byte.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql
from pyspark.errors import StreamingQueryException
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import BinaryType, DataType, StringType, StructType, TimestampType
from support.struct_values import from_json, same

from iggy_local import LocalIggy
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.readback import read_topic

pytestmark = pytest.mark.e2e

COLUMNS = """\
id int PRIMARY KEY, amount numeric(10,2), note text, paid boolean, at timestamptz, doc jsonb,
raw bytea, tags int[], big text"""
BIG = "(SELECT string_agg(md5(g::text || %s), '') FROM generate_series(1, 300) g)"
"""An incompressible 9,600-character text: stored out of line (TOAST)."""


def _changes(conn: psycopg.Connection[Any], table: sql.Composable) -> None:
    run = conn.execute
    run(sql.SQL("INSERT INTO {} VALUES (10, 250.50, 'new', true, '2024-05-06 07:08:09.5+02', "
                "'{{\"k\": [1, 2.50]}}', '\\x00ff', '{{4,NULL}}', " + BIG + ")").format(table),
        ("ten",))
    run(sql.SQL("INSERT INTO {} (id, amount) VALUES (11, 99.99)").format(table))
    run(sql.SQL("UPDATE {} SET amount = 120, note = 'more' WHERE id = 1").format(table))  # big
    run(sql.SQL("UPDATE {} SET big = " + BIG + " WHERE id = 2").format(table), ("two",))
    run(sql.SQL("DELETE FROM {} WHERE id = 3").format(table))


@pytest.fixture
def table(pg: LocalPostgres, name: str) -> Iterator[sql.Composable]:
    table = sql.Identifier(name, "t")
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (" + COLUMNS + ")").format(table))
        for i in (1, 2, 3):
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
                                 + BIG + ")").format(table),
                         (i, Decimal(i * 100) + Decimal("0.25"), f"row {i}", i % 2 == 0,
                          f"2024-01-0{i} 00:00:00+00", f'{{"i": {i}}}', bytes([i]),
                          [i, i + 1], str(i)))
    yield table
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        for slot in (f"{name}_json", f"{name}_struct"):
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = %s", (slot,))


def _equal(spark_type: DataType, typed: Any, json_value: Any) -> bool:
    """A struct field's value equals the JSON mode's, parsed, as that type."""
    if json_value is None or typed is None:
        return typed is None and json_value is None
    if isinstance(spark_type, BinaryType):
        return bytes(typed) == base64.b64decode(json_value)
    if isinstance(spark_type, TimestampType):  # collected as local time, without a zone
        return bool(typed == from_json(spark_type, json_value).astimezone().replace(tzinfo=None))
    if isinstance(spark_type, StringType) and not isinstance(json_value, str):
        return bool(orjson.loads(typed) == json_value)  # jsonb: Postgres's text of the value
    return same(from_json(spark_type, json_value), typed)


def _check_image(struct: StructType, typed: Row | None, text: str | None,
                 unchanged: list[str]) -> None:
    assert (typed is None) == (text is None)
    if typed is None or text is None:
        return
    parsed = orjson.loads(text)
    values = typed.asDict()
    for field in struct.fields:
        if field.name in unchanged:
            assert values[field.name] is None and field.name not in parsed
            continue
        assert _equal(field.dataType, values[field.name], parsed.get(field.name)), (
            field.name, values[field.name], parsed.get(field.name))


def _collecting(spark: SparkSession, pg: LocalPostgres, name: str, plugin: str,
               checkpoint: Path, into: list[Row], *, row_format: str = "struct",
               large: list[Row] | None = None, **options: str) -> Any:
    """A query whose batches are appended to ``into`` in stream order (``foreachBatch``, on
    the driver; ``large``: those ``after.amount > 100`` picks), which survives restarts on its
    checkpoint, unlike the memory sink's table."""
    def append(batch: Any, _batch_id: int) -> None:
        into.extend(batch.orderBy("position", "id").collect())
        if large is not None:
            large.extend(batch.where("after.amount > 100").collect())

    reader = spark.readStream.format("pg_cdc").options(
        dsn=pg.dsn, slot=f"{name}_{row_format}", plugin=plugin, snapshot="initial",
        include_tables=f"{name}\\.t", row_format=row_format, **options)
    return (reader.load().writeStream.foreachBatch(append)
            .option("checkpointLocation", str(checkpoint)).start())


def _run(query: Any) -> None:
    try:
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()


@pytest.mark.pg_versions(15, 16)
@pytest.mark.parametrize("plugin", [
    # the oldest Spark too: struct columns through its Arrow path
    pytest.param("pgoutput", marks=pytest.mark.oldest_spark), "test_decoding"])
def test_struct_rows_are_typed_and_equal_the_json_modes(
    spark: SparkSession, pg: LocalPostgres, name: str, table: sql.Composable, plugin: str,
    tmp_path: Path,
) -> None:
    typed: list[Row] = []
    json: list[Row] = []
    large: list[Row] = []
    for run in range(2):  # the snapshot, then the changes; one query at a time
        if run:
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                _changes(conn, table)
        _run(_collecting(spark, pg, name, plugin, tmp_path / "struct", typed, large=large))
        _run(_collecting(spark, pg, name, plugin, tmp_path / "json", json, row_format="json"))
    schema = spark.readStream.format("pg_cdc").options(  # load() reads the catalog
        dsn=pg.dsn, slot=f"{name}_struct", plugin=plugin, include_tables=f"{name}\\.t",
        row_format="struct").load().schema
    row_type = schema["after"].dataType
    assert isinstance(row_type, StructType)
    assert [f.name for f in row_type.fields] == [
        "id", "amount", "note", "paid", "at", "doc", "raw", "tags", "big"]
    assert schema["key"].dataType.simpleString() == "struct<id:int>"
    assert row_type["amount"].dataType.simpleString() == "decimal(10,2)"
    assert [r.op for r in typed] == ["read"] * 3 + ["insert", "insert", "update", "update",
                                                    "delete"]

    def same_change(r: Row) -> tuple[Any, ...]:  # a snapshot row's id names its slot's point
        return (r.id if r.op != "read" else None, r.op, r.unchanged)

    assert list(map(same_change, typed)) == list(map(same_change, json))
    assert typed[5].unchanged == ["big"] and typed[5].after.big is None  # left out, named
    for s, j in zip(typed, json, strict=True):
        _check_image(row_type, s.after, j.after, s.unchanged)
        _check_image(row_type, s.before, j.before, s.unchanged)
        _check_image(schema["key"].dataType, s.key, j.key, [])
    assert sorted((r.op, r.after.id) for r in large) == [
        ("insert", 10), ("read", 1), ("read", 2), ("read", 3), ("update", 1), ("update", 2)]


def _failing(query: Any, error: str) -> str:
    """The message of the error ``query`` stops with (it is stopped either way): a
    ``StreamingQueryException`` carrying ``pg_cdc``'s ``error``, a class it exports."""
    try:
        with pytest.raises(StreamingQueryException,
                           match=rf"postgres_cdc_source\.errors\.{error}: ") as failed:
            query.processAllAvailable()
    finally:
        query.stop()
    return str(failed.value)


def test_add_columns_evolves_the_struct_through_add_drop_rename_and_widen(
    spark: SparkSession, pg: LocalPostgres, name: str, table: sql.Composable, tmp_path: Path,
) -> None:
    """A query through each kind of ALTER TABLE, stopped and restarted on its checkpoint each
    time: with ``fail`` the column added stops it after the changes before it and its restart
    is refused naming the difference; with ``add_columns`` (its structs kept in the checkpoint
    directory) the struct becomes the union over time: the dropped column's and the renamed
    one's fields stay, null in the later rows, the new name and the added column are appended,
    the widened column takes the wider type. Every change arrives once, none is missing."""
    rows: list[Row] = []
    checkpoint = tmp_path / "chk"
    adding = {"schema_evolution": "add_columns", "schema_location": str(checkpoint)}

    def run(*statements: str, **options: str) -> Any:
        """A query on the checkpoint, once ``statements`` ran (while it runs, if it does)."""
        query = _collecting(spark, pg, name, "pgoutput", checkpoint, rows, **options)
        query.processAllAvailable()
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(sql.SQL(statement).format(table))
        return query

    query = run("INSERT INTO {} (id, amount) VALUES (20, 1)",
                "UPDATE {} SET note = 'before' WHERE id = 1",
                "ALTER TABLE {} ADD COLUMN extra int",
                "INSERT INTO {} (id, extra) VALUES (21, 7)")
    message = _failing(query, "SchemaChangedError")
    assert f"table {name}.t changed: column added: 'extra'" in message, message
    assert "A restart on this checkpoint with schema_evolution=fail" in message
    assert [(r.op, r.after.id) for r in rows] == [
        ("read", 1), ("read", 2), ("read", 3), ("insert", 20), ("update", 1)]
    assert ("option 'schema_evolution': fail: the tables' columns differ from the structs "
            f"this checkpoint was written with: table {name}.t: columns added: 'extra'"
            ) in _failing(
                _collecting(spark, pg, name, "pgoutput", checkpoint, rows), "ConfigError")
    query = run("ALTER TABLE {} DROP COLUMN note", "INSERT INTO {} (id) VALUES (22)",
                **adding)  # a drop does not stop add_columns: its rows are typed by name
    _run(query)
    query = run("ALTER TABLE {} RENAME COLUMN paid TO settled",
                "INSERT INTO {} (id, settled) VALUES (23, true)", **adding)
    assert "column renamed: 'paid' to 'settled'" in _failing(query, "SchemaChangedError")
    query = run("ALTER TABLE {} ALTER COLUMN extra TYPE bigint",
                "INSERT INTO {} (id, extra) VALUES (24, 5000000000)", **adding)
    assert "column 'extra' type changed from integer to bigint" in _failing(
        query, "SchemaChangedError")
    _run(run(**adding))
    assert [(r.op, r.after.id) for r in rows] == [
        ("read", 1), ("read", 2), ("read", 3), ("insert", 20), ("update", 1),
        ("insert", 21), ("insert", 22), ("insert", 23), ("insert", 24)]
    assert len({r.id for r in rows}) == len(rows)  # no change twice
    by_id = {r.after.id: r.after for r in rows if r.op == "insert"}
    assert by_id[21].extra == 7
    assert by_id[22].asDict()["paid"] is None and "note" in by_id[22].asDict()
    assert by_id[22].note is None and by_id[23].note is None  # dropped: null from then on
    assert by_id[23].paid is None and by_id[23].settled is True  # renamed: the new name
    assert by_id[24].extra == 5000000000
    last = spark.readStream.format("pg_cdc").options(
        dsn=pg.dsn, slot=f"{name}_struct", include_tables=f"{name}\\.t", row_format="struct",
        **adding).load().schema["after"].dataType
    assert isinstance(last, StructType)
    assert [(f.name, f.dataType.simpleString()) for f in last.fields][8:] == [
        ("big", "string"), ("extra", "bigint"), ("settled", "boolean")]
    assert last.names[:4] == ["id", "amount", "note", "paid"]


# In the 4.0.5 tier: there each AvailableNow run is one batch, so the snapshot ends in another
# run than its exporter's, and both modes read the unchanged TOAST value back from the table.
@pytest.mark.parametrize("plugin", [pytest.param("pgoutput", marks=pytest.mark.oldest_spark)])
def test_the_pipeline_writes_struct_rows_as_the_json_modes_payloads(
    spark: SparkSession, pg: LocalPostgres, broker: LocalIggy, name: str,
    table: sql.Composable, plugin: str, tmp_path: Path,
) -> None:
    """pg-to-iggy with row_format=struct: the same snapshot and changes (a TOASTed value left
    alone among them), routed by ``topic_from``, reach Iggy as the same payload bytes as with
    row_format=json."""
    from pg_to_iggy.pipeline import start_pipeline

    def run(row_format: str) -> None:
        query = start_pipeline(
            spark, dsn=pg.dsn, slot=f"{name}_{row_format}", url=broker.url,
            checkpoint=str(tmp_path / row_format),
            source={"plugin": plugin, "snapshot": "initial", "include_tables": f"{name}\\.t",
                    "row_format": row_format, "topic_from": "table"},  # routed in both formats
            sink={"default_stream": f"{name}_{row_format}", "default_topic": "unrouted"},
            trigger={"availableNow": True})
        try:
            assert query.awaitTermination(300)
            assert query.exception() is None
        finally:
            query.stop()

    for step in range(2):  # the snapshot, then the changes
        if step:
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                _changes(conn, table)
        run("json")
        run("struct")
    payloads = {row_format: [m.payload for m in read_topic(broker.url, f"{name}_{row_format}",
                                                           "t")]
                for row_format in ("json", "struct")}
    ops = [orjson.loads(p)["op"] for p in payloads["json"]]
    assert sorted(ops) == sorted(["read"] * 3 + ["insert"] * 2 + ["update"] * 2 + ["delete"])
    # a snapshot row names its slot's consistent point, which differs between the two slots
    points = {row_format: orjson.loads(next(p for p in found if b'"op":"read"' in p)
                                       )["commit_lsn"].encode()
              for row_format, found in payloads.items()}
    same_point = [p.replace(points["struct"], points["json"]) for p in payloads["struct"]]
    assert sorted(same_point) == sorted(payloads["json"])
    # the update of row 1 left big alone: named unchanged, or (where the snapshot ended in
    # another run than its exporter's: Spark 4.0 and 4.1) read back from the table
    (row_1,) = [after for after in (orjson.loads(p)["after"] for p in payloads["struct"]
                                    if b'"op":"update"' in p) if after["id"] == 1]
    toasted = [orjson.loads(p) for p in payloads["struct"] if b'"unchanged":["big"]' in p]
    assert (len(toasted) == 1 and "big" not in row_1) or (not toasted and len(row_1["big"]) > 9000)
