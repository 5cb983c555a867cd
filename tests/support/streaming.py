"""Run a streaming query the way most e2e tests need it: a ``trigger(availableNow=True)`` run
that collects its micro-batches with ``foreachBatch``, so a test sees exactly the batches Spark
committed (``foreachBatch`` runs on the driver after a batch was read, before Spark commits it).
And catch a streaming job in another process in the middle of a batch, to kill it there.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import StreamingQuery

from connector_common.spark_versions import READ_LIMITS
from iggy_spark_testing.chaos import wait_until


def available_now(
    start: Callable[[], StreamingQuery], *, drain: bool = True, timeout: float = 300
) -> None:
    """Run the ``trigger(availableNow=True)`` query ``start()`` starts to its end.

    Spark 4.0/4.1 run AvailableNow as a single batch for Python sources (and after a crash only
    replay the interrupted one): there, with ``drain``, runs follow until one reads nothing,
    the way the docs tell users to catch up on those versions.
    """
    while True:
        query = start()
        if not query.awaitTermination(timeout):
            query.stop()
            raise AssertionError(f"the availableNow run did not end within {timeout} s")
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]
        if READ_LIMITS or not drain or not any(p.numInputRows for p in query.recentProgress):
            return


def run_available_now(
    spark: SparkSession,
    checkpoint: str,
    options: dict[str, str],
    on_batch: Callable[[DataFrame, int], None] | None = None,
    *,
    fmt: str = "pg_cdc",
    keep_rows: bool = True,
    drain: bool = True,
) -> list[tuple[int, list[Row]]]:
    """An availableNow run of ``fmt`` (:func:`available_now`); returns ``(batch_id, rows)`` for
    every non-empty batch.

    ``on_batch`` sees each micro-batch first (and may raise to fail it); ``keep_rows=False``
    skips collecting the rows (for batches too large to bring to the driver).
    """
    batches: list[tuple[int, list[Row]]] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        if on_batch is not None:
            on_batch(df, batch_id)
        if keep_rows and (rows := df.collect()):
            batches.append((batch_id, rows))

    available_now(lambda: (
        spark.readStream.format(fmt).options(**options).load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    ), drain=drain)
    return batches


def rows_of(batches: list[tuple[int, list[Row]]]) -> list[Row]:
    """Every row of every batch, in batch order."""
    return [row for _, rows in batches for row in rows]


def logged(checkpoint: Path, kind: str) -> int:
    """How many batches Spark's ``offsets`` (planned) or ``commits`` log at ``checkpoint`` holds."""
    folder = checkpoint / kind
    return sum(1 for f in folder.iterdir() if f.name.isdigit()) if folder.exists() else 0


def freeze_mid_batch(
    group: int, checkpoint: Path, timeout: float, *, after: int, alive: Callable[[], bool],
    written: Callable[[], bool] | None = None,
) -> None:
    """Stop (SIGSTOP) the process group ``group`` of a streaming job while a batch is in flight:
    planned and not committed, after ``after`` committed batches, and with ``written`` only
    once ``written()`` holds too (the batch's sink has written, say: a stop between the sink's
    write and Spark's commit). The checkpoint is read again once the group is stopped, so the
    batch cannot commit between that look and a kill; a batch that committed in the meantime
    lets the job go on (SIGCONT) to the next one."""

    def in_flight() -> bool:
        commits = logged(checkpoint, "commits")
        return (commits >= after and logged(checkpoint, "offsets") > commits
                and (written is None or written()))

    def frozen() -> bool:
        if not in_flight():
            return False
        os.killpg(group, signal.SIGSTOP)
        if in_flight():
            return True
        os.killpg(group, signal.SIGCONT)
        return False

    wait_until(frozen, timeout, "a batch in flight", every=0.05, alive=alive)
