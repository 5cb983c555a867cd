"""Keeping the managed publications' membership in step with the filters and each table's
replica identity (see :mod:`.publication`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.partitions import ANCESTORS, owner
from postgres_cdc_source.replication.publication import (
    HAS_IDENTITY,
    admit,
    inserts_name,
    managed_oids,
)

__all__ = ["Table", "listed", "sync"]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]

_LOCK_TIMEOUT = "2s"

# Every table a publication can hold (permanent ordinary and partitioned tables, partitions
# included), whether it has an identity, where it is now, and its partition ancestors.
_TABLES = f"""
SELECT c.oid, n.nspname, c.relname, {HAS_IDENTITY},
  EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prrelid = c.oid AND r.prpubid = %(full)s),
  EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prrelid = c.oid AND r.prpubid = %(ins)s),
  {ANCESTORS}
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname !~ '^pg_(toast|temp_)'
ORDER BY 2, 3
"""


@dataclass(frozen=True)
class Table:
    """A table a managed publication can hold, and where it is now."""

    oid: int
    schema: str
    name: str
    has_identity: bool
    in_full: bool
    in_inserts: bool
    ancestors: tuple[tuple[str, str], ...] = ()  # partition ancestors, nearest first

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)


def sync(conn: Conn, options: CdcOptions) -> None:
    """Bring the managed pair's membership up to date (no-op for a publication we do not manage).

    Called when ``pg_cdc`` starts and whenever a batch is planned. A failure to alter (privileges,
    a table locked for longer than ``_LOCK_TIMEOUT``) is logged and retried at the next planning:
    tables it could not add are named in the warning, because their changes are not captured yet.
    """
    oids = managed_oids(conn, options.publication)
    if oids is None:
        return
    admit(conn, options)
    full, ins = options.publication, inserts_name(options.publication)
    tables = [
        Table(int(oid), schema, table, bool(ident), bool(in_full), bool(in_ins),
              tuple((a[0], a[1]) for a in ancestors))
        for oid, schema, table, ident, in_full, in_ins, ancestors in conn.execute(
            _TABLES, {"full": oids[0], "ins": oids[1]}
        ).fetchall()
    ]
    # The pair holds the capture units: a partitioned table the rules keep stands for its
    # partitions (publish_via_partition_root), which are not members of their own.
    wanted = [t for t in tables if owner((t.schema, t.name), t.ancestors, options.keeps)
              == (t.schema, t.name)]
    units = {t.oid for t in wanted}
    unwanted = [t for t in tables if t.oid not in units]
    # Order matters: first stop publishing updates where they would fail, then add, then drop.
    _alter(conn, full, "DROP", [t for t in tables if t.in_full and not t.has_identity])
    _alter(conn, ins, "ADD", [t for t in wanted if not t.has_identity and not t.in_inserts])
    _add_with_identity(conn, full, [t for t in wanted if t.has_identity and not t.in_full])
    _alter(conn, ins, "DROP", [t for t in wanted if t.has_identity and t.in_inserts])
    _alter(conn, full, "DROP", [t for t in unwanted if t.in_full and t.has_identity])
    _alter(conn, ins, "DROP", [t for t in unwanted if t.in_inserts])


def _statement(publication: str, verb: str, tables: list[Table]) -> sql.Composed:
    return sql.SQL("ALTER PUBLICATION {} {} TABLE {}").format(
        sql.Identifier(publication), sql.SQL(verb), sql.SQL(", ").join(t.ident for t in tables)
    )


def _alter(conn: Conn, publication: str, verb: str, tables: list[Table]) -> None:
    if not tables:
        return
    try:
        with conn.transaction():
            _set_lock_timeout(conn)
            conn.execute(_statement(publication, verb, tables))
        log.info("publication %s: %s %s", publication, verb.lower(), listed(tables))
    except (pgerrors.UndefinedTable, pgerrors.DuplicateObject):
        pass  # a table dropped or moved concurrently: the next sync sees the new state
    except (pgerrors.LockNotAvailable, pgerrors.InsufficientPrivilege) as exc:
        _not_synced(publication, verb, tables, exc)


def _set_lock_timeout(conn: Conn) -> None:
    """Never queue behind a long ``ALTER TABLE``/``VACUUM`` (and block others behind us)."""
    conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(_LOCK_TIMEOUT)))


def _add_with_identity(conn: Conn, publication: str, tables: list[Table]) -> None:
    """Add tables to the publication that publishes updates, only if they still have an identity.

    The lock makes the identity check and the ``ADD`` atomic against ``ALTER TABLE``; it does not
    conflict with the owner's reads and writes, and is given up after ``_LOCK_TIMEOUT``.
    """
    if not tables:
        return
    try:
        with conn.transaction():
            _set_lock_timeout(conn)
            conn.execute(
                sql.SQL("LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE").format(
                    sql.SQL(", ").join(t.ident for t in tables)
                )
            )
            still = {
                int(oid)
                for (oid,) in conn.execute(
                    f"SELECT c.oid FROM pg_class c WHERE c.oid = ANY(%s) AND {HAS_IDENTITY}",
                    ([t.oid for t in tables],),
                ).fetchall()
            }
            keep = [t for t in tables if t.oid in still]
            if keep:
                conn.execute(_statement(publication, "ADD", keep))
        if keep:
            log.info("publication %s: add %s", publication, listed(keep))
    except (pgerrors.UndefinedTable, pgerrors.DuplicateObject):
        pass  # dropped or added concurrently: the next sync sees the new state
    except (pgerrors.LockNotAvailable, pgerrors.InsufficientPrivilege) as exc:
        _not_synced(publication, "ADD", tables, exc)


def _not_synced(publication: str, verb: str, tables: list[Table], exc: psycopg.Error) -> None:
    log.warning(
        "pg_cdc: could not %s %s %s publication %s (%s): %s; retrying at the next batch",
        verb.lower(),
        listed(tables),
        "to" if verb == "ADD" else "from",
        publication,
        exc.diag.message_primary,
        "their changes are not captured yet" if verb == "ADD" else "membership is stale",
    )


def listed(tables: list[Table], most: int = 10) -> str:
    shown = ", ".join(f"{t.schema}.{t.name}" for t in tables[:most])
    return shown + (f" and {len(tables) - most} more" if len(tables) > most else "")

