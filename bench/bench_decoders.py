"""How fast the two decoders turn captured peek output into changes with JSON rows.

    python -m bench.bench_decoders [--rows 50000] [--repeat 5]

Captures, from a throwaway Postgres (``iggy_spark_testing.harness``), the peek output of
``--rows`` inserts and as many updates of a 6-column table (int8 key, text, numeric,
timestamptz, bool, float8), once through a pgoutput slot and once through a test_decoding slot.
Then times decoding alone: rows already in memory, every event consumed, every ``after``/``key``
JSON text built; the median of ``--repeat`` runs. Writes ``bench/results/decoders.json`` and
prints one summary line. The reference point is the hand-written pgoutput loop this project
replaced, at about 65,000 changes/s for decode + JSON on the same kind of rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import machine, results_dir
from iggy_spark_testing.harness import postgres
from postgres_cdc_source.catalog import CATALOG_QUERY, TableInfo, table_info_from_rows
from postgres_cdc_source.decoding import Change, Decoder, PeekRow
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder, pgoutput_options
from postgres_cdc_source.decoding.text_format import TEST_DECODING_OPTIONS, TextFormatDecoder
from postgres_cdc_source.pg_types import SESSION_SETTINGS

REFERENCE = 65_000  # changes/s of the hand-written pgoutput loop, decode + JSON
PEEK = ("SELECT (lsn - '0/0')::int8, xid::text::int8, data FROM {}(%s, NULL, NULL,"
        " VARIADIC %s::text[])")


def _flat(options: dict[str, str]) -> list[str]:
    return [item for pair in options.items() for item in pair]


def capture(rows: int) -> tuple[list[Any], list[Any], TableInfo]:
    """Peek output of both plugins for the same workload, and the table's catalog info."""
    session = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())
    with postgres() as pg, pg.connect(options=session) as conn:
        conn.execute("CREATE TABLE bench (id int8 PRIMARY KEY, name text, amount numeric,"
                     " at timestamptz, active bool, score float8)")
        conn.execute("CREATE PUBLICATION bench FOR TABLE bench")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_po', 'pgoutput')")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_td', 'test_decoding')")
        conn.execute(
            "INSERT INTO bench SELECT g, 'customer ' || g, (g * 1.25)::numeric(12,2),"
            " '2024-01-02 03:04:05+00'::timestamptz + g * interval '1 second', g %% 2 = 0,"
            " g / 7.0 FROM generate_series(1, %s) AS g", (rows,),
        )
        conn.execute("UPDATE bench SET score = score + 1, name = name || ' (updated)'")
        pgoutput = conn.execute(PEEK.format("pg_logical_slot_peek_binary_changes"),
                                ("bench_po", _flat(pgoutput_options(["bench"])))).fetchall()
        text = conn.execute(PEEK.format("pg_logical_slot_peek_changes"),
                            ("bench_td", _flat(TEST_DECODING_OPTIONS))).fetchall()
        info = table_info_from_rows("public", "bench",
                                    conn.execute(CATALOG_QUERY, ("public", "bench")).fetchall())
        assert info is not None
        return pgoutput, text, info


def measure(make: Callable[[], Decoder], rows: Sequence[PeekRow], repeat: int) -> dict[str, Any]:
    seconds = []
    changes = 0
    for _ in range(repeat):
        started = time.perf_counter()
        changes = sum(1 for event in make().events(rows) if type(event) is Change)
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    return {
        "changes": changes,
        "runs_seconds": [round(s, 4) for s in seconds],
        "changes_per_second": round(changes / median),
        "microseconds_per_change": round(median / changes * 1e6, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    pgoutput, text, info = capture(args.rows)
    results = {
        "pgoutput": measure(PgOutputDecoder, pgoutput, args.repeat),
        "test_decoding": measure(lambda: TextFormatDecoder(lambda schema, table: info), text,
                                 args.repeat),
    }
    po, td = (results[p]["changes_per_second"] for p in ("pgoutput", "test_decoding"))
    summary = (f"decode + JSON: pgoutput {po:,} changes/s ({po / REFERENCE:.1f}x the "
               f"{REFERENCE:,}/s reference), test_decoding {td:,} changes/s "
               f"[6-column rows, {args.rows:,} inserts + {args.rows:,} updates, one core]")
    report = {
        "benchmark": "pgoutput and test_decoding decoders: peek rows -> changes with JSON",
        "machine": machine(),
        "config": {"rows": args.rows, "repeat": args.repeat},
        "results": results,
        "summary": summary,
    }
    results_dir().mkdir(parents=True, exist_ok=True)
    (results_dir() / "decoders.json").write_text(json.dumps(report, indent=2) + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
