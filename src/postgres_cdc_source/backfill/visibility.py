"""Waiting, before a chunk is read, until the transactions streamed ahead of its marker are
visible.

The chunk is placed in the stream at its marker and read after the marker committed. A
transaction can commit in the WAL (and be decoded) while other sessions cannot see it yet: its
session waits for a synchronous standby after writing the commit record, and only then leaves
the proc array. Its change is then streamed before the marker while a read of the chunk would
still see the old row, placed after it, and the stale row would win. Postgres's own
``pg_xact_status`` calls such a transaction ``in progress`` (it asks the proc array first), so
the transactions decoded before the marker are checked by id instead: a transaction keeps the
lock on its own id until after it left the proc array, so once none of them holds it, a
snapshot taken next sees all of them.

A transaction committed before the batch's start (decoded by an earlier batch) is not in that
list; the planner writes the marker with ``synchronous_commit = remote_apply``, and a
synchronous standby confirms in WAL order, so every earlier commit that waited for one was
released before the planning returned.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from postgres_cdc_source import connections
from postgres_cdc_source.errors import SourceError
from postgres_cdc_source.options import CdcOptions

__all__ = ["SETTLE_SECONDS", "wait_until_visible"]

SETTLE_SECONDS = 60.0
"""How long a chunk's read waits for committed transactions to become visible before its task
fails (Spark retries it)."""

_STILL_RUNNING = """\
SELECT pg_catalog.string_agg(transactionid::text, ', ')
FROM pg_catalog.pg_locks
WHERE locktype = 'transactionid' AND granted AND mode = 'ExclusiveLock'
  AND transactionid::text::bigint = ANY(%s::bigint[])"""


def wait_until_visible(options: CdcOptions, xids: Collection[int], table: str) -> None:
    """Return once none of ``xids`` (transactions decoded ahead of the marker of a chunk of
    ``table``) is still in the proc array; a :class:`SourceError` after
    :data:`SETTLE_SECONDS`."""
    if not xids:
        return
    deadline = time.monotonic() + SETTLE_SECONDS
    pause = 0.01
    with connections.connect(options) as conn:
        while True:
            row = conn.execute(_STILL_RUNNING, (sorted(xids),)).fetchone()
            running = None if row is None else row[0]
            if running is None:
                return
            if time.monotonic() >= deadline:
                raise SourceError(
                    f"backfill chunk of {table}: transactions {running} committed before its "
                    f"marker but were still not visible after {SETTLE_SECONDS:.0f} s (waiting "
                    "for a synchronous standby?); the chunk is read only once they are, or it "
                    "could hide their changes")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
