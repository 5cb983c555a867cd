"""Partitioned tables as the rules name them: a table the include/exclude rules match is
captured with every partition below it, those created or attached later included, and its
changes, snapshot and backfill rows carry its own name.

A table is a *capture unit* when the rules keep it and keep none of its partition ancestors:
the topmost kept table of its partition tree. Every change of a partition belongs to its
topmost kept ancestor, else to itself if kept (:func:`owner`); that is how pgoutput publishes
a partition's changes under ``publish_via_partition_root`` when the managed pair holds the
units (:mod:`~postgres_cdc_source.replication.publication`), and how the test_decoding decoder
names them, asking the catalog for a partition's ancestors (:func:`owner_lookup`).

The catalog read here is the current one: test_decoding's changes of a partition detached (or
dropped) before they are read are named by the partition, pgoutput's by what the catalog was
when they were written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

__all__ = [
    "ANCESTORS", "RELATIONS", "Relation", "captured", "owner", "owner_lookup", "relations",
    "unmatched", "warn_unmatched",
]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]
Keeps = Callable[[str, str], bool]
Named = tuple[str, str]

ANCESTORS = """\
CASE WHEN c.relispartition THEN ARRAY(
  SELECT ARRAY[an.nspname::text, ac.relname::text]
  FROM pg_catalog.pg_partition_ancestors(c.oid) WITH ORDINALITY AS a(relid, i)
  JOIN pg_catalog.pg_class AS ac ON ac.oid = a.relid
  JOIN pg_catalog.pg_namespace AS an ON an.oid = ac.relnamespace
  WHERE a.relid <> c.oid ORDER BY a.i) ELSE '{}'::text[] END"""
"""SQL: the partition ancestors of the table ``c`` as ``(schema, table)`` pairs, nearest
first (none for a table that is no partition)."""

RELATIONS = f"""\
SELECT n.nspname::text, c.relname::text, c.relkind = 'p', {ANCESTORS}
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_'
ORDER BY 1, 2"""
"""Every table a slot can send changes of (permanent ordinary and partitioned tables)."""

_PARTITIONS = f"""\
SELECT n.nspname::text, c.relname::text, {ANCESTORS} FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relispartition"""


@dataclass(frozen=True)
class Relation:
    """A table, whether it is partitioned, and its partition ancestors (nearest first)."""

    schema: str
    name: str
    partitioned: bool = False
    ancestors: tuple[Named, ...] = ()

    @property
    def named(self) -> Named:
        return self.schema, self.name


def relations(conn: Conn) -> list[Relation]:
    """:data:`RELATIONS` on ``conn``, in name order."""
    return [Relation(schema, name, bool(partitioned), tuple((a[0], a[1]) for a in ancestors))
            for schema, name, partitioned, ancestors in conn.execute(RELATIONS).fetchall()]


def owner(named: Named, ancestors: Iterable[Named], keeps: Keeps) -> Named | None:
    """The table whose changes a table's are: its topmost ancestor the rules keep, else the
    table itself if they keep it, else ``None`` (not captured)."""
    found = named if keeps(*named) else None
    for ancestor in ancestors:  # nearest first: the last kept is the topmost
        if keeps(*ancestor):
            found = ancestor
    return found


def captured(tables: Iterable[Relation], keeps: Keeps) -> list[Relation]:
    """The capture units among ``tables``: kept, with no kept ancestor."""
    return [t for t in tables if owner(t.named, t.ancestors, keeps) == t.named]


def owner_lookup(conn: Conn, keeps: Keeps) -> Callable[[str, str], Named | None]:
    """``(schema, table) -> ``:func:`owner`, from every partition's ancestors as ``conn``'s
    catalog lists them at the first call (one query, however many tables a peek meets; a
    partition changed in the WAL a peek reads was created before the peek began). A table not
    listed (no partition, or gone) is its own."""
    known: dict[Named, tuple[Named, ...]] | None = None

    def lookup(schema: str, table: str) -> Named | None:
        nonlocal known
        if known is None:
            known = {(s, t): tuple((a[0], a[1]) for a in ancestors)
                     for s, t, ancestors in conn.execute(_PARTITIONS).fetchall()}
        return owner((schema, table), known.get((schema, table), ()), keeps)
    return lookup


def unmatched(tables: list[Relation], keeps: Keeps, rules: bool) -> list[str]:
    """Warnings about what the rules match: nothing at all (``rules``: some are given), or
    partitions of a partitioned table they do not match; empty when all is as expected."""
    units = captured(tables, keeps)
    if rules and not units:
        return ["pg_cdc: include_tables/exclude_tables match no table of the database: "
                "nothing is captured until a table they match is created"]
    roots: dict[Named, list[Named]] = {}
    for t in units:
        if t.ancestors:
            roots.setdefault(t.ancestors[-1], []).append(t.named)
    return [
        f"pg_cdc: include_tables/exclude_tables match partitions of the partitioned table "
        f"{_shown([root])} ({_shown(parts)}) but not the table itself: their changes name each "
        f"partition (topic_from=table makes a topic per partition), and a partition created "
        f"or attached later is captured only if they match its name; match {_shown([root])} "
        "to capture it as one table (docs: pg_cdc, Partitioned tables)"
        for root, parts in sorted(roots.items())
    ]


def _shown(names: list[Named], most: int = 5) -> str:
    text = ", ".join(f"{s}.{t}" for s, t in names[:most])
    return text + (f" and {len(names) - most} more" if len(names) > most else "")


def warn_unmatched(conn: Conn, keeps: Keeps, rules: bool) -> None:
    """Log :func:`unmatched`'s warnings (at start)."""
    for warning in unmatched(relations(conn), keeps, rules):
        log.warning("%s", warning)
