"""``mode=polling``: read one table by its tracking column, without logical decoding.

No slot, no publication, no ``wal_level=logical``: the reader selects rows, in the order of an
increasing ``tracking_column``, and gives them the output schema of ``mode=cdc`` (``op`` is
``read``; ``after`` and ``key`` are exactly what the decoders give for an insert of the row).

**Why tracking values alone lose rows.** A transaction can take tracking value 100 (from a
sequence, or ``now()``), then commit after another transaction's row 101 was read; a reader
that continues "after 101" never sees 100. No reader can see the value an open transaction holds,
so this one orders by *commits* instead and uses the tracking value as the order within them.
Every row version carries the id of the transaction that wrote it (``xmin``). When a batch is
planned, ``txid_snapshot_xmin(txid_current_snapshot())`` - the *frontier* - is the oldest
transaction still running: every transaction below it has finished, so the set of row versions
written below the frontier is final (it can lose rows to deletes and updates, never gain any).
An offset is ``(tracking value, frontier)`` (:mod:`~postgres_cdc_source.polling.offset`), and
batch ``(start, end]`` holds the versions written below ``end.frontier`` that are

* after ``start.tracking`` and at or below ``end.tracking`` (the cursor part, at most
  ``max_rows_per_trigger`` rows plus the rest of the last tracking value: a batch always ends on
  a whole tracking value, so ties at its edge are never split), or
* at or below ``start.tracking`` but written at or above ``start.frontier``: they committed too
  late for an earlier batch (the transaction that held 100), or are updates of rows already read.

Every version is eventually in exactly one batch: the first batch whose frontier passes its
writer takes it, through the cursor part or as a late row. A row updated after it was read is
read again (as a new version, with a new ``id``). The union of all batches up to ``end`` is the
versions written below ``end.frontier`` with a tracking value at or below ``end.tracking``,
which is what the destructive step uses.

**Destructive options.** ``delete_after_read`` / ``processed_column`` delete / mark rows only
once Spark has durably committed their batch, never while reading: in ``commit(end)`` and, since
that callback is at-most-once and skipped for the last batch of an ``availableNow`` run, again
when the next batch is planned (``latestOffset(start)`` is only called once the batch ending at
``start`` is in ``commits/``). The statement covers every batch up to the offset, so a missed
step is caught up whole; it runs in a REPEATABLE READ transaction and only touches versions
written below the frontier, so a row updated after it was read is never deleted or marked
unseen (a concurrent update makes the statement fail with a serialization error instead; it is
retried at the next planning). A crash before Spark's commit leaves the rows in place: the batch
is read again, duplicates with the same ids, never a loss.

**The cost.** A transaction that stays open holds the frontier back: rows committed after it
started are delivered only once it ends (read-only transactions without an xid do not count).
Each planning and read also scans the rows at or below the previous batch's tracking value for
late commits: cheap when rows leave the table (``delete_after_read``) or are marked (with an
index on the tracking column ``WHERE processed IS NOT TRUE``), a scan of the table otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg.types.string import TextLoader
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from connector_common.change_rows import ARROW_SCHEMA, POSITION_TYPE, no_unchanged
from connector_common.spark_versions import (
    BatchStarts,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from postgres_cdc_source.connections import (
    DriverConnection,
    connect_with_retry,
    riding_out_restarts,
)
from postgres_cdc_source.decoding import Change, RowShape, row_json
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import SourceError
from postgres_cdc_source.options import CdcOptions, PollingOptions
from postgres_cdc_source.polling.offset import PollOffset
from postgres_cdc_source.polling.table import FRONTIER_QUERY, PolledTable, inspect
from postgres_cdc_source.rows.json.values import converter_for_oid

__all__ = ["READ_OP", "PgPollingStreamReader", "PollingPartition", "check_table"]

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_OP = "read"
_LOCK_TIMEOUT = "5s"  # a destructive step waiting on the owner's row locks gives up, retries later


@dataclass(frozen=True)
class PollingPartition(InputPartition):
    """The one split of a batch: the table and the batch's two offsets."""

    table: PolledTable
    start: PollOffset
    end: PollOffset


