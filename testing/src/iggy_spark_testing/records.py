"""What a :class:`~iggy_spark_testing.workload.Workload` is shaped by and what it records.

The tables it drives (:class:`TableSpec`, :data:`TABLES`), the mix of operations and values
(:class:`Mix`), and the record of what committed (:class:`Transaction`, :class:`Change`), which
:mod:`~iggy_spark_testing.oracle` compares with what Iggy holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "TABLES",
    "Change",
    "Column",
    "Key",
    "Mix",
    "Op",
    "Row",
    "RunStats",
    "TableSpec",
    "Transaction",
    "WorkloadError",
    "iter_changes",
]

Kind = Literal["int", "text", "numeric", "jsonb"]
Op = Literal["insert", "update", "delete"]
Key = tuple[Any, ...]
Row = dict[str, Any]


class WorkloadError(RuntimeError):
    """The database did not do what the workload's model predicted, or stayed unreachable."""


@dataclass(frozen=True)
class Column:
    """One column: its SQL type (trusted text, never user input) and the kind of values it gets."""

    name: str
    sql_type: str
    kind: Kind


@dataclass(frozen=True)
class TableSpec:
    """A table the workload creates and drives. Primary-key columns must be integers."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    replica_identity_full: bool = False

    def __post_init__(self) -> None:
        kinds = {c.name: c.kind for c in self.columns}
        if not self.primary_key or any(kinds.get(k) != "int" for k in self.primary_key):
            raise ValueError(f"table {self.name!r}: the primary key must be integer columns")
        if all(c.name in self.primary_key for c in self.columns):
            raise ValueError(f"table {self.name!r} needs at least one non-key column")

    @property
    def payload_columns(self) -> tuple[Column, ...]:
        """The columns an update may change besides the key."""
        return tuple(c for c in self.columns if c.name not in self.primary_key)

    def key_of(self, row: Mapping[str, Any]) -> Key:
        return tuple(row[k] for k in self.primary_key)

    def key_json(self, key: Key) -> Row:
        return dict(zip(self.primary_key, key, strict=True))


TABLES: tuple[TableSpec, ...] = (
    TableSpec(
        "accounts",
        (
            Column("id", "integer", "int"),
            Column("owner", "text", "text"),
            Column("balance", "numeric(14,2)", "numeric"),
            Column("profile", "jsonb", "jsonb"),
        ),
        ("id",),
    ),
    # REPLICA IDENTITY FULL: Postgres logs the whole old row, so `before` is set and `key` is
    # the whole old row; the oracle must still find the row by its primary key.
    TableSpec(
        "orders",
        (
            Column("id", "bigint", "int"),
            Column("account", "integer", "int"),
            Column("note", "text", "text"),
            Column("total", "numeric(14,2)", "numeric"),
            Column("items", "jsonb", "jsonb"),
        ),
        ("id",),
        replica_identity_full=True,
    ),
    # A composite key, so `key` objects have two members and key changes can touch either.
    TableSpec(
        "line_items",
        (
            Column("id", "integer", "int"),
            Column("line", "integer", "int"),
            Column("sku", "text", "text"),
            Column("qty", "numeric(14,2)", "numeric"),
            Column("meta", "jsonb", "jsonb"),
        ),
        ("id", "line"),
    ),
)
"""The default tables. Every primary key starts with ``id``, so ``partition_key_from=id`` routes
every change of a row, in every table, to one partition."""


@dataclass(frozen=True)
class Change:
    """One committed row change, as ``pg_cdc`` must report it.

    ``key`` is the row's primary key before the change (update, delete); ``new_key`` and ``row``
    describe it after (insert, update). ``row`` holds every column in ``pg_cdc``'s JSON form.
    ``xid`` is the 32-bit transaction id and ``seq`` the change's position in its transaction,
    which together name the change in ``pg_cdc``'s output.
    """

    xid: int
    seq: int
    table: str
    op: Op
    key: Key | None
    new_key: Key | None
    row: Row | None

    @property
    def identity(self) -> Key:
        """The key the row has once the change is applied (the old one for a delete)."""
        key = self.new_key if self.new_key is not None else self.key
        assert key is not None
        return key


@dataclass(frozen=True)
class Transaction:
    """A committed transaction: its place in commit order, its xid and its changes in order."""

    index: int
    xid: int
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Mix:
    """The shape of the workload: operation and transaction weights, value odds, sizes.

    Weights are relative. An ``interleaved`` transaction is a pair on two connections: B
    begins after A and commits before A, so commit order differs from start order.
    """

    insert: float = 0.45
    update: float = 0.35
    delete: float = 0.20
    key_change: float = 0.1
    """Share of updates that also change the primary key."""
    single: float = 0.35
    multi: float = 0.30
    interleaved: float = 0.15
    rollback: float = 0.08
    savepoint: float = 0.07
    """A transaction that rolls back to a savepoint in its middle and then commits."""
    max_statements: int = 12
    multi_row: float = 0.15
    """Odds that an insert is one statement of several rows."""
    null: float = 0.05
    hostile: float = 0.3
    toast: float = 0.02
    """Odds that a text value is a few kilobytes of incompressible text (stored out of line)."""

    def __post_init__(self) -> None:
        for name in ("key_change", "multi_row", "null", "hostile", "toast"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"Mix.{name} must be between 0 and 1")
        if self.max_statements < 2:
            raise ValueError("Mix.max_statements must be at least 2")


@dataclass
class RunStats:
    """What one :meth:`Workload.run` did."""

    transactions: int = 0
    changes: int = 0
    rolled_back: int = 0
    interleaved: int = 0
    reconnects: int = 0
    in_doubt_commits: int = 0
    """Commits whose answer was lost to a fault and were settled with ``pg_xact_status``."""
    seconds: float = 0.0

    @property
    def changes_per_second(self) -> float:
        return self.changes / self.seconds if self.seconds else 0.0


def iter_changes(transactions: Sequence[Transaction]) -> Iterator[Change]:
    """Every committed change, in commit order."""
    for txn in transactions:
        yield from txn.changes
