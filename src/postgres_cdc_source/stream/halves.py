"""A large one-task batch peeked in two halves, the second while the first is decoded.

``pg_logical_slot_peek_*changes`` decodes its whole range before it returns its first row, so
a task reading one range waits for Postgres, then Postgres waits for the task: on a batch of
500,000 changes about a quarter of the read was that first wait. Cut at the WAL midpoint
(:func:`~postgres_cdc_source.stream.splitting.sub_ranges`: each transaction in the half that
holds its commit), the first half is peeked from the slot as before and the second from a
temporary copy of it (:func:`~postgres_cdc_source.replication.positions.temporary_copy`) on a
second connection, in a thread, from the start: Postgres decodes the second half while the
task decodes the first. The rows are the same, in the same order, as one peek's.

Only where it can cost the server nothing its owner counts on: a range of at least
:data:`SPLIT_BYTES`, and the server with at least :data:`SPARE` replication slots and
connections free beyond the copy's; otherwise the range is peeked whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from postgres_cdc_source.connections import connect_with_retry
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import peeking
from postgres_cdc_source.stream.splitting import sub_ranges

__all__ = ["SPARE", "SPLIT_BYTES", "fetched_halves"]

Conn = psycopg.Connection[Any]
Fetch = list[peeking.Row]

SPLIT_BYTES = 16 << 20
"""The least WAL a range is cut for: below it the first peek's wait is a few tens of ms."""
SPARE = 2
"""Replication slots, and connections, left free beside the copy's."""

_ROOM = """
SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.pg_replication_slots)
         + %s < pg_catalog.current_setting('max_replication_slots')::int
   AND (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity)
         + %s < pg_catalog.current_setting('max_connections')::int
             - pg_catalog.current_setting('superuser_reserved_connections')::int"""


def fetched_halves(conn: Conn, options: CdcOptions, start: int, end: int) -> Iterator[Fetch]:
    """The fetches of the slot's range ``(start, end]`` (the slot's own batch, peeked on
    ``conn``), as :func:`~postgres_cdc_source.replication.peeking.fetched_range` gives them:
    in two halves where the range is large and the server has room, else whole."""
    if end - start < SPLIT_BYTES or not _room(conn):
        yield from peeking.fetched_range(conn, options, start, end)
        return
    mid = sub_ranges(start, end, 2)[0][1]
    second = connect_with_retry(options, autocommit=False)
    pool = ThreadPoolExecutor(1, thread_name_prefix="pg_cdc_second_half")
    ahead = None
    try:
        ahead = pool.submit(_first_fetch, second, options, mid, end, start)
        yield from peeking.fetched_range(conn, options, start, mid)
        rest, first = ahead.result()
        if first is not None:
            yield first
            yield from rest
    finally:
        if ahead is not None and not ahead.done():  # closed or failed early: stop the peek
            second.cancel()
        pool.shutdown(wait=True)
        second.close()


def _first_fetch(conn: Conn, options: CdcOptions, start: int, end: int, slot_at: int
                 ) -> tuple[Iterator[Fetch], Fetch | None]:
    """The second half's fetches, the first of them taken: Postgres decodes the half for it."""
    fetches = peeking.fetched_range(conn, options, start, end, slot_at)
    return fetches, next(fetches, None)


def _room(conn: Conn) -> bool:
    """Whether the server has a slot and a connection for the copy, and :data:`SPARE` more."""
    row = conn.execute(_ROOM, (SPARE, SPARE)).fetchone()
    conn.rollback()  # no snapshot held into the peek's own transaction
    return bool(row and row[0])
