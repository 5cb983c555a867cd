"""Routing by a row column: the value comes from the new row, else the old row, else the key.

Changes are decoded by the real plugins from a real Postgres (the reader's ``read`` called
directly), so the test covers what each plugin actually sends for updates and deletes.
"""

from __future__ import annotations

import pytest

from connector_common.lsn import parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

pytestmark = pytest.mark.services

BIG = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(3000))  # stored out of line


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_column_routes_read_the_new_row_then_the_old_row_then_the_key(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    slot = f"{name}_{plugin}"
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {slot}_d (id int PRIMARY KEY, kind text, n int)")
        conn.execute(f"CREATE TABLE {slot}_f (id int PRIMARY KEY, kind text, n int)")
        conn.execute(f"ALTER TABLE {slot}_f REPLICA IDENTITY FULL")
    r = PgCdcStreamReader(CdcOptions.from_options({
        "dsn": pg.dsn, "slot": slot, "plugin": plugin, "include_tables": rf"public\.{slot}_.",
        "topic_from": "kind", "default_topic": "fallback", "default_stream": "s",
        "partition_key_from": "id",
    }))
    start = r.initialOffset()
    with pg.connect() as conn:
        for table in ("d", "f"):
            conn.execute(f"INSERT INTO {slot}_{table} VALUES (1, 'small', 0), (2, %s, 0)", (BIG,))
            conn.execute(f"UPDATE {slot}_{table} SET n = 1")  # id 2: kind unchanged, not sent
            conn.execute(f"DELETE FROM {slot}_{table}")
    end = r.latestOffset(start, ReadAllAvailable())
    rows = [row for batch in r.read(CdcPartition(parse_lsn(start["lsn"]), parse_lsn(end["lsn"])))
            for row in batch.to_pylist()]
    seen = [(row["table"][-1], row["op"], "BIG" if row["topic"] == BIG else row["topic"],
             row["partition_key"]) for row in rows]
    assert seen == [
        ("d", "insert", "small", "1"), ("d", "insert", "BIG", "2"),
        ("d", "update", "small", "1"), ("d", "update", "fallback", "2"),  # nowhere in the change
        ("d", "delete", "fallback", "1"), ("d", "delete", "fallback", "2"),  # key only
        ("f", "insert", "small", "1"), ("f", "insert", "BIG", "2"),
        ("f", "update", "small", "1"), ("f", "update", "BIG", "2"),  # from the old row
        ("f", "delete", "small", "1"), ("f", "delete", "BIG", "2"),
    ]
    assert all(row["stream"] == "s" for row in rows)


@pytest.mark.parametrize(("option", "default"), [("topic_from", "default_topic"),
                                            ("stream_from", "default_stream")])
def test_a_column_route_without_its_default_is_refused_naming_the_default(
    option: str, default: str
) -> None:
    with pytest.raises(ConfigError, match=f"{default}.*required with {option}='kind'") as info:
        CdcOptions.from_options({"dsn": "host=x", "slot": "s", option: "kind"})
    assert info.value.option == default
    builtin = {"topic_from": "table", "stream_from": "schema"}[option]
    CdcOptions.from_options({"dsn": "host=x", "slot": "s", option: builtin})  # needs none
