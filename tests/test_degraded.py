"""pg_cdc's degraded status and slot health, against the real Postgres (no Spark)."""

from __future__ import annotations

import json
import logging

import pytest

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import DEGRADED_AFTER, PgCdcStreamReader

pytestmark = pytest.mark.services


def test_failed_slot_advances_degrade_the_source_and_one_success_clears_it(
    pg: LocalPostgres, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = CdcOptions.from_options({"dsn": pg.dsn, "slot": name})
    reader = PgCdcStreamReader(good)
    start = reader.initialOffset()
    health = reader.reportLatestOffset()
    assert health["commit_failures"] == 0 and health["degraded"] is False
    assert health["slot_active"] is False and health["slot_lag_bytes"] >= 0
    assert health["retained_wal_bytes"] >= health["slot_lag_bytes"]
    json.dumps(health)  # Spark carries it as JSON

    # the slot cannot be advanced (here: the reader looks for a slot that is not there)
    reader.options = CdcOptions.from_options(
        {"dsn": pg.dsn, "slot": name + "_gone", "create_slot": "false"})
    with caplog.at_level(logging.WARNING):
        for _ in range(DEGRADED_AFTER):
            reader.commit(start)  # logged, counted, never raised
    assert "status DEGRADED (3 commits in a row)" in caplog.text
    reader.options = good
    assert reader.reportLatestOffset()["degraded"] is True
    reader.commit(start)
    assert "advanced again; status ok" in caplog.text
    assert reader.reportLatestOffset()["commit_failures"] == 0
