"""Decode rate of both decoders on captured peek output, to guide optimization.

Captures the peek output of ``--rows`` inserts (plus as many updates) of 6-column rows from a
throwaway Postgres (``postgres_cdc_source.harness``), then times decoding alone: rows already
in memory, events consumed, JSON text built. Prints changes/s per plugin (best of ``--repeat``).

    PYTHONPATH=src .venv/bin/python bench/bench_decoders.py --rows 50000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable

from postgres_cdc_source.decoding import Change, Decoder, PeekRow
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder, pgoutput_options
from postgres_cdc_source.decoding.test_decoding import (
    CATALOG_QUERY,
    TEST_DECODING_OPTIONS,
    TableInfo,
    TestDecodingDecoder,
    table_info_from_rows,
)
from postgres_cdc_source.harness import postgres
from postgres_cdc_source.values import SESSION_SETTINGS

PEEK = ("SELECT (lsn - '0/0')::int8, xid::text::int8, data FROM {}('bench', NULL, NULL, "
        "VARIADIC %s::text[])")


def _flat(options: dict[str, str]) -> list[str]:
    return [item for pair in options.items() for item in pair]


def capture(rows: int) -> tuple[list[PeekRow], list[PeekRow], TableInfo]:
    """Peek output of both plugins for the same workload, and the table's catalog info."""
    session = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())
    with postgres() as pg, pg.connect(options=session) as conn:
        conn.execute("CREATE TABLE bench (id int8 PRIMARY KEY, name text, amount numeric,"
                     " at timestamptz, active bool, score float8)")
        conn.execute("CREATE PUBLICATION bench FOR TABLE bench")
        conn.execute("SELECT pg_create_logical_replication_slot('bench', 'pgoutput')")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_td', 'test_decoding')")
        conn.execute(
            "INSERT INTO bench SELECT g, 'customer ' || g, (g * 1.25)::numeric(12,2),"
            " '2024-01-02 03:04:05+00'::timestamptz + g * interval '1 second', g %% 2 = 0,"
            " g / 7.0 FROM generate_series(1, %s) AS g", (rows,),
        )
        conn.execute("UPDATE bench SET score = score + 1, name = name || ' (updated)'")
        pgoutput = conn.execute(
            PEEK.format("pg_logical_slot_peek_binary_changes"), (_flat(pgoutput_options(["bench"])),)
        ).fetchall()
        text = conn.execute(
            PEEK.format("pg_logical_slot_peek_changes").replace("'bench'", "'bench_td'"),
            (_flat(TEST_DECODING_OPTIONS),),
        ).fetchall()
        info = table_info_from_rows("public", "bench",
                                    conn.execute(CATALOG_QUERY, ("public", "bench")).fetchall())
        assert info is not None
        return pgoutput, text, info


def rate(make: Callable[[], Decoder], rows: Iterable[PeekRow], repeat: int) -> tuple[int, float]:
    """(changes decoded, best changes/s over ``repeat`` runs)."""
    best = 0.0
    changes = 0
    for _ in range(repeat):
        started = time.perf_counter()
        changes = sum(1 for event in make().events(rows) if type(event) is Change)
        best = max(best, changes / (time.perf_counter() - started))
    return changes, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    pgoutput, text, info = capture(args.rows)
    for plugin, make, rows in (
        ("pgoutput", PgOutputDecoder, pgoutput),
        ("test_decoding", lambda: TestDecodingDecoder(lambda schema, table: info), text),
    ):
        changes, best = rate(make, rows, args.repeat)
        print(f"{plugin:>14}: {changes} changes, {best:,.0f} changes/s")


if __name__ == "__main__":
    main()