def _polling(options: CdcOptions) -> PollingOptions:
    assert options.polling is not None, "mode=polling options expected"
    return options.polling


def check_table(options: CdcOptions) -> PolledTable:
    """Connect and check the table and columns the options name (at ``load()``)."""
    with connect_with_retry(options, autocommit=True) as conn:
        return inspect(conn, _polling(options), generated=options.delivers_generated)


class PgPollingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads one table as micro-batches bounded by polling offsets (see the module docstring)."""

    def __init__(self, options: CdcOptions) -> None:
        self.options = options
        self.polling = _polling(options)
        self._db = DriverConnection(options)
        self._table: PolledTable | None = None
        self._target: int | None = None
        self._done: PollOffset | None = None  # the last offset whose destructive step ran
        self._starts = BatchStarts()

    # -- driver side ---------------------------------------------------------------------------

    def _driver(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``work`` on the driver's connection, reconnecting once if the server went away."""
        return self._db.run(work)

    @property
    def table(self) -> PolledTable:
        if self._table is None:
            self._table = self._driver(lambda conn: inspect(
                conn, self.polling, generated=self.options.delivers_generated))
        return self._table

    def initialOffset(self) -> dict[str, Any]:
        """A new query starts before every row: nothing read, no frontier passed."""
        _ = self.table  # fail here, before the first batch, if the table changed since load()
        return PollOffset(None, 0).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = self.polling.max_rows_per_trigger
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the frontier now: rows committed later wait for the next run."""
        self._target = self._driver(_frontier)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next batch (Spark 4.0/4.1 pass neither argument: see
        :class:`~connector_common.spark_versions.BatchStarts`)."""
        begin = PollOffset.from_json(self._starts.start(start, self.initialOffset))
        limit = self.getDefaultReadLimit() if limit is None else limit
        self._catch_up(begin)  # Spark committed the batch ending at `start` before asking
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self._driver(lambda conn: self._plan(conn, begin, max_rows)).to_json()

    def _plan(
        self, conn: psycopg.Connection[Any], start: PollOffset, rows: int | None
    ) -> PollOffset:
        frontier = _frontier(conn)
        if self._target is not None:
            frontier = min(frontier, self._target)
        frontier = max(frontier, start.frontier)
        table = self.table
        query, params = table.select_cursor_end(start, frontier, rows)
        with _raw_text(conn.cursor(), table) as cur:
            found = cur.execute(query, params).fetchone()
        tracking = found[0] if found else None
        if tracking is None and start.tracking is not None:
            query, params = table.any_late(start, frontier)
            late = conn.execute(query, params).fetchone()
            if late and late[0]:
                tracking = start.tracking
        if tracking is None:
            return start  # nothing new: Spark runs no batch
        return PollOffset(tracking, frontier)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._starts.planned(end)
        begin, finish = PollOffset.from_json(start), PollOffset.from_json(end)
        return [] if begin == finish else [PollingPartition(self.table, begin, finish)]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has durably committed every batch up to ``end``: run the destructive step."""
        self._catch_up(PollOffset.from_json(end))

    def _catch_up(self, committed: PollOffset) -> None:
        """Delete / mark every row covered by ``committed`` (idempotent; failures wait for the
        next planning, which covers them again)."""
        if not self.polling.destructive or committed == self._done:
            return
        stmt = self.table.destructive(committed)
        if stmt is None:
            return
        query, params = stmt

        def run(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (_LOCK_TIMEOUT,))
                return conn.execute(query, params).rowcount

        try:
            count = self._driver(run)
        except (psycopg.Error, SourceError) as exc:  # the rows stay; covered again next time
            log.warning(
                "pg_cdc polling: the %s of rows up to %s in %s failed (%s: %s); the rows stay "
                "and the next batch's planning retries",
                "delete" if self.polling.delete_after_read else "update", committed,
                self.table.qualified, type(exc).__name__,
                exc.diag.sqlstate if isinstance(exc, psycopg.Error) else exc,
            )
            return
        self._done = committed
        if count:
            log.info("pg_cdc polling: %s %d read rows of %s", "deleted" if
                     self.polling.delete_after_read else "marked", count, self.table.qualified)

    def stop(self) -> None:
        self._db.close()

    # -- executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Select the batch's rows with a server-side cursor; yield them as Arrow batches.

        A lost session is selected again only while nothing was given: a row updated meanwhile
        leaves the batch's range, so the rows are not the same the second time."""
        assert isinstance(partition, PollingPartition)
        yield from riding_out_restarts(
            lambda: self._selected(partition), self.options, repeatable=False
        )

    def _selected(self, partition: PollingPartition) -> Generator[pa.RecordBatch, None, None]:
        options = self.options
        table = partition.table
        shape = RowShape(
            table.schema, table.name, table.columns,
            [converter_for_oid(oid) for oid in table.type_oids], table.key, True,
        )
        router = Router(options)
        in_sql = None if router.by_column else table.json_columns()
        query, params = table.select_rows(partition.start, partition.end, in_sql)
        conn = connect_with_retry(options, autocommit=False)
        try:
            conn.read_only = True
            cursor = conn.cursor(name="pg_cdc_polling")
            with cursor if in_sql is not None else _raw_text(cursor, table) as cur:
                cur.execute(query, params)
                while rows := cur.fetchmany(options.fetch_rows):
                    for start in range(0, len(rows), options.batch_rows):
                        yield _arrow(rows[start:start + options.batch_rows], shape, router,
                                     ready=in_sql is not None)
            conn.rollback()
        finally:
            conn.close()


