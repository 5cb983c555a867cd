"""pg_cdc -> iggy_routed as production runs it: the checkpoint in an object store (``s3a://`` on
a real S3 server, SeaweedFS), executors on hosts that share no disk with the driver (standalone
workers in their own mount namespaces, an empty ``/tmp`` each), and the driver killed with
``kill -9`` in the middle of a batch's sends (the scenario: tests/support/s3_cluster.py).

Nothing the driver writes locally reaches a task, and nothing a task writes locally reaches the
driver or the other tasks: whatever the sink needs to skip, on the replay, what landed before
the kill must live somewhere every process reaches. The oracle reads Iggy back as a consumer
would: every committed change once, per-row order kept, with the sink's two tasks of each
batch running in parallel on the two workers. The sink's figures (``destinations()`` and the
``/metrics`` collector) are read by the query's id, which is all they need wherever the
checkpoint is, and agree with what landed; the destination cap holds query-wide, across
batches (tests/support/s3_cluster.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.s3_cluster import HELD, OVER_CAP, killed_mid_send
from test_metrics import samples

from iggy_local import LocalIggy
from iggy_spark import destinations
from iggy_spark.monitoring import LedgerReader
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.oracle import read_back, verify
from iggy_spark_testing.s3 import SeaweedS3
from pg_to_iggy.metrics import _Collector

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedS3]:
    with SeaweedS3() as server:
        yield server


def test_a_driver_killed_mid_send_with_an_s3a_checkpoint_and_diskless_executors(
    pg: LocalPostgres, broker: LocalIggy, s3: SeaweedS3, spark: Any, name: str, tmp_path: Path
) -> None:
    run = killed_mid_send(pg.dsn, broker, s3, name, tmp_path, kills=1, changes=1_200, seed=23)
    report = verify(broker.url, [name], run.work)
    assert report.ok, str(report)
    assert report.duplicates == 0, f"{report.duplicates} duplicates: {report}"
    assert report.delivered == report.changes == run.work.changes

    landed = Counter(m.topic for m in read_back(broker.url, [name]))
    table = destinations(run.checkpoint, spark, url=broker.url, query_id=run.query_id)
    assert {r.topic: r.messages for r in table.collect()} == dict(landed)
    collector = _Collector(LedgerReader(broker.url))
    collector.started(run.query_id, None)
    figures = samples(collector)
    q = (("query", run.query_id),)
    assert figures[("iggy_routed_messages_routed_total", q)] == run.work.changes
    assert figures[("iggy_routed_destinations_active", q)] == len(landed)
    assert figures[("iggy_routed_replay_skipped_total", q)] >= HELD  # skipped, not resent
    assert "extra" not in landed and len(landed) == 3
    assert figures[("iggy_routed_rejections_total", (*q, ("reason", "cap")))] == OVER_CAP
