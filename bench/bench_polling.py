"""``pg_cdc`` ``mode=polling`` read speed against a hand-written psycopg polling loop.

    python -m bench.bench_polling [--rows 500000] [--rounds 3]

One throwaway Postgres, one table of ``--rows`` rows (``id bigint`` key, a ``timestamptz``
tracking column, text, numeric, boolean, jsonb), read whole by two contenders, interleaved round
by round after a discarded warm-up round:

* ``spark``: ``spark.readStream.format("pg_cdc").option("mode", "polling")`` into Spark's
  ``noop`` sink with ``trigger(availableNow=True)`` and a fresh checkpoint (non-destructive, so
  every round reads the same rows). Timed from the first micro-batch's start to the last one's
  end (Spark's progress reports); JVM and query start-up are excluded.
* ``handwritten``: what a competent user writes by hand: one server-side cursor
  ``SELECT ... ORDER BY tracking`` (10,000 rows per round trip), each row's values converted to
  JSON-ready Python values by psycopg's own loaders, the row and its key serialised with
  ``orjson``. No watermark and no late-commit check: the loop polling loses rows with (see
  docs/pg_cdc.md, "No late commit is lost"), so the ratio shows what correctness costs as well
  as Spark's overhead.

The hand-written JSON is first checked equal to ``pg_cdc``'s on a sample, so both do the same
work. Writes ``bench/results/polling.json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
import psycopg
from psycopg.types.string import TextLoader

from bench import common
from iggy_spark_testing.harness import postgres

SPARK_TIMED = ("pg_cdc mode=polling -> noop: first micro-batch start to last micro-batch end "
               "(Spark progress); JVM and query start-up excluded")
HAND_TIMED = "connect, server-side cursor in tracking order, JSON of every row and key, count"
TABLE = "bench_outbox"
FETCH_ROWS = 10_000
SESSION = ("-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=iso_8601 -c extra_float_digits=1"
           " -c bytea_output=hex -c client_encoding=UTF8")
COLUMNS = ("id", "created_at", "event_type", "amount", "flag", "payload")


def write_table(conn: psycopg.Connection[Any], rows: int) -> None:
    conn.execute(
        f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL,"
        " event_type text, amount numeric(12,2), flag boolean, payload jsonb)"
    )
    conn.execute(f"CREATE INDEX ON {TABLE} (created_at)")
    conn.execute(
        f"INSERT INTO {TABLE} SELECT g, timestamptz '2026-01-01' + g * interval '1 ms',"
        " 'type_' || (g %% 50), (g %% 100000) / 100.0, g %% 3 = 0,"
        " jsonb_build_object('n', g, 'tags', jsonb_build_array('a', 'b'))"
        " FROM generate_series(1, %s) g",
        (rows,),
    )
    conn.execute(f"VACUUM ANALYZE {TABLE}")


def _timestamptz(text: str) -> str:
    """``2026-01-01 00:00:00.001+00`` (TimeZone=UTC) -> ``2026-01-01T00:00:00.001+00:00``."""
    return text[:-3].replace(" ", "T", 1) + "+00:00"


# Per column: how the value psycopg loads becomes JSON (None stays None). Timestamps, numerics
# and jsonb are loaded as their text (see _TEXT_OIDS), the way pg_cdc prints them.
_CONVERT = (None, _timestamptz, None, None, None, orjson.Fragment)
_TEXT_OIDS = (1184, 1700, 3802)  # timestamptz, numeric, jsonb


def handwritten_rows(dsn: str, limit: int | None = None) -> list[tuple[bytes, bytes]]:
    """The hand-written loop; returns ``(key, after)`` JSON of the first ``limit`` rows."""
    sample: list[tuple[bytes, bytes]] = []
    count = 0
    with psycopg.connect(dsn, options=SESSION) as conn, conn.cursor(name="poll") as cur:
        for oid in _TEXT_OIDS:
            cur.adapters.register_loader(oid, TextLoader)
        cur.itersize = FETCH_ROWS
        cur.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} ORDER BY created_at")
        dumps = orjson.dumps
        for row in cur:
            after = dumps({
                name: v if convert is None or v is None else convert(v)
                for name, convert, v in zip(COLUMNS, _CONVERT, row, strict=True)
            })
            key = dumps({"id": row[0]})
            count += 1
            if limit is not None:
                sample.append((key, after))
                if count >= limit:
                    break
    return sample if limit is not None else [(b"", b"")] * count


def check_same_json(dsn: str, rows: int = 200) -> int:
    """Assert the hand-written loop's key/after equal ``pg_cdc`` polling's for ``rows`` rows."""
    from connector_common.spark_versions import ReadMaxRows
    from postgres_cdc_source.options import CdcOptions
    from postgres_cdc_source.polling.reader import PgPollingStreamReader

    reader = PgPollingStreamReader(CdcOptions.from_options(options(dsn)))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(rows))
    got = [(r["key"].encode(), r["after"].encode())
           for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()]
    reader.stop()
    expected = handwritten_rows(dsn, rows)
    if got != expected:
        raise AssertionError("the hand-written loop does not produce pg_cdc polling's rows")
    return len(expected)


def options(dsn: str) -> dict[str, str]:
    return {"dsn": dsn, "mode": "polling", "table": TABLE, "tracking_column": "created_at"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    with postgres() as pg, pg.connect() as conn:
        with common.stopwatch() as elapsed:
            write_table(conn, args.rows)
        common.log(f"table: {args.rows:,} rows written in {elapsed():.1f}s")
        checked = check_same_json(pg.dsn)
        common.log(f"the hand-written loop produces pg_cdc's JSON: {checked} rows compared")
        spark = common.spark_session("bench-polling")

        def spark_run(_: int) -> common.Measure:
            return common.read_to_noop(
                lambda: spark.readStream.format("pg_cdc").options(**options(pg.dsn)).load(),
                SPARK_TIMED, args.rows, "pg_cdc polling")

        def hand(_: int) -> common.Measure:
            with common.stopwatch() as elapsed:
                count = len(handwritten_rows(pg.dsn))
            if count != args.rows:
                raise AssertionError(f"hand-written loop read {count}, not {args.rows}")
            return common.Measure(count, elapsed(), HAND_TIMED)

        runs = common.paired_rounds({"handwritten": hand, "spark": spark_run}, args.rounds,
                                    "polling", warm_up=True)
        spark.stop()
    results = common.compared(runs)
    summary = (f"polling, rows/s [{args.rows:,} rows]: pg_cdc mode=polling "
               f"{results['spark']['per_second']:,}/s = "
               f"{results['ratio_vs_handwritten']['median']:.2f}x hand-written "
               f"({results['handwritten']['per_second']:,}/s)")
    return common.publish("polling", {
        "benchmark": "pg_cdc mode=polling -> noop vs hand-written psycopg polling loop",
        "config": {"rows": args.rows, "rounds": args.rounds, "equivalence_rows_checked": checked},
        "results": results,
        "summary": summary,
    })


if __name__ == "__main__":
    sys.exit(main())
