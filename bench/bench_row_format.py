"""Typed rows against JSON rows: what ``row_format=struct`` and ``variant`` cost the stream.

    python -m bench.bench_row_format [--changes 100000] [--rounds 3]
                                     [--plugins pgoutput,test_decoding]
                                     [--formats struct,variant] [--readers-only]

One throwaway Postgres, one workload (``bench.cdc``: half inserts, half updates, 1,000 changes
per transaction), read with ``row_format=json`` (the default) and each of ``--formats``, per
plugin, by two kinds of contender interleaved round by round after a discarded warm-up round
(``--readers-only``: the second kind only):

* ``spark_json``, ``spark_struct``: ``spark.readStream.format("pg_cdc")`` into Spark's ``noop``
  sink with ``trigger(availableNow=True)``, on a fresh copy of the plugin's template slot per
  run, timed from the first micro-batch's start to the last one's end (Spark's progress): the
  peek, decoding, the rows' values, Arrow batches, the hand-over to the JVM.
* ``reader_json``, ``reader_struct``: the reader alone, made as Spark makes it
  (``PgCdcDataSource.schema`` then ``streamReader``), reading the whole workload as one batch
  on the template slot (``PgCdcStreamReader.read`` outside Spark, which never moves the slot).
  Its ratio is the decoding's share; Spark's share is what the ``spark_`` ratio adds.
* ``ceiling_json``, ``ceiling_struct`` (pgoutput, unless ``--readers-only``):
  :mod:`bench.memory_source` yielding one batch of ``BATCH_ROWS`` rows the reader read in that
  format, over and over, as many rows as the workload, in one task, into the same sink, timed
  the same way: what Spark alone charges a format (the JVM turning its columns into rows), with
  no reading at all.

test_decoding's contenders carry the suffix ``_test_decoding``. Each run records the CPU seconds
of the JVM, Spark's Python workers, Postgres and this process (where the readers run), and the
load before it. Every contender must deliver exactly the workload's changes.

What ``struct`` converts is decided by the table's six columns (``bench.cdc``): ``id int8``
(the key; long), ``name text`` (string, as in JSON), ``amount numeric(12,2)`` (decimal(12,2)),
``at timestamptz`` (timestamp), ``active bool`` (boolean) and ``score float8`` (double). Every
change carries ``after`` and ``key`` (the default replica identity: no ``before``). The decimal
and the timestamp are the conversions JSON text does not make (Arrow casts their text a column
at a time when the batch is built); text-heavy tables convert less, tables of timestamps and
decimals more.

``variant`` encodes every value into the VARIANT binary format in Python (an int8, a decimal8
of scale 2, a timestamp, a boolean, a double, a string) and each row's object around them.

Writes ``bench/results/row_format.json`` (both formats), or ``row_format_<format>.json`` for
one (``_readers`` added with ``--readers-only``); target (issue 35): ``struct`` at 0.9x
``json`` or better through Spark (pgoutput).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import pyarrow as pa

from bench import cdc, common, memory_source
from connector_common.lsn import parse_lsn
from iggy_spark_testing.harness import postgres
from postgres_cdc_source.source import PgCdcDataSource
from postgres_cdc_source.stream.reader import PgCdcStreamReader

TYPED = ("struct", "variant")
TARGET = 0.9
BATCH_ROWS = 10_000  # pg_cdc's batch_rows
CEILING_TIMED = ("a Python source yielding one batch the reader read, over and over -> noop, "
                 "timed as the pg_cdc runs")
SPARK_TIMED = ("pg_cdc -> noop, trigger(availableNow=True): first micro-batch start to last "
               "end (Spark progress); JVM and query start-up excluded")


def options(workload: cdc.CdcWorkload, plugin: str, slot: str, row_format: str
            ) -> dict[str, str]:
    """``pg_cdc``'s options for ``slot``: the bench table only, in ``row_format``."""
    return {**workload.spark_options(plugin, slot), "include_tables": rf"public\.{cdc.TABLE}",
            "row_format": row_format}


def suffix(plugin: str) -> str:
    return "" if plugin == "pgoutput" else f"_{plugin}"


def batch_file(reader: PgCdcStreamReader, start: int, end: int) -> str:
    """A file holding the first :data:`BATCH_ROWS` rows ``reader`` reads of ``(start, end]``,
    as one Arrow batch (an IPC stream)."""
    from postgres_cdc_source.stream.reader import CdcPartition

    taken: list[pa.RecordBatch] = []
    for batch in reader.read(CdcPartition(start, end)):  # left early: closed on the way out
        taken.append(batch)
        if sum(b.num_rows for b in taken) >= BATCH_ROWS:
            break
    return memory_source.batch_file(
        pa.Table.from_batches(taken).combine_chunks().to_batches(BATCH_ROWS)[0],
        "bench-row-format-")


