"""Which path decoded pgoutput in a benchmark's Spark read: checked, not assumed.

``pg_cdc`` decodes the JSON mode's pgoutput batches with the compiled core (``iggy_spark_core``)
where it is installed, and in Python where it is not or where ``IGGY_SPARK_CORE=python`` is set
(:mod:`postgres_cdc_source.decoding.compiled`). Each Python process reads that variable once, and
one Spark read runs in three kinds of them, each checked here:

* the process holding the SparkSession (the benchmark's, or a :mod:`bench.spark_peer`'s):
  :func:`here`;
* the Python workers, which run the reader's ``read()``, the decoding: :func:`workers` runs a
  one-task-per-core job that reports theirs (Spark gives every Python worker of a session the
  same environment, so a data source's workers see what these see);
* the driver-side source runner (plans the batches): :func:`runner`, from the ``compiled_core``
  flag pg_cdc puts in its progress (``SourceHealth``).

test_decoding has no compiled decoder: it is Python on both paths, and checking it means
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["COMPILED", "PYTHON", "checked", "expect", "here", "runner", "session", "workers"]

COMPILED = "compiled"
PYTHON = "python"


def here() -> str:
    """This process's path: ``compiled`` or ``python``."""
    from postgres_cdc_source.decoding import compiled

    return compiled.path()


def workers(spark: SparkSession) -> str:
    """The path of ``spark``'s Python workers (one task per core of ``local[2]``); raises
    :class:`AssertionError` if they disagree."""

    def probe(_: Iterable[Any]) -> Iterator[str]:  # pickled by value: nothing of bench needed
        from postgres_cdc_source.decoding import compiled

        yield compiled.path()

    cores = spark.sparkContext.defaultParallelism
    found = set(spark.sparkContext.parallelize(range(cores), cores).mapPartitions(probe).collect())
    if len(found) != 1:
        raise AssertionError(f"the Python workers decode on different paths: {sorted(found)}")
    return found.pop()


def session(spark: SparkSession) -> dict[str, str]:
    """The paths of a session's processes that are there before any query: its own
    (``process``) and its Python workers' (``python_workers``)."""
    return {"process": here(), "python_workers": workers(spark)}


def runner(query: StreamingQuery) -> str | None:
    """The path of a finished ``pg_cdc`` query's driver-side source runner, from the last
    progress report that carries pg_cdc's health; ``None`` if none does."""
    from postgres_cdc_source.monitoring import SourceHealth

    for progress in reversed(query.recentProgress):
        for source in progress["sources"]:
            latest = source.get("latestOffset")
            health = SourceHealth.from_progress(
                latest if isinstance(latest, str) or latest is None else json.dumps(latest))
            if health is not None:
                return COMPILED if health.compiled_core else PYTHON
    return None


def expect(contender: str, path: str, found: Mapping[str, str | None]) -> None:
    """Fail unless every process in ``found`` (name -> path) is on ``path``; says how to fix it."""
    wrong = {name: got for name, got in found.items() if got != path}
    if wrong:
        fix = ("install the compiled core (the iggy-spark-core wheel, native/) and leave "
               "IGGY_SPARK_CORE unset" if path == COMPILED else "set IGGY_SPARK_CORE=python in "
               "the process and spark.executorEnv.IGGY_SPARK_CORE=python in its session")
        raise AssertionError(f"{contender} must decode on the {path} path, but "
                             + ", ".join(f"{name} is on {got}" for name, got in wrong.items())
                             + f": {fix}")


def checked(spark: SparkSession, peer: Any | None, *, compiled: bool = True
            ) -> dict[str, dict[str, str]]:
    """The decoding paths of the benchmark's session (``spark``, checked on the compiled core
    unless ``compiled`` is false: a run without pgoutput) and of its :mod:`bench.spark_peer`
    (``spark_python``, checked on the pure-Python path), as the results record them."""
    paths: dict[str, dict[str, str]] = {}
    if compiled:
        paths["spark"] = session(spark)
        expect("spark", COMPILED, paths["spark"])
    if peer is not None:
        paths["spark_python"] = peer.paths
        expect("spark_python", PYTHON, paths["spark_python"])
    return paths
