"""``include_schema_changes``: a change with op ``ddl`` where a captured table's columns change.

Logical decoding carries no DDL, but every change comes with its table's columns as of that
change: pgoutput sends a Relation message (names, type OIDs and modifiers, key flags) before a
table's first change in a peek session and again before its first change after the table
changed; test_decoding prints each column's name and type with an insert's or update's new
tuple (a delete prints only the old key, a truncate no columns). A :class:`ColumnTracker` holds,
per captured table, the columns of the last such change the stream read; a decoder hands it the
columns of each one and, where they differ in names or types, puts a ``ddl`` change right before
that change, in its transaction, counted in ``seq`` like a transactional logical message.

A table the tracker holds nothing for (its first change since the query started) sets its
columns without a row: nothing says what they were before. Otherwise the row depends only on
the tracker's starting state and the WAL read, so the driver gives every read the state where
it starts (:mod:`postgres_cdc_source.stream.column_states`), and replays give the same rows.

The state's columns are what the plugin reports: ``(name, type OID, type modifier, key)`` for
pgoutput, ``(name, type name)`` for test_decoding (which prints no OID, modifier or key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from postgres_cdc_source.decoding.changes import Change

__all__ = ["DDL", "ColumnState", "ColumnTracker", "Columns", "Describe", "state_from_json",
           "state_json"]

DDL: Final = "ddl"

Columns = tuple[tuple[Any, ...], ...]
"""One table's columns in table order, each as its plugin reports it (see the module
docstring)."""
ColumnState = tuple[tuple[str, str, Columns], ...]
"""``(schema, table, columns)`` per table, sorted: what a tracker holds, hashable and
comparable, as offsets and partitions carry it."""
Describe = Callable[[Columns, Columns, frozenset[str]], tuple[str, str]]
"""``(old, new, key names) -> (before, after)``: the JSON lists of a ``ddl`` change. ``key
names`` are the catalog's, for columns whose plugin does not flag the key (test_decoding)."""


def _compared(columns: Columns) -> tuple[tuple[Any, ...], ...]:
    """What tells two column lists apart: names and types (pgoutput's key flag is not a column
    change, and test_decoding cannot show it)."""
    return tuple(column[:3] for column in columns)


class ColumnTracker:
    """The columns of each captured table as of the last change read; see the module
    docstring. ``describe`` renders a ``ddl`` change's lists (``None``: the driver, which only
    needs the state, and leaves them null)."""

    __slots__ = ("_columns", "_describe")

    def __init__(self, state: ColumnState = (), describe: Describe | None = None) -> None:
        self._columns: dict[tuple[str, str], Columns] = {(s, t): c for s, t, c in state}
        self._describe = describe

    def state(self) -> ColumnState:
        return tuple(sorted((s, t, c) for (s, t), c in self._columns.items()))

    def known(self, schema: str, table: str) -> Columns | None:
        return self._columns.get((schema, table))

    def seen(self, schema: str, table: str, columns: Columns) -> Columns | None:
        """Record the columns of a change of ``schema.table``; the ones held before when they
        differ in names or types (a ``ddl`` change is due), else ``None``."""
        old = self._columns.get((schema, table))
        self._columns[schema, table] = columns
        if old is None or _compared(old) == _compared(columns):
            return None
        return old

    def change(self, lsn: int, seq: int, schema: str, table: str, old: Columns, new: Columns,
               keys: Iterable[str] = ()) -> Change:
        """The ``ddl`` change before the change at ``lsn``: no key, ``before`` and ``after`` the
        old and new column lists."""
        before = after = None
        if self._describe is not None:
            before, after = self._describe(old, new, frozenset(keys))
        return Change(lsn, seq, schema, table, DDL, None, before, after, ())


def state_json(state: ColumnState) -> list[list[Any]]:
    """The state as offsets write it: ``[[schema, table, [[column...], ...]], ...]``."""
    return [[schema, table, [list(c) for c in columns]] for schema, table, columns in state]


def state_from_json(value: Sequence[Sequence[Any]]) -> ColumnState:
    """:func:`state_json` read back."""
    return tuple((str(schema), str(table), tuple(tuple(c) for c in columns))
                 for schema, table, columns in value)