def _frontier(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(FRONTIER_QUERY).fetchone()
    assert row is not None
    return int(row[0])


def _raw_text(cur: psycopg.Cursor[Any], table: PolledTable) -> psycopg.Cursor[Any]:
    """``cur``, loading every value as the text Postgres printed (types psycopg does not know
    are text already): :mod:`~postgres_cdc_source.rows.json.values` converts it exactly as it
    converts the decoders' text, so ``after`` matches theirs byte for byte."""
    oids = {*table.type_oids}
    for info in psycopg.postgres.types:
        oids.add(info.oid)
        if info.array_oid:
            oids.add(info.array_oid)
    for oid in oids:
        cur.adapters.register_loader(oid, TextLoader)
    return cur


def _arrow(
    rows: Sequence[tuple[Any, ...]], shape: RowShape, router: Router, *, ready: bool
) -> pa.RecordBatch:
    """One Arrow batch of ``read`` rows (xmin, row xid, ctid, then the columns' text, or with
    ``ready`` the key and after JSON Postgres built) in schema order."""
    n = len(rows)
    string = pa.string()
    columns = list(zip(*rows, strict=True))
    xmin, row_xid, ctid = (pa.array(c, string) for c in columns[:3])
    # Postgres built the JSON (no route reads a column), or Python converts the text
    keys, afters, values = (columns[3], columns[4], [None] * n) if ready else zip(
        *row_json(shape, (row[3:] for row in rows)), strict=True)
    key = pa.array(keys, string)
    # The version's writer and its key: identical when a batch is read again, new when the row
    # was updated since. A table without a key falls back to the row's physical place.
    ids = pc.binary_join_element_wise(row_xid, pc.coalesce(key, ctid), ":")
    nulls = pa.nulls(n, string)
    stream = topic = partition_key = nulls
    if router.active:
        changes = (Change(0, 0, shape.schema, shape.table, READ_OP, k, None, a, (), v)
                   for k, a, v in zip(keys, afters, values, strict=True))
        stream, topic, partition_key = (
            pa.array(c, string) for c in zip(*map(router.route, changes), strict=True))
    return pa.RecordBatch.from_arrays(
        [
            nulls,  # lsn
            nulls,  # commit_lsn
            xmin.cast(pa.int64()),
            pa.nulls(n, ARROW_SCHEMA.field("commit_ts").type),
            pa.nulls(n, pa.int32()),  # seq
            pa.array([shape.schema] * n, string),
            pa.array([shape.table] * n, string),
            pa.array([READ_OP] * n, string),
            key,
            nulls,  # before
            pa.array(afters, string),
            no_unchanged(n),
            ids,
            stream,
            topic,
            partition_key,
            pa.nulls(n, POSITION_TYPE),  # a row version has no place in the WAL
        ],
        schema=ARROW_SCHEMA,
    )
