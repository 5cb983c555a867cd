"""Backfilling tables on a running ``pg_cdc`` stream, on request (incremental snapshots).

:func:`request_backfill` (or the ``pg-cdc-backfill`` command, or a logical message from SQL:
:mod:`.requests`) asks the query reading a slot to deliver a table's rows; the query
(:mod:`.planning`, on the driver) places one chunk of rows per micro-batch in its stream at a
marker it writes, and the task reading that batch reads the chunk and puts its rows there
(:mod:`.splice`); progress lives in the offsets (:mod:`.progress`).
"""

from postgres_cdc_source.backfill.requests import cancel_backfill, request_backfill

__all__ = ["cancel_backfill", "request_backfill"]
