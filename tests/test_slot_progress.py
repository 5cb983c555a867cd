"""The slot follows Spark's commits even while nothing new arrives.

Spark calls ``latestOffset(start)`` only once the batch ending at ``start`` is committed, and
calls ``commit`` only when a new batch starts: planning itself must release ``start``.
"""

from __future__ import annotations

import pytest
from test_pg_cdc import slot_position

from connector_common.lsn import format_lsn, parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

pytestmark = pytest.mark.services


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_planning_on_an_idle_server_moves_the_slot_to_the_committed_batch_end(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name}_{plugin} (id int PRIMARY KEY)")
    r = PgCdcStreamReader(
        CdcOptions.from_options({"dsn": pg.dsn, "slot": f"{name}_{plugin}", "plugin": plugin})
    )
    start = r.initialOffset()
    with pg.connect() as conn:
        conn.execute(f"INSERT INTO {name}_{plugin} VALUES (1)")
    end = r.latestOffset(start, ReadAllAvailable())
    assert len(list(r.read(CdcPartition(parse_lsn(start["lsn"]), parse_lsn(end["lsn"]))))) == 1
    assert slot_position(pg, f"{name}_{plugin}") == parse_lsn(start["lsn"])
    # the batch is committed; nothing of the slot's tables changes, so Spark never calls
    # commit(end) (the server may still write WAL meanwhile: autovacuum of an earlier test's
    # tables, so the next batch may end later)
    assert parse_lsn(r.latestOffset(end, ReadAllAvailable())["lsn"]) >= parse_lsn(end["lsn"])
    assert format_lsn(slot_position(pg, f"{name}_{plugin}")) == end["lsn"]
