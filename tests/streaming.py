"""Run a streaming query the way most e2e tests need it: one ``trigger(availableNow=True)`` run
that collects its micro-batches with ``foreachBatch``, so a test sees exactly the batches Spark
committed (``foreachBatch`` runs on the driver after a batch was read, before Spark commits it).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, Row, SparkSession


def run_available_now(
    spark: SparkSession,
    checkpoint: str,
    options: dict[str, str],
    on_batch: Callable[[DataFrame, int], None] | None = None,
    *,
    fmt: str = "pg_cdc",
    keep_rows: bool = True,
) -> list[tuple[int, list[Row]]]:
    """One availableNow run of ``fmt``; returns ``(batch_id, rows)`` for every non-empty batch.

    ``on_batch`` sees each micro-batch first (and may raise to fail it); ``keep_rows=False``
    skips collecting the rows (for batches too large to bring to the driver).
    """
    batches: list[tuple[int, list[Row]]] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        if on_batch is not None:
            on_batch(df, batch_id)
        if keep_rows and (rows := df.collect()):
            batches.append((batch_id, rows))

    query = (
        spark.readStream.format(fmt).options(**options).load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    return batches


def rows_of(batches: list[tuple[int, list[Row]]]) -> list[Row]:
    """Every row of every batch, in batch order."""
    return [row for _, rows in batches for row in rows]
