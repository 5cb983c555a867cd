"""``include_schema_changes``: the columns each read of a batch starts from, found on the driver.

A ``ddl`` row is due where a change's columns differ from the table's columns at its previous
change (:mod:`postgres_cdc_source.decoding.schema_changes`), which may be in an earlier batch or
an earlier partition of the same batch. So every read starts from the state where its range
starts: a batch's start offset holds it, and its end offset the state after the batch, for the
next one. The driver finds the end state, and the state at each split point when the batch is
read in several partitions, by decoding the batch's range itself, sub-range by sub-range
exactly as the partitions will read them (each continuing from the state the one before it
left; with pgoutput only its Relation messages leave the server). The state depends only on
the offset's state and the WAL, so a replayed batch, planned anew after a restart, gets the
same states and the same rows.

Why not the catalog: it tells the columns now, not as of a WAL position. A batch cut by
``max_bytes_per_trigger`` ends before changes the catalog already shows; with asynchronous
commit, or a commit waiting for a synchronous standby, the catalog and the flushed WAL disagree
for a while; and a change and its undoing (a column added, then dropped) leave it as it was.
Any of these would make a driver that trusted it skip a decode that a ``ddl`` row needed, and
deliver the row twice or never. Decoding costs the server a second read of each batch's WAL,
only with the option on.
"""

from __future__ import annotations

from postgres_cdc_source.connections import connect_with_retry
from postgres_cdc_source.decoding.factory import make_decoder
from postgres_cdc_source.decoding.schema_changes import ColumnState, ColumnTracker
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import peeking
from postgres_cdc_source.stream import splitting

__all__ = ["states"]


def states(options: CdcOptions, start: int, end: int, count: int,
           state: ColumnState) -> list[ColumnState]:
    """The state at the start of each of the ``count`` sub-ranges the batch ``(start, end]`` is
    read in (:func:`~postgres_cdc_source.stream.splitting.sub_ranges`), then at ``end``;
    ``state`` is the state at ``start``."""
    found = [state]
    if count == 1:
        ranges, copy_from = [(start, end)], None
    else:
        ranges, copy_from = splitting.sub_ranges(start, end, count), start
    relations = options.plugin == "pgoutput"  # its Relation messages are all the state needs
    conn = connect_with_retry(options, autocommit=False)
    try:
        for lo, hi in ranges:
            tracker = ColumnTracker(found[-1])
            rows = peeking.peek_range(conn, options, lo, hi, copy_from, relations=relations)
            for _ in make_decoder(options, conn, columns=tracker).events(rows):
                pass
            found.append(tracker.state())
    finally:
        conn.close()
    return found
