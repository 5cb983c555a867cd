"""A Postgres table kept in Delta Lake by the example of pg_cdc_lakehouse.md, through a crash.

The page's Python blocks run as written, placeholders rewritten as for every docs example
(``test_docs_examples.rewrite``) and Delta's package taken from the jars resolved once into
the cache (:func:`~iggy_spark_testing.jars.maven_jars`) instead of at every start: a job in a
process group of its own, so a ``kill -9`` takes its driver, JVM and Python workers at once.

A workload writes the table before the query starts (the snapshot's rows) and while it runs
(inserts, updates of the primary key too, deletes, in several-statement and interleaved
transactions). Once the query has merged a streaming batch, a column is added to the table and
rows are written with it: the job delivers every change before the ``ALTER TABLE`` and stops
with ``SchemaChangedError``, the Delta table then equal to Postgres before the change.
Restarted on the same checkpoint, as the page says, it goes on with the new column; its driver
is killed in a streaming batch after the batch's MERGE landed in Delta and before Spark
committed it, so the job restarted once more merges that batch a second time. The Delta table
must then hold exactly the rows of the Postgres table, the new column too. Delta Lake's jars
exist for Spark 4.2 (not 4.3): the test runs in the pyspark 4.2.1 tier.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from support.streaming import freeze_mid_batch, logged
from test_docs_examples import BLOCKS, Page, rewrite

from iggy_spark_testing.chaos import wait_until
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.jars import maven_jars
from iggy_spark_testing.records import Column, Mix, TableSpec
from iggy_spark_testing.workload import Workload

pytestmark = [pytest.mark.e2e, pytest.mark.delta_lake]

PAGE = "pg_cdc_lakehouse.md"
JOB = Path(__file__).parent / "support" / "delta_merge_job.py"
ORDERS = TableSpec("orders", (
    Column("id", "bigint", "int"),
    Column("status", "text", "text"),
    Column("region", "text", "text"),
    Column("total", "numeric(14,2)", "numeric"),
), ("id",))
"""The example's ``public.orders``."""
SPARK_ARGS = ("--master local[2] --driver-memory 1g --driver-java-options -XX:TieredStopAtLevel=1 "
              "--conf spark.ui.enabled=false --conf spark.sql.shuffle.partitions=2 "
              "--conf spark.databricks.delta.snapshotPartitions=2 pyspark-shell")
"""Two cores: a few partitions, not Spark's 200 per shuffle and Delta's 50 per log replay; and
the JVM's quick compiler only, which halves the time a short job spends warming Delta up."""
_PACKAGES = re.compile(r"""\.config\("spark\.jars\.packages", "([^"]+)"\)""")


@pytest.fixture
def database(pg: LocalPostgres, name: str) -> Iterator[str]:
    """A database of the test's own: the example names its table, slot and paths."""
    with pg.connect() as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(pg.dsn, dbname=name)
    finally:
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE database = %s AND NOT active", (name,))
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _example(page: Page, *, run_on: bool) -> Path:
    """The page's Python blocks as one script, Delta's package as its cached jars."""
    code = "".join(block.code for block in BLOCKS
                   if block.page.name == PAGE and block.lang == "python")
    packages = _PACKAGES.search(code)
    assert packages is not None, f"{PAGE} no longer sets spark.jars.packages"
    jars = ",".join(str(jar) for jar in maven_jars(packages.group(1)))
    code = code.replace(packages.group(0), f'.config("spark.jars", "{jars}")')
    script = page.tmp / ("example_run_on.py" if run_on else "example.py")
    script.write_text(rewrite(code, page, run_on=run_on))
    return script


def _job(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(JOB), *args], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "PYSPARK_SUBMIT_ARGS": SPARK_ARGS})


def _merged_in_flight(table: Path, checkpoint: Path) -> bool:
    """Whether the Delta table holds a commit newer than the last batch Spark planned: that
    batch's MERGE has landed (checked while the batch is not committed)."""
    planned = [f for f in (checkpoint / "offsets").glob("*") if f.name.isdigit()]
    merges = [f for f in (table / "_delta_log").glob("*.json") if f.stem.isdigit()]
    return bool(planned and merges) and (
        max(f.stat().st_mtime_ns for f in merges)
        > max(planned, key=lambda f: int(f.name)).stat().st_mtime_ns)


