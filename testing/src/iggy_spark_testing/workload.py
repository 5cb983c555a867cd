"""Seeded random DML against real tables, with an exact record of what committed.

The delivery promise (every committed change reaches Iggy, in per-key order, nothing invented)
can only be checked against a ground truth that does not come from the pipeline itself. A
:class:`Workload` is that ground truth: it drives several tables through inserts, updates (also
of the primary key), deletes, multi-row statements, interleaved and rolled-back transactions
and rolled-back savepoints, and records what committed, in commit order, with the values in the
JSON form ``pg_cdc`` emits. :mod:`~iggy_spark_testing.oracle` compares
what Iggy holds with that record.

The same seed gives the same statements, so a failure reproduces; what commits can still
differ when a fault interrupts a run. Faults are part of the job: when the server goes away
(a restart, a crash) the workload reconnects, and a ``COMMIT`` whose answer was lost is
settled with ``pg_xact_status`` instead of being guessed, so the record stays exact.

>>> work = Workload(dsn, schema="shop", seed=7)     # doctest: +SKIP
>>> work.setup()                                     # schema and tables, empty
>>> work.run(changes=20_000, rate=2_000)             # bounded, at most 2,000 changes/s
>>> work.transactions[0].changes[0].op               # 'insert'

The tables, the mix and the record's types are in :mod:`~iggy_spark_testing.records`, the
values (whose JSON form is known without asking Postgres) in :mod:`~iggy_spark_testing.values`,
the connections and the settling of lost commits in :mod:`~iggy_spark_testing.sessions`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from iggy_spark_testing.records import (
    TABLES,
    Change,
    Column,
    Key,
    Mix,
    Op,
    Row,
    RunStats,
    TableSpec,
    WorkloadError,
)
from iggy_spark_testing.sessions import Interrupted, Sessions, Txn
from iggy_spark_testing.values import as_param, random_row, random_value

__all__ = ["BackgroundRun", "Workload"]

class _Keys:
    """A set with O(1) random choice: a list plus each member's index in it."""

    def __init__(self) -> None:
        self._items: list[Key] = []
        self._index: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def add(self, key: Key) -> None:
        if key not in self._index:
            self._index[key] = len(self._items)
            self._items.append(key)

    def discard(self, key: Key) -> None:
        i = self._index.pop(key, None)
        if i is None:
            return
        last = self._items.pop()
        if i < len(self._items):
            self._items[i] = last
            self._index[last] = i

    def choice(self, rng: random.Random) -> Key | None:
        return self._items[rng.randrange(len(self._items))] if self._items else None


