"""The Spark Declarative Pipelines example (examples/sdp_pg_to_iggy) run by the
``spark-pipelines`` CLI, as a user runs it: ``pg_cdc`` as the flow's source, ``iggy_routed``
as its ``create_sink`` target. Every change of the table arrives in Iggy once, the flow's
checkpoint is where the docs say SDP keeps it (``<storage>/_checkpoints/<sink>/<flow>/<n>``), and
the sink's state is the flow's query's, in Iggy (SDP passes no ``checkpointLocation`` option to
the sink: the sink finds its query by Spark's id).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from iggy_spark import read_ledger
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.oracle import read_back
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication.lifecycle import ensure_slot

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sdp_pg_to_iggy"


def _run_pipeline(project: Path, env: dict[str, str]) -> None:
    run = subprocess.run(
        [str(Path(sys.executable).parent / "spark-pipelines"), "run", "--spec",
         str(project / "spark-pipeline.yml")],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "Run is COMPLETED" in run.stdout + run.stderr, (run.stdout + run.stderr)[-4000:]


def test_the_sdp_example_delivers_every_change_once(
    pg: LocalPostgres, broker: Any, name: str, tmp_path: Path
) -> None:
    table = sql.Identifier(name)
    with pg.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table))
    tables = f"public\\.{name}"
    ensure_slot(CdcOptions.from_options(
        {"dsn": pg.dsn, "slot": name, "include_tables": tables}))
    with pg.connect() as conn:
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'v' || g FROM generate_series(0, 299) g")
                     .format(table))
        conn.execute(sql.SQL("UPDATE {} SET v = v || '!' WHERE id % 7 = 0").format(table))
    project = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, project)
    spec = project / "spark-pipeline.yml"
    storage = (tmp_path / "storage").as_uri()
    spec.write_text(spec.read_text().replace("file:///tmp/pg_to_iggy-pipeline-storage", storage))
    env = {**os.environ, "PG_CDC_DSN": pg.dsn, "IGGY_URL": broker.url, "PG_CDC_SLOT": name,
           "PG_CDC_TABLES": tables, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}

    _run_pipeline(project, env)
    delivered = read_back(broker.url, [name])
    assert {m.topic for m in delivered} == {name}
    assert len(delivered) == 300 + 43 and len({m.id for m in delivered}) == len(delivered)
    assert sorted(m.change["key"]["id"] for m in delivered
                  if m.change and m.change["op"] == "insert") == list(range(300))
    checkpoint = tmp_path / "storage" / "_checkpoints" / "iggy" / "changes" / "0"
    assert (checkpoint / "commits").is_dir()
    ledger = read_ledger(broker.url, checkpoint).rows()
    assert {(r["stream"], r["topic"]): r["messages"] for r in ledger} == {(name, name): 343}