ADDED = (
    "INSERT INTO public.orders (id, status, region, total, note) "
    "SELECT 1000000 + g, 'new', 'eu', g * 1.25, 'added ' || g FROM generate_series(1, 30) AS g",
    "UPDATE public.orders SET note = 'checked ' || id WHERE id % 3 = 0",
    "UPDATE public.orders SET status = 'audited' WHERE id > 1000000 AND id % 2 = 0",
    "DELETE FROM public.orders WHERE id > 1000000 AND id % 7 = 0",
)
"""Rows written with the column :func:`_add_column` added, beside the workload's (whose
rows it only gives a note: the workload checks what its statements change)."""


def _postgres_rows(conn: psycopg.Connection[Any]) -> dict[int, dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM public.orders").fetchall()
    return {row["id"]: {**row, "total": None if row["total"] is None else str(row["total"])}
            for row in rows}


def _add_column(dsn: str) -> dict[int, dict[str, Any]]:
    """``note`` added to ``public.orders`` and written; the table's rows just before."""
    with psycopg.connect(dsn) as conn:
        with conn.transaction():  # the ALTER's lock: no change between it and the rows read
            conn.execute("ALTER TABLE public.orders ADD COLUMN note text")
            before = _postgres_rows(conn)
        for statement in ADDED:
            _locked(conn, statement)
    return {key: {k: v for k, v in row.items() if k != "note"} for key, row in before.items()}


def _locked(conn: psycopg.Connection[Any], statement: str) -> None:
    """``statement`` with the table locked first, so the workload's writers wait rather than
    deadlock with it; the lock is asked for a second at a time: a writer may hold a
    transaction open on one connection while its next statement, on another, queues behind
    this lock request, a wait Postgres cannot see as a deadlock, which giving up breaks."""
    while True:
        try:
            with conn.transaction():
                conn.execute("SET LOCAL lock_timeout = '1s'")
                conn.execute("LOCK TABLE public.orders IN SHARE ROW EXCLUSIVE MODE")
                conn.execute("SET LOCAL lock_timeout = 0")
                conn.execute(statement)
            return
        except psycopg.errors.LockNotAvailable:
            continue


def _delta_rows(out: Path) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in json.loads(out.read_text())}


def test_a_killed_driver_leaves_the_delta_table_equal_to_postgres(
    database: str, tmp_path: Path
) -> None:
    page = Page([], None, database, "", "", tmp_path)
    checkpoint = Path(page.local("/checkpoints/lakehouse_orders"))
    table = Path(page.local("/tables/orders"))
    out, log = tmp_path / "delta.json", tmp_path / "job.log"
    running, to_the_end = _example(page, run_on=True), _example(page, run_on=False)
    work = Workload(database, "public", seed=32, tables=(ORDERS,), mix=Mix(toast=0))
    work.setup()
    work.run(changes=400)  # the rows the snapshot reads
    stop = threading.Event()
    writes = work.start(stop=stop, rate=100)  # and the changes while the query runs
    try:
        first = _job(str(running), str(table), str(out), log=log)
        try:  # the snapshot's batch and a streaming one merged, then the ALTER TABLE
            wait_until(lambda: logged(checkpoint, "commits") >= 2, 240, "two merged batches",
                       alive=lambda: first.poll() is None)
            before = _add_column(database)
            assert first.wait(timeout=240) != 0, log.read_text()[-5000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.pid, signal.SIGKILL)
        assert "SchemaChangedError" in log.read_text()
        assert "column added: 'note'" in log.read_text()
        assert _delta_rows(out) == before

        second = _job(str(running), log=log)  # restarted: goes on with the new column
        try:  # until a streaming batch of its own merged, not committed
            freeze_mid_batch(second.pid, checkpoint, 240, after=logged(checkpoint, "commits") + 1,
                             alive=lambda: second.poll() is None,
                             written=lambda: _merged_in_flight(table, checkpoint))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    finally:
        stop.set()
        writes.join(60)
        work.close()
    assert logged(checkpoint, "commits") < logged(checkpoint, "offsets"), "not killed mid-batch"

    restarted = _job(str(to_the_end), str(table), str(out), log=log)
    try:
        assert restarted.wait(timeout=240) == 0, log.read_text()[-5000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(restarted.pid, signal.SIGKILL)

    with psycopg.connect(database) as conn:
        expected, found = _postgres_rows(conn), _delta_rows(out)
    assert len(expected) > 50 and any(row["note"] for row in expected.values())
    assert sorted(found) == sorted(expected)
    assert [found[key] for key in sorted(found)] == [expected[key] for key in sorted(expected)]