class Workload(Sessions):
    """Random DML on :data:`TABLES` (or your own) in ``schema``, recording what committed.

    Not thread-safe: drive it from one thread (a background thread is fine) and read
    :attr:`transactions` once :meth:`run` returned. Two connections are held open.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        seed: int = 0,
        tables: Sequence[TableSpec] = TABLES,
        mix: Mix | None = None,
        reconnect_timeout: float = 60.0,
        record: bool = True,
    ) -> None:
        if not tables:
            raise ValueError("a workload needs at least one table")
        super().__init__(dsn, reconnect_timeout, record)
        self.schema = schema
        self.tables = {t.name: t for t in tables}
        self.mix = mix or Mix()
        self.rng = random.Random(seed)
        self._rows: dict[str, dict[Key, Row]] = {t: {} for t in self.tables}
        self._live: dict[str, _Keys] = {t: _Keys() for t in self.tables}
        self._dead: dict[str, _Keys] = {t: _Keys() for t in self.tables}
        self._next_id = 1
        self._sql: dict[tuple[str, str, tuple[str, ...]], sql.Composed] = {}

    # -- public surface -----------------------------------------------------------------------

    def setup(self) -> None:
        """Create the schema and the tables, empty (dropping tables left by an earlier run)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            schema = sql.Identifier(self.schema)
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            for spec in self.tables.values():
                table = self._table(spec.name)
                columns = sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.sql_type))
                    for c in spec.columns
                )
                key = sql.SQL(", ").join(map(sql.Identifier, spec.primary_key))
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
                conn.execute(
                    sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY ({}))").format(table, columns, key)
                )
                if spec.replica_identity_full:
                    conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(table))

    @property
    def changes(self) -> int:
        """Committed changes so far."""
        return self._committed_changes

    def expected_rows(self) -> dict[str, dict[Key, Row]]:
        """The tables as the workload believes they are now: table -> key -> row (JSON form)."""
        return {table: dict(rows) for table, rows in self._rows.items()}

    def run(
        self,
        changes: int | None = None,
        *,
        rate: float | None = None,
        seconds: float | None = None,
        stop: threading.Event | None = None,
    ) -> RunStats:
        """Commit ``changes`` more changes exactly (or run for ``seconds``, or until ``stop``).

        ``rate`` caps committed changes per second, for soak and latency runs. A fault that
        breaks the connections is ridden out for up to ``reconnect_timeout`` seconds; every
        open transaction is then gone, except a commit in doubt, which is looked up.
        """
        if changes is None and seconds is None and stop is None:
            raise ValueError("give changes, seconds or stop: a workload must be bounded")
        stats = RunStats()
        started = time.monotonic()
        target = None if changes is None else self._committed_changes + changes
        pause = stop.wait if stop is not None else time.sleep
        in_doubt = self._in_doubt
        try:
            while not (stop is not None and stop.is_set()):
                elapsed = time.monotonic() - started
                if seconds is not None and elapsed >= seconds:
                    break
                budget = None if target is None else target - self._committed_changes
                if budget is not None and budget <= 0:
                    break
                if rate is not None and stats.changes / rate > elapsed:
                    pause(stats.changes / rate - elapsed)
                    continue
                before = self._committed_changes
                try:
                    self._one_transaction(stats, budget)
                except Interrupted:
                    stats.reconnects += 1
                stats.changes += self._committed_changes - before
        finally:
            stats.seconds = time.monotonic() - started
            stats.in_doubt_commits = self._in_doubt - in_doubt
        return stats

    def start(self, **kwargs: Any) -> BackgroundRun:
        """:meth:`run` on a daemon thread, for running a workload while faults are injected."""
        return BackgroundRun(self, kwargs)

    def close(self) -> None:
        """Roll back whatever is open and close the connections."""
        for conn in self._conns:
            conn.close()
        self._conns = []
        self._open = []

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions -------------------------------------------------------------------------

    def _one_transaction(self, stats: RunStats, budget: int | None) -> None:
        mix = self.mix
        shapes: list[tuple[str, float]] = [
            ("single", mix.single),
            ("multi", mix.multi),
            ("interleaved", mix.interleaved),
            ("rollback", mix.rollback),
            ("savepoint", mix.savepoint),
        ]
        shape = self.rng.choices([s for s, _ in shapes], [w for _, w in shapes])[0]
        cap = mix.max_statements if budget is None else max(1, min(mix.max_statements, budget))
        if shape == "single" or cap == 1:
            self._commit_txn(self._begin(0), 1, stats)
        elif shape == "multi":
            self._commit_txn(self._begin(0), self.rng.randint(2, cap), stats)
        elif shape == "rollback":
            txn = self._begin(0)
            self._statements(txn, self.rng.randint(1, mix.max_statements))
            self._finish(txn, commit=False)
            stats.rolled_back += 1
        elif shape == "savepoint":
            self._savepoint_txn(cap, stats)
        else:
            self._interleaved(cap, stats)

    def _commit_txn(self, txn: Txn, statements: int, stats: RunStats) -> None:
        self._statements(txn, statements)
        self._finish(txn, commit=True)
        stats.transactions += 1

    def _savepoint_txn(self, cap: int, stats: RunStats) -> None:
        """Changes, SAVEPOINT, changes rolled back to it, more changes, COMMIT."""
        txn = self._begin(0)
        first = self.rng.randint(1, max(1, cap - 1))
        self._statements(txn, first)
        self._exec(txn, [("SAVEPOINT wl_sp", ())])
        txn.savepoint = (len(txn.changes), dict(txn.overlay))
        self._statements(txn, self.rng.randint(1, 4))
        self._exec(txn, [("ROLLBACK TO SAVEPOINT wl_sp", ())])
        kept, overlay = txn.savepoint
        del txn.changes[kept:]
        txn.overlay = overlay  # reserved keys stay reserved: harmless, and they are still locked
        txn.savepoint = None
        self._statements(txn, max(0, min(cap - first, self.rng.randint(0, 3))))
        self._finish(txn, commit=True)
        stats.transactions += 1

    def _interleaved(self, cap: int, stats: RunStats) -> None:
        """A begins; B begins, works and commits; A works more, then commits or rolls back."""
        a = self._begin(0)
        self._statements(a, self.rng.randint(1, max(1, cap // 2)))
        b = self._begin(1)
        left = cap - len(a.changes)
        self._statements(b, self.rng.randint(1, max(1, left)) if left > 0 else 1)
        self._finish(b, commit=True)
        left = cap - len(a.changes) - len(b.changes)
        if left > 0:
            self._statements(a, self.rng.randint(0, left))
        commit_a = self.rng.random() >= 0.2
        self._finish(a, commit=commit_a)
        stats.interleaved += 1
        stats.transactions += 1 + commit_a
        stats.rolled_back += not commit_a

    # -- statements ---------------------------------------------------------------------------

    def _statements(self, txn: Txn, count: int) -> None:
        """Plan ``count`` row changes in ``txn``'s view of the tables and run them in a pipeline."""
        planned: list[tuple[sql.Composed | str, Sequence[Any]]] = []
        expect_one: list[bool] = []
        made = 0
        while made < count:
            spec = self.tables[self.rng.choice(list(self.tables))]
            weights = (self.mix.insert, self.mix.update, self.mix.delete)
            op = self.rng.choices(("insert", "update", "delete"), weights)[0]
            statement = None
            if op == "update":
                statement = self._plan_update(txn, spec)
            elif op == "delete":
                statement = self._plan_delete(txn, spec)
            if statement is None:  # nothing to update/delete that no other txn holds: insert
                rows = 1
                if count - made > 1 and self.rng.random() < self.mix.multi_row:
                    rows = self.rng.randint(2, min(5, count - made))
                statement = self._plan_insert(txn, spec, rows)
                made += rows
                expect_one.append(False)
            else:
                made += 1
                expect_one.append(True)
            planned.append(statement)
        cursors = self._exec(txn, planned)
        for cur, one in zip(cursors, expect_one, strict=True):
            if one and cur.rowcount != 1:
                raise WorkloadError(
                    f"a statement changed {cur.rowcount} rows instead of 1: the model of "
                    f"{self.schema!r} disagrees with the database (did someone else change it?)"
                )

    def _plan_insert(
        self, txn: Txn, spec: TableSpec, rows: int
    ) -> tuple[sql.Composed, Sequence[Any]]:
        params: list[Any] = []
        for _ in range(rows):
            key = self._new_key(txn, spec)
            row = random_row(self.rng, self.mix, spec, key)
            self._record(txn, spec, "insert", None, key, row)
            params += [as_param(c, row[c.name]) for c in spec.columns]
        names = tuple(c.name for c in spec.columns)
        one = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(names)))
        query = sql.SQL("INSERT INTO {} ({}) VALUES {}").format(
            self._table(spec.name),
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join([one] * rows),
        )
        return query, params

    def _plan_update(self, txn: Txn, spec: TableSpec) -> tuple[sql.Composed, Sequence[Any]] | None:
        key = self._pick_live(txn, spec)
        if key is None:
            return None
        old = self._view(txn, spec.name, key)
        assert old is not None
        payload = spec.payload_columns
        changed = self.rng.sample(payload, self.rng.randint(1, len(payload)))
        row = dict(old)
        for column in changed:
            row[column.name] = random_value(self.rng, self.mix, column)
        new_key = key
        if self.rng.random() < self.mix.key_change:
            new_key = self._new_key(txn, spec)
            row.update(spec.key_json(new_key))
        set_columns = tuple(c.name for c in changed) + (spec.primary_key if new_key != key else ())
        query = self._cached("update", spec, set_columns)
        params = [as_param(self._column(spec, n), row[n]) for n in set_columns] + list(key)
        self._record(txn, spec, "update", key, new_key, row)
        return query, params

    def _plan_delete(self, txn: Txn, spec: TableSpec) -> tuple[sql.Composed, Sequence[Any]] | None:
        key = self._pick_live(txn, spec)
        if key is None:
            return None
        self._record(txn, spec, "delete", key, None, None)
        return self._cached("delete", spec, ()), list(key)

    def _cached(self, op: str, spec: TableSpec, set_columns: tuple[str, ...]) -> sql.Composed:
        """``UPDATE``/``DELETE`` by primary key, composed once per table and column set."""
        cache_key = (op, spec.name, set_columns)
        query = self._sql.get(cache_key)
        if query is None:
            where = sql.SQL(" AND ").join(
                sql.SQL("{} = %s").format(sql.Identifier(k)) for k in spec.primary_key
            )
            if op == "delete":
                query = sql.SQL("DELETE FROM {} WHERE {}").format(self._table(spec.name), where)
            else:
                assignments = sql.SQL(", ").join(
                    sql.SQL("{} = %s").format(sql.Identifier(n)) for n in set_columns
                )
                query = sql.SQL("UPDATE {} SET {} WHERE {}").format(
                    self._table(spec.name), assignments, where
                )
            self._sql[cache_key] = query
        return query

    def _record(
        self, txn: Txn, spec: TableSpec, op: Op, key: Key | None, new_key: Key | None,
        row: Row | None,
    ) -> None:
        """Add a planned change to ``txn`` and to its view of the table."""
        table = spec.name
        txn.changes.append(Change(0, len(txn.changes), table, op, key, new_key, row))
        if key is not None:
            txn.overlay[(table, key)] = None
            txn.reserved.add((table, key))
        if new_key is not None:
            txn.overlay[(table, new_key)] = row
            txn.reserved.add((table, new_key))

    # -- keys and the model -------------------------------------------------------------------

    def _view(self, txn: Txn, table: str, key: Key) -> Row | None:
        """The row ``key`` holds as ``txn`` sees it (its own changes first)."""
        if (table, key) in txn.overlay:
            return txn.overlay[(table, key)]
        return self._rows[table].get(key)

    def _held_elsewhere(self, txn: Txn, item: tuple[str, Key]) -> bool:
        """Another open transaction touched this key: using it would wait on its lock."""
        return any(other is not txn and item in other.reserved for other in self._open)

    def _pick_live(self, txn: Txn, spec: TableSpec) -> Key | None:
        """A key that exists in ``txn``'s view and that no other open transaction holds."""
        own = [k for (t, k), row in txn.overlay.items() if t == spec.name and row is not None]
        for _ in range(6):
            if own and self.rng.random() < 0.2:
                key: Key | None = self.rng.choice(own)
            else:
                key = self._live[spec.name].choice(self.rng)
            if key is None:
                continue
            if self._view(txn, spec.name, key) is not None and not self._held_elsewhere(
                txn, (spec.name, key)
            ):
                return key
        return None

    def _new_key(self, txn: Txn, spec: TableSpec) -> Key:
        """A key free in ``txn``'s view: usually never used, sometimes one that was deleted."""
        dead = self._dead[spec.name].choice(self.rng) if self.rng.random() < 0.1 else None
        if (
            dead is not None
            and self._view(txn, spec.name, dead) is None
            and not self._held_elsewhere(txn, (spec.name, dead))
        ):
            return dead
        self._next_id += 1
        extra = tuple(self.rng.randint(1, 9) for _ in spec.primary_key[1:])
        return (self._next_id, *extra)

    def _apply(self, txn: Txn) -> None:
        for (table, key), row in txn.overlay.items():
            if row is None:
                if self._rows[table].pop(key, None) is not None:
                    self._live[table].discard(key)
                    self._dead[table].add(key)
            else:
                self._rows[table][key] = row
                self._live[table].add(key)
                self._dead[table].discard(key)

    @staticmethod
    def _column(spec: TableSpec, name: str) -> Column:
        return next(c for c in spec.columns if c.name == name)

    def _table(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.schema, name)

class BackgroundRun:
    """A :meth:`Workload.run` on a daemon thread; :meth:`join` returns its stats or raises."""

    def __init__(self, work: Workload, kwargs: Mapping[str, Any]) -> None:
        self.work = work
        self._outcome: RunStats | BaseException | None = None
        self._thread = threading.Thread(
            target=self._target, args=(dict(kwargs),), name="workload", daemon=True
        )
        self._thread.start()

    def _target(self, kwargs: dict[str, Any]) -> None:
        try:
            self._outcome = self.work.run(**kwargs)
        except BaseException as exc:  # handed over to join()
            self._outcome = exc

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> RunStats:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise WorkloadError(f"the workload did not finish within {timeout:g}s")
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome
