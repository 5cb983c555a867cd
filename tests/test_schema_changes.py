"""``include_schema_changes``: a ``ddl`` row where a captured table's columns change, through both
decoders against the real Postgres, driven in Spark's call order (``latestOffset``,
``partitions``, ``read``): each kind of column change, the row's columns and place, none at a
table's first change, each exactly once across batches, a restart from an offset, a replay and
a batch read in several partitions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from connector_common.lsn import parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import PgCdcStreamReader

pytestmark = pytest.mark.services

Offset = dict[str, Any]


def _reader(pg: LocalPostgres, name: str, plugin: str, **extra: str) -> PgCdcStreamReader:
    return PgCdcStreamReader(CdcOptions.from_options({
        "dsn": pg.dsn, "slot": name, "plugin": plugin, "include_tables": rf"public\.{name}_.*",
        "include_schema_changes": "true", **extra}))


def _read(r: PgCdcStreamReader, start: Offset, end: Offset) -> list[dict[str, Any]]:
    return [row for part in r.partitions(start, end) for batch in r.read(part)
            for row in batch.to_pylist()]


def _batch(r: PgCdcStreamReader, start: Offset) -> tuple[Offset, list[dict[str, Any]]]:
    end = r.latestOffset(start, ReadAllAvailable())
    return end, _read(r, start, end)


def _run(pg: LocalPostgres, *statements: str) -> None:
    with pg.connect() as conn:
        for statement in statements:
            conn.execute(statement)


def _seen(rows: list[dict[str, Any]]) -> list[tuple[str, str, object]]:
    """(table suffix, op, the new row; for a ddl row the column names before -> after)."""
    out: list[tuple[str, str, object]] = []
    for row in rows:
        table = row["table"].rsplit("_", 1)[1]
        if row["op"] == "ddl":
            names = [[c["name"] for c in json.loads(row[k])] for k in ("before", "after")]
            out.append((table, "ddl", tuple(names)))
        else:
            out.append((table, row["op"], json.loads(row["after"] or row["key"])))
    return out


def _column(name: str, type_name: str, oid: int, key: bool) -> dict[str, Any]:
    return {"name": name, "type": type_name, "type_oid": oid, "key": key}


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_each_column_change_is_one_row_before_the_first_change_written_with_it(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    _run(pg, f"CREATE TABLE {name}_t (id int PRIMARY KEY, v text)",
         f"CREATE TABLE {name}_u (id int PRIMARY KEY)")
    r = _reader(pg, name, plugin)
    start = r.initialOffset()
    _run(pg, f"INSERT INTO {name}_t VALUES (1, 'a')",  # the first change read: no row
         f"ALTER TABLE {name}_t ADD COLUMN n numeric(10,2)",
         f"INSERT INTO {name}_t VALUES (2, 'b', 1.5)",
         f"ALTER TABLE {name}_u ADD COLUMN x int",  # before u's first change read: no row
         f"INSERT INTO {name}_u VALUES (1, 2)",
         f"ALTER TABLE {name}_t RENAME COLUMN v TO w")  # its first change is in the next batch
    middle, first = _batch(r, start)
    assert _seen(first) == [
        ("t", "insert", {"id": 1, "v": "a"}),
        ("t", "ddl", (["id", "v"], ["id", "v", "n"])),
        ("t", "insert", {"id": 2, "v": "b", "n": "1.50"}),
        ("u", "insert", {"id": 1, "x": 2}),
    ]
    ddl, insert = first[1], first[2]
    assert (ddl["schema"], ddl["key"], ddl["unchanged"]) == ("public", None, [])
    assert {k: ddl[k] for k in ("lsn", "commit_lsn", "xid", "commit_ts")} == {
        k: insert[k] for k in ("lsn", "commit_lsn", "xid", "commit_ts")}
    assert (ddl["seq"], insert["seq"]) == (0, 1)
    assert ddl["id"] == f"{ddl['commit_lsn']}:0"
    numeric = "numeric(10,2)" if plugin == "pgoutput" else "numeric"  # test_decoding: no typmod
    assert json.loads(ddl["before"]) == [_column("id", "integer", 23, True),
                                         _column("v", "text", 25, False)]
    assert json.loads(ddl["after"])[2] == _column("n", numeric, 1700, False)

    # a restart from the offset: a new reader, whose peeks send every table's columns again
    r.stop()
    r = _reader(pg, name, plugin)
    assert _read(r, start, middle) == first  # a replay gives the same rows
    _run(pg, f"UPDATE {name}_t SET w = 'c' WHERE id = 1",
         f"INSERT INTO {name}_u VALUES (2, 3)",
         f"ALTER TABLE {name}_t ALTER COLUMN n TYPE text",
         f"INSERT INTO {name}_t VALUES (3, 'd', 'x')",
         f"ALTER TABLE {name}_t DROP COLUMN w",
         f"DELETE FROM {name}_t WHERE id = 2",
         f"INSERT INTO {name}_t VALUES (4, 'y')")
    with pg.connect() as conn, conn.transaction():  # the ALTER between two changes of its own
        conn.execute(f"INSERT INTO {name}_u VALUES (3, 4)")
        conn.execute(f"ALTER TABLE {name}_u ADD COLUMN y text")
        conn.execute(f"INSERT INTO {name}_u VALUES (4, 5, 'z')")
    _, second = _batch(r, middle)
    dropped = ("t", "ddl", (["id", "w", "n"], ["id", "n"]))
    expected = [
        ("t", "ddl", (["id", "v", "n"], ["id", "w", "n"])),
        ("t", "update", {"id": 1, "w": "c", "n": None}),
        ("u", "insert", {"id": 2, "x": 3}),
        ("t", "ddl", (["id", "w", "n"], ["id", "w", "n"])),  # n: numeric -> text
        ("t", "insert", {"id": 3, "w": "d", "n": "x"}),
        ("t", "delete", {"id": 2}),
        ("t", "insert", {"id": 4, "n": "y"}),
        ("u", "insert", {"id": 3, "x": 4}),
        ("u", "ddl", (["id", "x"], ["id", "x", "y"])),
        ("u", "insert", {"id": 4, "x": 5, "y": "z"}),
    ]
    # pgoutput describes the table before the delete; test_decoding prints only its key there
    expected.insert(5 if plugin == "pgoutput" else 6, dropped)
    assert _seen(second) == expected
    retyped = second[3]
    assert [c["type"] for c in json.loads(retyped["after"])] == ["integer", "text", "text"]
    assert [row["seq"] for row in second[-3:]] == [0, 1, 2]
    ids = [row["id"] for row in first + second]
    assert len(set(ids)) == len(ids)
    positions = [(row["position"]["commit_lsn"], row["position"]["seq"]) for row in first + second]
    assert positions == sorted(positions)  # the stream's order, ddl rows included


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_a_batch_read_in_four_partitions_gives_each_row_once_as_one_read_does(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """Column changes spread over the partitions, one undoing another (the catalog ends as it
    began): each partition starts from the columns the driver found where it starts."""
    _run(pg, f"CREATE TABLE {name}_t (id int PRIMARY KEY, v text)")
    one = _reader(pg, name, plugin)
    start = one.initialOffset()
    steps = ["ADD COLUMN a int", "ADD COLUMN b int", "DROP COLUMN a", "DROP COLUMN b"]
    with pg.connect() as conn:
        for i, step in enumerate(["", *steps]):
            if step:
                conn.execute(f"ALTER TABLE {name}_t {step}")
            for k in range(30):
                conn.execute(f"INSERT INTO {name}_t (id, v) VALUES (%s, 'x')", (i * 100 + k,))
    end, single = _batch(one, start)
    assert [r["op"] for r in single].count("ddl") == 4
    four = _reader(pg, name, plugin, min_partitions="4", min_bytes_per_partition="1")
    # the same end, or a later one where the shared server wrote WAL since (an autovacuum):
    # nothing captured was written, so the batch holds the same rows
    planned = four.latestOffset(start, ReadAllAvailable())
    assert parse_lsn(planned["lsn"]) >= parse_lsn(end["lsn"])
    parts = four.partitions(start, planned)
    ddl_rows = [sum(row["op"] == "ddl" for b in four.read(p) for row in b.to_pylist())
                for p in parts]
    assert len(parts) == 4 and sum(ddl_rows) == 4 and max(ddl_rows) < 4, ddl_rows
    assert _read(four, start, planned) == single
    replay = _reader(pg, name, plugin, min_partitions="4", min_bytes_per_partition="1")
    assert _read(replay, start, end) == single  # planned anew: the same starting columns
