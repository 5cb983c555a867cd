"""A docs example as a job for the kill tests, then, if asked, the Delta table it wrote.

Run as ``python delta_merge_job.py EXAMPLE [TABLE OUT]``: runs the Python file ``EXAMPLE`` (an
example of the docs, its placeholders rewritten for the test's servers) to its end, which is
never when it waits on its query; then, with ``TABLE`` and ``OUT``, writes every row of the Delta
table at the path ``TABLE`` to ``OUT`` as a JSON list, read in the example's session (the
test's own session has no Delta jars), also when the example failed (its query stopped), before
failing with its error.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

from pyspark.sql import SparkSession


def main(example: str, table: str | None = None, out: str | None = None) -> None:
    try:
        runpy.run_path(example, run_name="__main__")
    finally:
        if table is not None and out is not None:
            _write_table(table, out)


def _write_table(table: str, out: str) -> None:
    spark = SparkSession.getActiveSession()
    assert spark is not None, "the example started no SparkSession"
    for query in spark.streams.active:  # caught up: no batch may land while the table is read
        query.stop()
    rows = [row.asDict() for row in spark.read.format("delta").load(table).collect()]
    Path(out).write_text(json.dumps(rows, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
