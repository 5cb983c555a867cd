"""``snapshot=initial`` read speed against a hand-written psycopg loop and against ``COPY``.

    python -m bench.bench_snapshot [--rows 100000] [--rounds 3] [--chunk-rows 25000]

One throwaway Postgres, one table of ``--rows`` rows (bigint key, integer, text, numeric,
timestamptz, jsonb), read by three contenders, interleaved round by round after a warm-up:

* ``spark``: ``spark.readStream.format("pg_cdc")`` with ``snapshot=initial`` (pgoutput, a fresh
  slot per round) into Spark's ``noop`` sink with ``trigger(availableNow=True)``: the exported
  snapshot, the chunk planning, one partition per chunk read by ``local[2]``, every row's
  ``key``/``after`` JSON and Arrow batches. Timed from the first micro-batch's start to the last
  one's end (Spark's progress reports); JVM and query start-up excluded.
* ``handwritten``: one process, one connection, a binary server-side cursor (10,000 rows per
  round trip), each row to its JSON object with orjson (numeric as exact text, as pg_cdc) and
  its key JSON. Timed from connecting to the last row.
* ``copy``: ``COPY (SELECT * FROM t) TO STDOUT`` read and thrown away: the physical limit.
* ``ceiling``: :mod:`bench.memory_source` yielding one batch ``pg_cdc`` read from this table
  (``batch_rows`` of its rows), over and over, in as many tasks as ``pg_cdc`` has chunks, into
  the same sink, timed the same way: what Spark's Python data source path alone costs, so no
  snapshot read through it can be faster.

Then memory: for each of ``--memory-sizes``, a fresh process reads the whole table as one
snapshot chunk (the executor's code path, :func:`postgres_cdc_source.snapshot.read_chunk`,
without Spark) and reports its peak RSS, which must not grow with the table.

Writes ``bench/results/snapshot.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from decimal import Decimal
from typing import Any

import orjson
import psycopg

from bench import common, memory_source
from connector_common.change_rows import SPARK_SCHEMA
from iggy_spark_testing.harness import postgres

SPARK_TIMED = ("pg_cdc snapshot=initial -> noop: first micro-batch start to last micro-batch "
               "end (Spark progress); JVM and query start-up excluded")
HAND_TIMED = "connect, binary server-side cursor, orjson per row (row and key), count; one process"
COPY_TIMED = "connect, COPY (SELECT * FROM t) TO STDOUT, bytes read and dropped"
CEILING_TIMED = ("a Python source yielding one of pg_cdc's snapshot batches from memory, "
                 "over and over -> noop, timed as the pg_cdc run")
TABLE = "snap"


def make_table(conn: psycopg.Connection[Any], rows: int) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    conn.execute(f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, n integer, t text, "
                 "amount numeric(14,2), at timestamptz, doc jsonb)")
    conn.execute(
        f"INSERT INTO {TABLE} SELECT g, g %% 1000, md5(g::text) || ' row', (g * 1.25)::numeric,"
        " timestamptz '2024-01-01' + g * interval '1 second',"
        " jsonb_build_object('g', g, 'tag', 'x' || (g %% 7)) FROM generate_series(1, %s) g",
        (rows,),
    )
    conn.execute(f"VACUUM ANALYZE {TABLE}")


def default(value: Any) -> Any:
    """orjson's fallback: ``numeric`` as exact text, as pg_cdc writes it."""
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(type(value))


def handwritten(dsn: str) -> int:
    count = 0
    dumps = orjson.dumps
    names = ("id", "n", "t", "amount", "at", "doc")
    with (psycopg.connect(dsn, options="-c TimeZone=UTC") as conn,
          conn.cursor(name="hand", binary=True) as cur):
        cur.itersize = 10_000
        cur.execute(f"SELECT id, n, t, amount, at, doc FROM {TABLE}")
        for row in cur:
            dumps(dict(zip(names, row, strict=True)), default=default)
            dumps({"id": row[0]})
            count += 1
    return count


def copy_out(dsn: str) -> int:
    size = 0
    with (psycopg.connect(dsn) as conn, conn.cursor() as cur,
          cur.copy(f"COPY (SELECT * FROM {TABLE}) TO STDOUT") as copy):
        for block in copy:
            size += len(block)
    return size


def spark_read(spark: Any, dsn: str, slot: str, chunk_rows: int) -> common.Measure:
    checkpoint = tempfile.mkdtemp(prefix="bench-snapshot-")
    options = {"dsn": dsn, "slot": slot, "snapshot": "initial",
               "include_tables": rf"public\.{TABLE}", "snapshot_chunk_rows": str(chunk_rows)}

    def start() -> Any:
        return (spark.readStream.format("pg_cdc").options(**options).load()
                .writeStream.format("noop").option("checkpointLocation", checkpoint)
                .trigger(availableNow=True).start())

    return common.run_available_now(start, SPARK_TIMED)


def snapshot_batch(dsn: str) -> str:
    """A file holding the first Arrow batch ``pg_cdc`` reads of the table, as one chunk."""
    from postgres_cdc_source import snapshot
    from postgres_cdc_source.options import CdcOptions

    options = CdcOptions.from_options({"dsn": dsn, "slot": "unused", "snapshot": "initial"})
    with psycopg.connect(dsn) as conn:
        table = snapshot.describe(conn, "public", TABLE)
        point = conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchone()
    assert table is not None and point is not None
    return memory_source.batch_file(next(snapshot.read_chunk(options, snapshot.SnapshotPartition(
        table, None, None, None, int(point[0])))), "bench-snapshot-")


