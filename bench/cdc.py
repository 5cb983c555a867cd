"""The Postgres side of the CDC benchmarks: one workload, template slots, and slot copies.

Every contender of a comparison must read exactly the same changes. The workload is therefore
written once, after a *template* slot per plugin has been created; a contender that only peeks
(the hand-written loops) peeks the template, which peeking never moves. ``pg_cdc`` moves its
slot as Spark commits, so each of its runs reads a fresh copy of the template
(``pg_copy_logical_replication_slot``), dropped afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from bench import common

if TYPE_CHECKING:
    from postgres_cdc_source.stream.reader import PgCdcStreamReader

__all__ = [
    "PLUGINS",
    "PUBLICATION",
    "READ_TIMED",
    "TABLE",
    "CdcWorkload",
    "create_table",
    "insert_rows",
    "read_whole",
    "slot_copy",
    "with_postgres",
    "write_workload",
]

TABLE = "bench"
PUBLICATION = "bench_pub"
PLUGINS = ("pgoutput", "test_decoding")

# Six columns of the usual kinds: int8 key, text, numeric, timestamptz, bool, float8.
_DDL = ("CREATE TABLE {} (id int8 PRIMARY KEY, name text, amount numeric(12,2),"
        " at timestamptz, active bool, score float8)")
_INSERT = (
    "INSERT INTO {} SELECT g, 'customer ' || g, (g * 1.25)::numeric(12,2),"
    " '2024-01-02 03:04:05+00'::timestamptz + g * interval '1 second', g %% 2 = 0, g / 7.0"
    " FROM generate_series(%s::int8, %s::int8) AS g"
)
_UPDATE = ("UPDATE {} SET score = score + 1, name = name || ' (updated)'"
           " WHERE id BETWEEN %s AND %s")


def create_table(conn: psycopg.Connection[Any], table: str) -> None:
    conn.execute(_DDL.format(table))


def insert_rows(conn: psycopg.Connection[Any], table: str, first: int, last: int) -> None:
    """Insert rows ``first..last`` (one statement: one transaction in autocommit mode)."""
    conn.execute(_INSERT.format(table), (first, last))


@dataclass(frozen=True)
class CdcWorkload:
    """What :func:`write_workload` wrote: ``changes`` row changes in transactions of
    ``txn_rows``, readable from the template slot ``template[plugin]``."""

    dsn: str
    changes: int
    txn_rows: int
    template: dict[str, str]
    publication: str = PUBLICATION

    def spark_options(self, plugin: str, slot: str) -> dict[str, str]:
        """``pg_cdc`` options to read ``slot`` (a copy of this workload's template)."""
        options = {"dsn": self.dsn, "slot": slot, "plugin": plugin, "create_slot": "false"}
        if plugin == "pgoutput":
            options["publication"] = self.publication
        return options


def write_workload(
    conn: psycopg.Connection[Any], dsn: str, changes: int, txn_rows: int = 1000,
    *, updates: bool = True, table: str = TABLE,
) -> CdcWorkload:
    """Create the table, its publication and a template slot per plugin, then write changes.

    With ``updates`` half the changes are inserts and half updates of those rows (updates carry
    a replica-identity key, inserts do not); otherwise all are inserts. ``txn_rows`` changes
    per transaction; a single transaction when ``txn_rows >= changes``.
    """
    create_table(conn, table)
    conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {table}")
    template = {plugin: f"tpl_{plugin}" for plugin in PLUGINS}
    for plugin, slot in template.items():
        conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (slot, plugin))
    rows = changes // 2 if updates else changes
    with conn.transaction() if txn_rows >= changes else nullcontext():
        for number, first in enumerate(range(1, rows + 1, txn_rows)):
            insert_rows(conn, table, first, min(first + txn_rows - 1, rows))
            _snapshot_now_and_then(conn, number, txn_rows, changes)
        if updates:
            for number, first in enumerate(range(1, rows + 1, txn_rows)):
                conn.execute(_UPDATE.format(table), (first, min(first + txn_rows - 1, rows)))
                _snapshot_now_and_then(conn, number, txn_rows, changes)
    return CdcWorkload(dsn, rows * (2 if updates else 1), txn_rows, template)


def with_postgres(groups: dict[str, Any], pg: object) -> dict[str, Any]:
    """``groups`` plus the server's processes (postmaster and the backends it reaps) as the
    :class:`bench.cpu.CpuMeter` group ``postgres``, if this benchmark started the server."""
    from bench.cpu import descendants, process

    data_dir = getattr(pg, "data_dir", None)
    if data_dir is None:
        return groups
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    return {**groups,
            "postgres": ((lambda: process(postmaster) + descendants(postmaster)), postmaster)}


def _snapshot_now_and_then(conn: psycopg.Connection[Any], number: int, txn_rows: int,
                           changes: int) -> None:
    """A CHECKPOINT every ~20,000 changes between transactions. Each one logs the
    running-transactions record that lets a slot's ``restart_lsn`` follow its confirmed position
    (Postgres logs one every 15 s on its own; a workload written in a second has none, and every
    batch of a byte-limited stream would then re-read the WAL from the very start)."""
    if txn_rows < changes and (number + 1) % max(1, 20_000 // txn_rows) == 0:
        conn.execute("CHECKPOINT")


READ_TIMED = ("PgCdcStreamReader.read of the whole workload as one batch: peek, decode, "
              "Arrow batches")


def read_whole(reader: PgCdcStreamReader, start: int, end: int, expected: int,
               what: str) -> common.Measure:
    """The reader's own read of the slot's changes in ``(start, end]`` as one batch, outside
    Spark, timed from the call to the last row; it must read exactly ``expected`` rows. A read
    never moves the slot, so every round reads the same changes."""
    from postgres_cdc_source.stream.reader import CdcPartition

    with common.stopwatch() as elapsed:
        rows = sum(batch.num_rows for batch in reader.read(CdcPartition(start, end)))
        seconds = elapsed()
    if rows != expected:
        raise AssertionError(f"{what}: read {rows} rows, not {expected}")
    return common.Measure(rows, seconds, READ_TIMED)


@contextmanager
def slot_copy(conn: psycopg.Connection[Any], template: str, name: str) -> Iterator[str]:
    """A copy of ``template`` named ``name`` for one run; dropped on exit."""
    conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s)", (template, name))
    try:
        yield name
    finally:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
