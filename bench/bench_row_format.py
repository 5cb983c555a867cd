"""Typed rows against JSON rows: what ``row_format=struct`` costs the stream.

    python -m bench.bench_row_format [--changes 100000] [--rounds 3]
                                     [--plugins pgoutput,test_decoding]

One throwaway Postgres, one workload (``bench.cdc``: half inserts, half updates, 1,000 changes
per transaction), read with ``row_format=json`` (the default) and ``row_format=struct``, per
plugin, by two kinds of contender interleaved round by round after a discarded warm-up round:

* ``spark_json``, ``spark_struct``: ``spark.readStream.format("pg_cdc")`` into Spark's ``noop``
  sink with ``trigger(availableNow=True)``, on a fresh copy of the plugin's template slot per
  run, timed from the first micro-batch's start to the last one's end (Spark's progress): the
  peek, decoding, the rows' values, Arrow batches, the hand-over to the JVM.
* ``reader_json``, ``reader_struct``: the reader alone, made as Spark makes it
  (``PgCdcDataSource.schema`` then ``streamReader``), reading the whole workload as one batch
  on the template slot (``PgCdcStreamReader.read`` outside Spark, which never moves the slot).
  Its ratio is the decoding's share; Spark's share is what the ``spark_`` ratio adds.

test_decoding's contenders carry the suffix ``_test_decoding``. Each run records the CPU seconds
of the JVM, Spark's Python workers, Postgres and this process (where the readers run), and the
load before it. Every contender must deliver exactly the workload's changes.

What ``struct`` converts is decided by the table's six columns (``bench.cdc``): ``id int8``
(the key; long), ``name text`` (string, as in JSON), ``amount numeric(12,2)`` (decimal(12,2):
a ``Decimal`` per value), ``at timestamptz`` (timestamp: a ``datetime`` parsed per value),
``active bool`` (boolean) and ``score float8`` (double). Every change carries ``after`` and
``key`` (the default replica identity: no ``before``). The decimal and the timestamp are the
conversions JSON text does not make; text-heavy tables convert less, tables of timestamps and
decimals more.

Writes ``bench/results/row_format.json``; target (issue 35): ``struct`` at 0.9x ``json`` or
better through Spark (pgoutput).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from bench import cdc, common
from connector_common.lsn import parse_lsn
from iggy_spark_testing.harness import postgres
from postgres_cdc_source.source import PgCdcDataSource
from postgres_cdc_source.stream.reader import PgCdcStreamReader

FORMATS = ("json", "struct")
TARGET = 0.9
SPARK_TIMED = ("pg_cdc -> noop, trigger(availableNow=True): first micro-batch start to last "
               "end (Spark progress); JVM and query start-up excluded")


def options(workload: cdc.CdcWorkload, plugin: str, slot: str, row_format: str
            ) -> dict[str, str]:
    """``pg_cdc``'s options for ``slot``: the bench table only, in ``row_format``."""
    return {**workload.spark_options(plugin, slot), "include_tables": rf"public\.{cdc.TABLE}",
            "row_format": row_format}


def suffix(plugin: str) -> str:
    return "" if plugin == "pgoutput" else f"_{plugin}"


def contenders(spark: Any, conn: Any, workload: cdc.CdcWorkload, plugin: str, end: int
               ) -> dict[str, common.Contender]:
    """Spark and the reader alone, each in both row formats, on one plugin's slot."""
    template = workload.template[plugin]

    def through_spark(row_format: str) -> common.Contender:
        name = f"spark_{row_format}{suffix(plugin)}"

        def run(number: int) -> common.Measure:
            with cdc.slot_copy(conn, template, f"{name}_{number + 1}") as slot:
                return common.read_to_noop(
                    lambda: spark.readStream.format("pg_cdc").options(
                        **options(workload, plugin, slot, row_format)).load(),
                    SPARK_TIMED, workload.changes, name)
        return run

    def alone(row_format: str) -> common.Contender:
        name = f"reader_{row_format}{suffix(plugin)}"
        source = PgCdcDataSource(options(workload, plugin, template, row_format))
        reader = source.streamReader(source.schema())
        assert isinstance(reader, PgCdcStreamReader)
        start = parse_lsn(reader.initialOffset()["lsn"])
        return lambda _: cdc.read_whole(reader, start, end, workload.changes, name)

    return {**{f"spark_{f}{suffix(plugin)}": through_spark(f) for f in FORMATS},
            **{f"reader_{f}{suffix(plugin)}": alone(f) for f in FORMATS}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--changes", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--plugins", default=",".join(cdc.PLUGINS))
    args = p.parse_args(argv)
    plugins = [plugin for plugin in args.plugins.split(",") if plugin]
    load = os.getloadavg()[0]
    with postgres() as pg, pg.connect() as conn:
        workload = cdc.write_workload(conn, pg.dsn, args.changes)
        (end,) = conn.execute("SELECT (pg_current_wal_flush_lsn() - '0/0')::int8"
                              ).fetchone() or (0,)
        common.log(f"workload: {workload.changes:,} changes")
        spark = common.spark_session("bench-row-format")
        cpu = common.CpuMeter(cdc.with_postgres(common.spark_groups(spark), pg))
        everyone: dict[str, common.Contender] = {}
        for plugin in plugins:
            everyone.update(contenders(spark, conn, workload, plugin, int(end)))
        runs = common.paired_rounds(everyone, args.rounds, "row_format", warm_up=True, cpu=cpu)
        spark.stop()
        version = pg.version
    ratios = {f"{kind}{suffix(plugin)}": common.ratio(runs[f"{kind}_struct{suffix(plugin)}"],
                                                      runs[f"{kind}_json{suffix(plugin)}"])
              for plugin in plugins for kind in ("spark", "reader")}
    report: dict[str, Any] = {
        "benchmark": "row_format=struct vs json: pg_cdc -> noop and the reader alone",
        "config": {"changes": workload.changes, "txn_rows": workload.txn_rows,
                   "rounds": args.rounds, "plugins": plugins, "postgres": version,
                   "load_1m_at_start": round(load, 2)},
        "contenders": {name: common.summarize(measures) for name, measures in runs.items()},
        "ratio_struct_vs_json": ratios,
        "target": TARGET,
    }
    report["summary"] = f"row_format, changes/s [{workload.changes:,} changes]: " + "; ".join(
        f"{plugin}: through Spark struct "
        f"{report['contenders'][f'spark_struct{suffix(plugin)}']['per_second']:,}/s vs json "
        f"{report['contenders'][f'spark_json{suffix(plugin)}']['per_second']:,}/s = "
        f"{ratios[f'spark{suffix(plugin)}']['median']}x, reader alone "
        f"{ratios[f'reader{suffix(plugin)}']['median']}x"
        for plugin in plugins) + f" (target {TARGET}x)"
    return common.publish("row_format", report)


if __name__ == "__main__":
    sys.exit(main())