def contenders(spark: Any, conn: Any, workload: cdc.CdcWorkload, plugin: str, end: int,
               formats: tuple[str, ...]) -> dict[str, common.Contender]:
    """Spark (unless ``spark`` is ``None``) and the reader alone, each in ``json`` and
    ``formats``, on one plugin's slot; with Spark on pgoutput, the ceilings."""
    template = workload.template[plugin]

    def source(row_format: str) -> tuple[PgCdcDataSource, PgCdcStreamReader]:
        made = PgCdcDataSource(options(workload, plugin, template, row_format))
        reader = made.streamReader(made.schema())
        assert isinstance(reader, PgCdcStreamReader)
        return made, reader

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
        reader = source(row_format)[1]
        start = parse_lsn(reader.initialOffset()["lsn"])
        return lambda _: cdc.read_whole(reader, start, end, workload.changes, name)

    def ceiling(row_format: str) -> common.Contender:
        made, reader = source(row_format)
        path = batch_file(reader, parse_lsn(reader.initialOffset()["lsn"]), end)
        schema = made.schema().json()
        return lambda _: common.read_to_noop(
            lambda: spark.readStream.format(memory_source.NAME)
            .option("messages", workload.changes).option("batch_file", path)
            .option("schema", schema).load(),
            CEILING_TIMED, workload.changes, f"ceiling_{row_format}")

    every = ("json", *formats)
    return {**({f"spark_{f}{suffix(plugin)}": through_spark(f) for f in every}
               if spark is not None else {}),
            **{f"reader_{f}{suffix(plugin)}": alone(f) for f in every},
            **({f"ceiling_{f}": ceiling(f) for f in ("json", "struct") if f in every}
               if spark is not None and plugin == "pgoutput" else {})}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--changes", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--plugins", default=",".join(cdc.PLUGINS))
    p.add_argument("--formats", default=",".join(TYPED))
    p.add_argument("--readers-only", action="store_true")
    args = p.parse_args(argv)
    plugins = [plugin for plugin in args.plugins.split(",") if plugin]
    formats = tuple(f for f in TYPED if f in args.formats.split(","))
    kinds = ("reader",) if args.readers_only else ("spark", "reader")
    load = os.getloadavg()[0]
    with postgres() as pg, pg.connect() as conn:
        workload = cdc.write_workload(conn, pg.dsn, args.changes)
        (end,) = conn.execute("SELECT (pg_current_wal_flush_lsn() - '0/0')::int8"
                              ).fetchone() or (0,)
        common.log(f"workload: {workload.changes:,} changes")
        spark = None if args.readers_only else common.spark_session("bench-row-format")
        if spark is not None:
            spark.dataSource.register(memory_source.MemorySource)
        cpu = common.CpuMeter(cdc.with_postgres(
            common.spark_groups(spark) if spark is not None else {}, pg))
        everyone: dict[str, common.Contender] = {}
        for plugin in plugins:
            everyone.update(contenders(spark, conn, workload, plugin, int(end), formats))
        runs = common.paired_rounds(everyone, args.rounds, "row_format", warm_up=True, cpu=cpu)
        if spark is not None:
            spark.stop()
        version = pg.version
    report: dict[str, Any] = {
        "benchmark": f"row_format={' and '.join(formats)} vs json: "
                     + ("the reader alone" if args.readers_only
                        else "pg_cdc -> noop and the reader alone"),
        "config": {"changes": workload.changes, "txn_rows": workload.txn_rows,
                   "rounds": args.rounds, "plugins": plugins, "formats": formats,
                   "postgres": version, "load_1m_at_start": round(load, 2)},
        "contenders": {name: common.summarize(measures) for name, measures in runs.items()},
        "target": TARGET,
    }
    parts = []
    for typed in formats:
        ratios = {f"{kind}{suffix(plugin)}": common.ratio(
            runs[f"{kind}_{typed}{suffix(plugin)}"], runs[f"{kind}_json{suffix(plugin)}"])
            for plugin in plugins for kind in kinds}
        report[f"ratio_{typed}_vs_json"] = ratios
        parts += [f"{plugin} {typed}: " + ", ".join(
            f"{'through Spark' if kind == 'spark' else 'reader alone'} "
            f"{report['contenders'][f'{kind}_{typed}{suffix(plugin)}']['per_second']:,}/s vs "
            f"json {report['contenders'][f'{kind}_json{suffix(plugin)}']['per_second']:,}/s "
            f"= {ratios[f'{kind}{suffix(plugin)}']['median']}x" for kind in kinds)
            for plugin in plugins]
    if "ceiling_struct" in runs:
        ceilings = common.ratio(runs["ceiling_struct"], runs["ceiling_json"])
        report["ratio_ceiling_struct_vs_json"] = ceilings
        parts.append(f"from memory (Spark alone) struct "
                     f"{report['contenders']['ceiling_struct']['per_second']:,}/s vs json "
                     f"{report['contenders']['ceiling_json']['per_second']:,}/s = "
                     f"{ceilings['median']}x")
    report["summary"] = (f"row_format, changes/s [{workload.changes:,} changes]: "
                         + "; ".join(parts) + f" (target {TARGET}x)")
    name = "row_format" + ("" if formats == TYPED else f"_{formats[0]}")
    return common.publish(name + ("_readers" if args.readers_only else ""), report)


if __name__ == "__main__":
    sys.exit(main())
