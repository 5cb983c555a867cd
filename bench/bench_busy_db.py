"""Capturing a quiet table of a busy database: what the other tables' writes cost the source.

    python -m bench.bench_busy_db [--changes 50000] [--noise 9] [--rounds 3] [--pg-version 15]
        [--max-bytes-per-trigger 12m]

One throwaway Postgres, two databases. In both, ``pg_cdc`` captures one table (``bench.cdc``'s:
half inserts, half updates, 1,000 changes per transaction). In ``quiet`` nothing else writes; in
``busy`` every captured transaction is followed by one inserting ``--noise`` times as many rows
into a table the query does not capture (9: the captured table takes 10% of the writes). The
query's slots are created by ``pg_cdc`` itself before the workload, as a running query's are.
Contenders, interleaved round by round:

* ``quiet``, ``busy``: the default, the managed pair alone (pgoutput);
* ``busy_all``: ``all_tables_publication=true``, which also reads ``<publication>_all``
  (every insert of the database), the default before issue 34;
* ``quiet_test_decoding``, ``busy_test_decoding``: test_decoding, which always sends every
  table (the reader skips the uncaptured ones by their header);
* ``spark_quiet``, ``spark_busy``: through Spark, the default again: ``spark.readStream
  .format("pg_cdc")`` into Spark's ``noop`` sink with ``trigger(availableNow=True)``, from a
  copy of the ``quiet``/``busy`` slot made for the run (the query moves the slot it reads),
  timed from the first micro-batch's start to the last one's end. One unbounded batch: its
  planning searches the whole WAL range for backfill requests before the batch reads it (the
  search of a query's first planning), so this is the start-up cost;
* ``spark_quiet_bounded``, ``spark_busy_bounded``: the same with ``max_bytes_per_trigger``
  (one value for both, as a user sets one for their database; the default cuts the default
  workload's ~100 MB of WAL into ~9 batches): the backlog is read batch by batch and only the
  last batch's range is searched, as in steady state. The workload's WAL is written in seconds,
  so Postgres logs no running-transactions record inside it and the slot's restart point stays
  at its start: each batch's planning and read decode from there, later batches cost more.
  Each Spark measure records its batches' ``durationMs`` phases (``latestOffset`` holds the
  planning and the search, ``addBatch`` the read).

Each of the others is the reader's own read of the whole workload as one batch
(``PgCdcStreamReader.read`` outside Spark: the peek, decoding, Arrow batches; the slot is never
moved, so every round reads the same changes), timed from the call to the last row. Every
contender must deliver exactly the captured changes. Each reader run also records the peek's
rows (what the slot sends the reader). Writes ``bench/results/busy_db.json``; targets (issue
34): ``busy`` at 0.8x ``quiet`` or better, the rows sent within 1.2x of the captured changes;
the same 0.8x through Spark.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import psycopg

from bench import cdc, common
from connector_common.lsn import format_lsn, parse_lsn
from iggy_spark_testing.harness import postgres
from postgres_cdc_source.decoding.factory import plugin_options
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import peeking
from postgres_cdc_source.stream.reader import PgCdcStreamReader

TIMED_SPARK = ("pg_cdc -> noop, trigger(availableNow=True): first micro-batch start to last end")
SPARK_CONTENDERS = {"spark_quiet": ("quiet", False), "spark_busy": ("busy", False),
                    "spark_quiet_bounded": ("quiet", True), "spark_busy_bounded": ("busy", True)}
"""name -> (the contender whose slot (and managed publications) a copy is made of, per run;
whether ``max_bytes_per_trigger`` bounds the batches)."""
NOISE_TABLE = "noise"
# name -> (database, plugin, all_tables_publication)
CONTENDERS = {
    "quiet": ("quiet", "pgoutput", False),
    "busy": ("busy", "pgoutput", False),
    "busy_all": ("busy", "pgoutput", True),
    "quiet_test_decoding": ("quiet", "test_decoding", False),
    "busy_test_decoding": ("busy", "test_decoding", False),
}


def _reader(dsn: str, slot: str, plugin: str, all_tables: bool) -> PgCdcStreamReader:
    return PgCdcStreamReader(CdcOptions.from_options({
        "dsn": dsn, "slot": slot, "plugin": plugin, "include_tables": rf"public\.{cdc.TABLE}",
        **({"all_tables_publication": "true"} if all_tables else {}),
    }))


def write(conn: psycopg.Connection[Any], changes: int, noise: int) -> int:
    """The captured table's changes, each transaction followed by ``noise`` times as many
    inserts into :data:`NOISE_TABLE` when ``noise``; returns the captured changes."""
    rows, txn = changes // 2, 1000
    noise_id = 0

    def then_noise() -> None:
        nonlocal noise_id
        if noise:
            cdc.insert_rows(conn, NOISE_TABLE, noise_id + 1, noise_id + txn * noise)
            noise_id += txn * noise

    for first in range(1, rows + 1, txn):
        cdc.insert_rows(conn, cdc.TABLE, first, min(first + txn - 1, rows))
        then_noise()
    for first in range(1, rows + 1, txn):
        conn.execute(f"UPDATE {cdc.TABLE} SET score = score + 1 WHERE id BETWEEN %s AND %s",
                     (first, min(first + txn - 1, rows)))
        then_noise()
    conn.execute("CHECKPOINT")
    return rows * 2


def sent_rows(reader: PgCdcStreamReader, start: int, end: int) -> int:
    """The rows the slot sends the reader for the batch (table changes, begins, commits)."""
    options = reader.options
    with psycopg.connect(options.dsn, autocommit=True) as conn:
        pubs = peeking.publications(conn, options, start)
        func = ("pg_logical_slot_peek_binary_changes" if options.plugin == "pgoutput"
                else "pg_logical_slot_peek_changes")
        row = conn.execute(f"SELECT count(*) FROM {func}(%s, %s::pg_lsn, NULL,"
                           " VARIADIC %s::text[])",
                           (options.slot, format_lsn(end),
                            plugin_options(options, pubs))).fetchone()
    return 0 if row is None else int(row[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--changes", type=int, default=50_000)
    p.add_argument("--noise", type=int, default=9, help="uncaptured inserts per captured change")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pg-version", type=int, default=None)
    p.add_argument("--max-bytes-per-trigger", default="12m",
                   help="the bounded Spark contenders' max_bytes_per_trigger")
    args = p.parse_args(argv)
    with postgres(args.pg_version) as pg:
        with pg.connect() as admin:
            for db in ("quiet", "busy"):
                admin.execute(f"CREATE DATABASE {db}")
        for db in ("quiet", "busy"):  # before the query starts: its planning sees them once
            with psycopg.connect(f"{pg.dsn} dbname={db}", autocommit=True) as conn:
                cdc.create_table(conn, cdc.TABLE)
                cdc.create_table(conn, NOISE_TABLE)
        readers: dict[str, tuple[PgCdcStreamReader, int]] = {}
        for name, (db, plugin, all_tables) in CONTENDERS.items():
            reader = _reader(f"{pg.dsn} dbname={db}", name, plugin, all_tables)
            readers[name] = (reader, parse_lsn(reader.initialOffset()["lsn"]))
        captured = {}
        for db, noise in (("quiet", 0), ("busy", args.noise)):
            with psycopg.connect(f"{pg.dsn} dbname={db}", autocommit=True) as conn:
                captured[db] = write(conn, args.changes, noise)
                common.log(f"{db}: {captured[db]:,} captured changes, "
                           f"{captured[db] * noise:,} others")
        with pg.connect() as conn:
            (end,) = conn.execute("SELECT (pg_current_wal_flush_lsn() - '0/0')::int8"
                                  ).fetchone() or (0,)

        def contender(name: str) -> common.Contender:
            reader, start = readers[name]
            expected = captured[CONTENDERS[name][0]]

            def run(_: int) -> common.Measure:
                measure = cdc.read_whole(reader, start, end, expected, name)
                measure.extra["sent_rows"] = sent_rows(reader, start, end)
                return measure
            return run

        spark = common.spark_session("bench-busy-db")

        def through_spark(name: str) -> common.Contender:
            template, bounded = SPARK_CONTENDERS[name]
            dsn = f"{pg.dsn} dbname={template}"
            limit = {"max_bytes_per_trigger": args.max_bytes_per_trigger} if bounded else {}

            def run(number: int) -> common.Measure:
                slot = f"{name}_{number + 1}"  # the warm-up round is -1
                with psycopg.connect(dsn, autocommit=True) as conn, \
                        cdc.slot_copy(conn, template, slot):
                    return common.read_to_noop(
                        lambda: spark.readStream.format("pg_cdc").options(
                            dsn=dsn, slot=slot, publication=template, create_slot="false",
                            include_tables=rf"public\.{cdc.TABLE}", **limit).load(),
                        TIMED_SPARK, captured[template], name)
            return run

        runs = common.paired_rounds(
            {**{n: contender(n) for n in CONTENDERS},
             **{n: through_spark(n) for n in SPARK_CONTENDERS}},
            args.rounds, "busy_db", warm_up=True)
        spark.stop()
        version = pg.version
    sent = {n: runs[n][0].extra["sent_rows"] for n in CONTENDERS}
    batches = {n: runs[n][0].extra["batches"] for n in SPARK_CONTENDERS}
    report: dict[str, Any] = {
        "postgres": version,
        "captured_changes": args.changes,
        "other_inserts_per_captured_change": args.noise,
        "wal_bytes": {n: end - readers[n][1] for n in ("quiet", "busy")},
        "max_bytes_per_trigger": args.max_bytes_per_trigger,
        "spark_batches": batches,
        "contenders": {n: common.summarize(m) for n, m in runs.items()},
        "sent_rows": sent,
        "sent_rows_per_captured_change": {n: round(s / args.changes, 3) for n, s in sent.items()},
        "ratio_busy_vs_quiet": common.ratio(runs["busy"], runs["quiet"]),
        "ratio_busy_all_vs_quiet": common.ratio(runs["busy_all"], runs["quiet"]),
        "ratio_busy_vs_quiet_test_decoding": common.ratio(runs["busy_test_decoding"],
                                                          runs["quiet_test_decoding"]),
        "ratio_busy_vs_quiet_through_spark": common.ratio(runs["spark_busy"],
                                                          runs["spark_quiet"]),
        "ratio_busy_vs_quiet_through_spark_bounded": common.ratio(runs["spark_busy_bounded"],
                                                                  runs["spark_quiet_bounded"]),
    }
    report["summary"] = (
        f"busy_db (Postgres {version}, captured table 1/{args.noise + 1} of the writes): "
        f"busy/quiet {report['ratio_busy_vs_quiet']['median']}x with the pair, "
        f"{report['ratio_busy_all_vs_quiet']['median']}x with <publication>_all; rows sent per "
        f"captured change {sent['busy'] / args.changes:.2f} vs "
        f"{sent['busy_all'] / args.changes:.2f}; test_decoding busy/quiet "
        f"{report['ratio_busy_vs_quiet_test_decoding']['median']}x; through Spark busy/quiet "
        f"{report['ratio_busy_vs_quiet_through_spark']['median']}x in one batch (start-up), "
        f"{report['ratio_busy_vs_quiet_through_spark_bounded']['median']}x in "
        f"{batches['spark_busy_bounded']} batches of max_bytes_per_trigger "
        f"{args.max_bytes_per_trigger}")
    return common.publish("busy_db", report)


if __name__ == "__main__":
    sys.exit(main())