def ceiling_read(spark: Any, path: str, rows: int, tasks: int) -> common.Measure:
    return common.read_to_noop(
        lambda: spark.readStream.format(memory_source.NAME).option("messages", rows)
        .option("tasks", tasks).option("batch_file", path)
        .option("schema", SPARK_SCHEMA.json()).load(),
        CEILING_TIMED, rows, "ceiling")


def chunk_peak_rss(dsn: str) -> tuple[int, int]:
    """Rows read and peak RSS (bytes) of this process reading the table as one chunk: the
    kernel's high-water mark of this process's own memory (``VmHWM``). ``ru_maxrss`` is kept
    across ``exec`` on Linux, so in a child of the benchmark's process it can be the parent's
    size at the fork (it gave 169-196 MiB for any chunk where ``VmHWM`` gives 145)."""
    from postgres_cdc_source import snapshot
    from postgres_cdc_source.options import CdcOptions

    options = CdcOptions.from_options({"dsn": dsn, "slot": "unused", "snapshot": "initial"})
    with psycopg.connect(dsn) as conn:
        table = snapshot.describe(conn, "public", TABLE)
    assert table is not None
    part = snapshot.SnapshotPartition(table, None, None, None, 0)
    rows = sum(batch.num_rows for batch in snapshot.read_chunk(options, part))
    with open("/proc/self/status", encoding="ascii") as status:
        (peak,) = (line.split()[1] for line in status if line.startswith("VmHWM:"))
    return rows, int(peak) * 1024


def memory(dsn: str, conn: psycopg.Connection[Any], sizes: list[int]) -> list[dict[str, Any]]:
    """Peak RSS of a fresh process reading tables of ``sizes`` rows as one chunk each."""
    import subprocess

    points = []
    for size in sizes:
        make_table(conn, size)
        out = subprocess.run(
            [sys.executable, "-c", "import sys, bench.bench_snapshot as b; "
             "print(*b.chunk_peak_rss(sys.argv[1]))", dsn],
            check=True, capture_output=True, text=True,
        ).stdout.split()
        rows, peak = int(out[0]), int(out[1])
        if rows != size:
            raise AssertionError(f"read {rows} rows of {size}")
        common.log(f"memory: {size:,} rows read as one chunk, peak RSS {peak / 2**20:.0f} MiB")
        points.append({"rows": size, "peak_rss_mib": round(peak / 2**20, 1)})
    return points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-rows", type=int, default=25_000)
    parser.add_argument("--memory-sizes", default="100000,1000000",
                        help="table sizes for the memory check ('' for none)")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.memory_sizes.split(",") if n]

    with postgres() as pg, pg.connect() as conn:
        make_table(conn, args.rows)
        spark = common.spark_session("bench-snapshot")
        spark.dataSource.register(memory_source.MemorySource)
        batch_file = snapshot_batch(pg.dsn)
        cpu = common.CpuMeter(common.spark_groups(spark))

        def spark_run(number: int) -> common.Measure:
            slot = f"snap_{number + 1}"
            try:
                measure = spark_read(spark, pg.dsn, slot, args.chunk_rows)
            finally:
                conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                             "pg_replication_slots WHERE slot_name = %s", (slot,))
                conn.execute(f"DROP PUBLICATION IF EXISTS {slot}")
            if measure.items != args.rows:
                raise AssertionError(f"pg_cdc read {measure.items}, not {args.rows}")
            return measure

        def hand(_: int) -> common.Measure:
            with common.stopwatch() as elapsed:
                count = handwritten(pg.dsn)
            return common.Measure(count, elapsed(), HAND_TIMED)

        def copy(_: int) -> common.Measure:
            with common.stopwatch() as elapsed:
                size = copy_out(pg.dsn)
            return common.Measure(args.rows, elapsed(), COPY_TIMED, {"bytes": size})

        def ceiling(_: int) -> common.Measure:
            return ceiling_read(spark, batch_file, args.rows, -(-args.rows // args.chunk_rows))

        runs = common.paired_rounds({"copy": copy, "handwritten": hand, "spark": spark_run,
                                     "ceiling": ceiling},
                                    args.rounds, "snapshot", warm_up=True, cpu=cpu)
        spark.stop()
        peaks = memory(pg.dsn, conn, sizes)
    results = common.compared(runs, baselines=("handwritten", "copy", "ceiling"))
    results["ceiling_vs_copy"] = common.ratio(runs["ceiling"], runs["copy"])
    results["memory"] = peaks
    summary = (
        f"snapshot, rows/s [{args.rows:,} rows]: pg_cdc {results['spark']['per_second']:,}/s = "
        f"{results['ratio_vs_handwritten']['median']:.2f}x hand-written "
        f"({results['handwritten']['per_second']:,}/s), "
        f"{results['ratio_vs_copy']['median']:.2f}x COPY ({results['copy']['per_second']:,}/s), "
        f"{results['ratio_vs_ceiling']['median']:.2f}x a Python source yielding its batches "
        f"from memory ({results['ceiling']['per_second']:,}/s = "
        f"{results['ceiling_vs_copy']['median']:.2f}x COPY)"
        + "".join(f"; one chunk of {p['rows']:,} rows: peak RSS {p['peak_rss_mib']} MiB"
                  for p in peaks)
    )
    return common.publish("snapshot", {
        "benchmark": "pg_cdc snapshot=initial -> noop vs hand-written psycopg loop vs COPY",
        "config": {"rows": args.rows, "rounds": args.rounds, "chunk_rows": args.chunk_rows,
                   "memory_sizes": sizes},
        "results": results,
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
