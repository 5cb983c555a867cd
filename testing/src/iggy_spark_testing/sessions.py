"""A :class:`~iggy_spark_testing.workload.Workload`'s sessions: connections, commits, faults.

When the server goes away (a restart, a crash) the workload reconnects, and a ``COMMIT`` whose
answer was lost is settled with ``pg_xact_status`` instead of being guessed, so the record of
what committed stays exact.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from iggy_spark_testing.records import Change, Key, Row, Transaction, WorkloadError

__all__ = ["Interrupted", "Sessions", "Txn"]

_XID_MASK = 0xFFFF_FFFF
"""``pg_current_xact_id()`` is epoch << 32 | xid; logical decoding reports the 32-bit xid."""


class Interrupted(Exception):
    """The connection broke; open transactions are gone (settled if they were committing)."""


@dataclass
class Txn:
    """An open transaction: its connection, planned changes and its view of the tables."""

    conn: psycopg.Connection[Any]
    xid: int = 0
    changes: list[Change] = field(default_factory=list)
    overlay: dict[tuple[str, Key], Row | None] = field(default_factory=dict)
    reserved: set[tuple[str, Key]] = field(default_factory=set)
    savepoint: tuple[int, dict[tuple[str, Key], Row | None]] | None = None


class Sessions:
    """The connections of a workload and the record of what they committed."""

    def __init__(self, dsn: str, reconnect_timeout: float, record: bool) -> None:
        self.dsn = dsn
        self.reconnect_timeout = reconnect_timeout
        self.record = record
        """Keep :attr:`transactions`. A soak of millions of changes turns it off: the oracle
        then has nothing to compare with, but memory stays flat (only the tables are kept)."""
        self.transactions: list[Transaction] = []
        """Committed transactions, in commit order (empty unless :attr:`record`)."""
        self._committed_transactions = 0
        self._committed_changes = 0
        self._in_doubt = 0
        self._open: list[Txn] = []
        self._conns: list[psycopg.Connection[Any]] = []

    def _apply(self, txn: Txn) -> None:
        """Bring the model of the tables up to a committed transaction."""
        raise NotImplementedError

    def _connection(self, slot: int) -> psycopg.Connection[Any]:
        while len(self._conns) <= slot:
            self._conns.append(self._connect())
        conn = self._conns[slot]
        if conn.closed:
            conn = self._conns[slot] = self._connect()
        return conn

    def _connect(self) -> psycopg.Connection[Any]:
        deadline = time.monotonic() + self.reconnect_timeout
        while True:
            try:
                return psycopg.connect(self.dsn, application_name="pg_cdc_workload")
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise WorkloadError(
                        f"Postgres unreachable for {self.reconnect_timeout:g}s: "
                        f"{exc.__class__.__name__}"
                    ) from None
                time.sleep(0.5)

    def _begin(self, slot: int) -> Txn:
        txn = Txn(self._connection(slot))
        self._open.append(txn)
        [cur] = self._exec(txn, [("SELECT pg_current_xact_id()::text::int8", ())])
        row = cur.fetchone()
        assert row is not None
        txn.xid = int(row[0])
        return txn

    def _exec(
        self, txn: Txn, statements: Sequence[tuple[sql.Composed | str, Sequence[Any]]]
    ) -> list[psycopg.Cursor[Any]]:
        """Run statements in one round trip (pipeline mode); a broken connection interrupts."""
        try:
            with txn.conn.pipeline():
                cursors = [txn.conn.execute(query, params) for query, params in statements]
            return cursors
        except psycopg.OperationalError:
            self._lose_connections()
            raise Interrupted from None

    def _finish(self, txn: Txn, *, commit: bool) -> None:
        """COMMIT (and record) or ROLLBACK; a COMMIT whose answer is lost is looked up."""
        try:
            if commit:
                txn.conn.commit()
            else:
                txn.conn.rollback()
        except psycopg.OperationalError:
            self._lose_connections()
            if commit:
                self._in_doubt += 1
                if self._settle(txn.xid):
                    self._committed(txn)
            raise Interrupted from None
        self._open.remove(txn)
        if commit:
            self._committed(txn)

    def _committed(self, txn: Txn) -> None:
        xid = txn.xid & _XID_MASK
        changes = tuple(
            Change(xid, c.seq, c.table, c.op, c.key, c.new_key, c.row) for c in txn.changes
        )
        if changes:
            if self.record:
                self.transactions.append(Transaction(self._committed_transactions, xid, changes))
            self._committed_transactions += 1
            self._committed_changes += len(changes)
        self._apply(txn)

    def _settle(self, full_xid: int) -> bool:
        """Whether a transaction whose COMMIT got no answer did commit (asks a new session)."""
        deadline = time.monotonic() + self.reconnect_timeout
        while True:
            with self._connect() as conn:
                query = "SELECT pg_xact_status(%s::text::xid8)"
                try:
                    row = conn.execute(query, (str(full_xid),)).fetchone()
                except psycopg.errors.InvalidParameterValue:
                    # "transaction ID ... is in the future": a crash (immediate stop) lost the
                    # WAL that assigned the id, so its commit record never became durable either
                    return False
            status = row[0] if row else None
            if status in ("committed", "aborted"):
                return bool(status == "committed")
            if time.monotonic() > deadline:
                raise WorkloadError(f"transaction {full_xid} still {status!r}; cannot settle it")
            time.sleep(0.2)

    def _lose_connections(self) -> None:
        """A fault broke a connection: drop both (rolling back whatever they had open)."""
        for conn in self._conns:
            conn.close()
        self._conns = []
        self._open = []
