"""The pgoutput publications ``pg_cdc`` creates, kept safe for the owner's writes.

Postgres refuses ``UPDATE``/``DELETE`` on a table that is in a publication publishing updates or
deletes but has no usable replica identity (``DEFAULT`` without a primary key, ``NOTHING``, or a
dropped ``USING INDEX`` index). A ``FOR ALL TABLES`` publication therefore breaks the
application on every such table the moment it is created. So ``pg_cdc`` never creates one;
it manages a *pair* of publications instead:

* ``<publication>`` publishes insert, update, delete and truncate, and holds the captured tables
  that have a usable replica identity;
* ``<publication>_inserts`` publishes only insert and truncate (which never make a write fail),
  and holds the captured tables without one.

Both are peeked together (pgoutput takes several ``publication_names``). Membership is
re-synchronised on the driver whenever a batch is planned (:func:`sync`): new tables that match
the filters join, tables that gained or lost their identity move, tables that no longer match
leave. Both publications carry :data:`MARKER` as their comment; a publication without it (the
user's own, or one created by hand for ``create_slot=false``) is never altered.

Races. A table is added to ``<publication>`` inside a transaction that first takes ``SHARE
UPDATE EXCLUSIVE`` on it (which ordinary reads and writes do not conflict with, but ``ALTER
TABLE`` does) and re-checks its identity under that lock: an identity dropped concurrently
either happens before (the table stays out) or waits for the commit (the table is then a
published table whose identity the owner removed, the next case). A table whose identity is
removed *while it is published* refuses updates and deletes until the next planning moves it
(at most one trigger interval while the query runs, indefinitely while it is stopped): the
docs (pg_cdc, Publications) tell owners to set ``REPLICA IDENTITY FULL`` (or drop the table
from the publication) before dropping a captured table's primary key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from postgres_cdc_source.errors import SlotError
from postgres_cdc_source.options import CdcOptions

__all__ = ["MARKER", "INSERTS_SUFFIX", "inserts_name", "ensure", "sync", "names"]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]

MARKER = "pg_cdc managed publication: membership follows include_tables and replica identity"
INSERTS_SUFFIX = "_inserts"
_LOCK_TIMEOUT = "2s"

# A table Postgres will let update/delete while it is published for those operations.
_HAS_IDENTITY = """(c.relreplident = 'f' OR EXISTS (
    SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisvalid AND i.indisready
      AND CASE c.relreplident WHEN 'd' THEN i.indisprimary
                              WHEN 'i' THEN i.indisreplident ELSE false END))"""

# Every table a publication can hold (permanent ordinary tables, partitions included), whether
# it has an identity, and where it is now.
_TABLES = f"""
SELECT c.oid, n.nspname, c.relname, {_HAS_IDENTITY},
  EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prrelid = c.oid AND r.prpubid = %(full)s),
  EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prrelid = c.oid AND r.prpubid = %(ins)s)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname !~ '^pg_(toast|temp_)'
ORDER BY 2, 3
"""


@dataclass(frozen=True)
class _Table:
    oid: int
    schema: str
    name: str
    has_identity: bool
    in_full: bool
    in_inserts: bool

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)


def inserts_name(publication: str) -> str:
    """The insert/truncate-only sibling of ``publication``."""
    return publication + INSERTS_SUFFIX


def _managed_oids(conn: Conn, publication: str) -> tuple[int, int] | None:
    """The oids of ``publication`` and its sibling if ``pg_cdc`` manages them, else ``None``."""
    rows = dict(
        conn.execute(
            "SELECT pubname, oid::int8 FROM pg_publication WHERE pubname IN (%s, %s)"
            " AND obj_description(oid, 'pg_publication') = %s",
            (publication, inserts_name(publication), MARKER),
        ).fetchall()
    )
    full, ins = rows.get(publication), rows.get(inserts_name(publication))
    return None if full is None or ins is None else (int(full), int(ins))


def names(conn: Conn, options: CdcOptions) -> list[str]:
    """The publications to peek with: the managed pair, or the user's one publication."""
    if _managed_oids(conn, options.publication) is not None:
        return [options.publication, inserts_name(options.publication)]
    return [options.publication]


def ensure(conn: Conn, options: CdcOptions) -> None:
    """Check the publication exists, creating the managed pair if allowed; then sync it."""
    name = options.publication
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    if exists is None:
        if not options.create_slot:
            raise SlotError(
                f"publication {name!r} does not exist: CREATE PUBLICATION it or set "
                "create_slot=true"
            )
        _create(conn, options)
    if _managed_oids(conn, name) is None:
        _warn_if_unsafe(conn, name)
        return
    sync(conn, options)


def _create(conn: Conn, options: CdcOptions) -> None:
    name, ins = options.publication, inserts_name(options.publication)
    if len(ins.encode()) > 63:
        raise SlotError(
            f"cannot create publications {name!r} and {ins!r}: the second name is longer than "
            "Postgres's 63 bytes; set a shorter publication option"
        )
    try:
        with conn.transaction():  # both or neither, with one commit LSN
            for pub, publish in ((name, "insert, update, delete, truncate"),
                                 (ins, "insert, truncate")):
                conn.execute(
                    sql.SQL("CREATE PUBLICATION {} WITH (publish = {})").format(
                        sql.Identifier(pub), sql.Literal(publish)
                    )
                )
                conn.execute(
                    sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
                        sql.Identifier(pub), sql.Literal(MARKER)
                    )
                )
        log.info("created publications %s and %s", name, ins)
    except pgerrors.DuplicateObject:
        pass  # another query created them at the same moment: same outcome
    except pgerrors.InsufficientPrivilege as exc:
        raise SlotError(
            f"cannot create publication {name!r} ({exc.diag.message_primary}): create "
            "it as a superuser or the tables' owner"
        ) from None


def sync(conn: Conn, options: CdcOptions) -> None:
    """Bring the managed pair's membership up to date (no-op for a publication we do not manage).

    Called when ``pg_cdc`` starts and whenever a batch is planned. A failure to alter (privileges,
    a table locked for longer than ``_LOCK_TIMEOUT``) is logged and retried at the next planning:
    tables it could not add are named in the warning, because their changes are not captured yet.
    """
    oids = _managed_oids(conn, options.publication)
    if oids is None:
        return
    full, ins = options.publication, inserts_name(options.publication)
    tables = [
        _Table(int(oid), schema, table, bool(ident), bool(in_full), bool(in_ins))
        for oid, schema, table, ident, in_full, in_ins in conn.execute(
            _TABLES, {"full": oids[0], "ins": oids[1]}
        ).fetchall()
    ]
    wanted = [t for t in tables if options.keeps(t.schema, t.name)]
    unwanted = [t for t in tables if not options.keeps(t.schema, t.name)]
    # Order matters: first stop publishing updates where they would fail, then add, then drop.
    _alter(conn, full, "DROP", [t for t in tables if t.in_full and not t.has_identity])
    _alter(conn, ins, "ADD", [t for t in wanted if not t.has_identity and not t.in_inserts])
    _add_with_identity(conn, full, [t for t in wanted if t.has_identity and not t.in_full])
    _alter(conn, ins, "DROP", [t for t in wanted if t.has_identity and t.in_inserts])
    _alter(conn, full, "DROP", [t for t in unwanted if t.in_full and t.has_identity])
    _alter(conn, ins, "DROP", [t for t in unwanted if t.in_inserts])


def _statement(publication: str, verb: str, tables: list[_Table]) -> sql.Composed:
    return sql.SQL("ALTER PUBLICATION {} {} TABLE {}").format(
        sql.Identifier(publication), sql.SQL(verb), sql.SQL(", ").join(t.ident for t in tables)
    )


def _alter(conn: Conn, publication: str, verb: str, tables: list[_Table]) -> None:
    if not tables:
        return
    try:
        with conn.transaction():
            _set_lock_timeout(conn)
            conn.execute(_statement(publication, verb, tables))
        log.info("publication %s: %s %s", publication, verb.lower(), _listed(tables))
    except (pgerrors.UndefinedTable, pgerrors.DuplicateObject):
        pass  # a table dropped or moved concurrently: the next sync sees the new state
    except (pgerrors.LockNotAvailable, pgerrors.InsufficientPrivilege) as exc:
        _not_synced(publication, verb, tables, exc)


def _set_lock_timeout(conn: Conn) -> None:
    """Never queue behind a long ``ALTER TABLE``/``VACUUM`` (and block others behind us)."""
    conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(_LOCK_TIMEOUT)))


def _add_with_identity(conn: Conn, publication: str, tables: list[_Table]) -> None:
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
                    f"SELECT c.oid FROM pg_class c WHERE c.oid = ANY(%s) AND {_HAS_IDENTITY}",
                    ([t.oid for t in tables],),
                ).fetchall()
            }
            keep = [t for t in tables if t.oid in still]
            if keep:
                conn.execute(_statement(publication, "ADD", keep))
        if keep:
            log.info("publication %s: add %s", publication, _listed(keep))
    except (pgerrors.UndefinedTable, pgerrors.DuplicateObject):
        pass  # dropped or added concurrently: the next sync sees the new state
    except (pgerrors.LockNotAvailable, pgerrors.InsufficientPrivilege) as exc:
        _not_synced(publication, "ADD", tables, exc)


def _not_synced(publication: str, verb: str, tables: list[_Table], exc: psycopg.Error) -> None:
    log.warning(
        "pg_cdc: could not %s %s %s publication %s (%s): %s; retrying at the next batch",
        verb.lower(),
        _listed(tables),
        "to" if verb == "ADD" else "from",
        publication,
        exc.diag.message_primary,
        "their changes are not captured yet" if verb == "ADD" else "membership is stale",
    )


def _listed(tables: list[_Table], most: int = 10) -> str:
    shown = ", ".join(f"{t.schema}.{t.name}" for t in tables[:most])
    return shown + (f" and {len(tables) - most} more" if len(tables) > most else "")


def _warn_if_unsafe(conn: Conn, publication: str) -> None:
    """Say so when the user's own publication makes the owner's updates or deletes fail."""
    rows = conn.execute(
        "SELECT t.schemaname, t.tablename FROM pg_publication p"
        " JOIN pg_publication_tables t ON t.pubname = p.pubname"
        " JOIN pg_namespace n ON n.nspname = t.schemaname"
        " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename"
        f" WHERE p.pubname = %s AND (p.pubupdate OR p.pubdelete) AND NOT {_HAS_IDENTITY}"
        " ORDER BY 1, 2",
        (publication,),
    ).fetchall()
    if rows:
        tables = [_Table(0, s, t, False, True, False) for s, t in rows]
        log.warning(
            "pg_cdc: publication %s (not created by pg_cdc, left as it is) publishes updates or "
            "deletes of tables without a replica identity (%s): Postgres refuses UPDATE and "
            "DELETE on them; give them a primary key or REPLICA IDENTITY FULL, or drop them "
            "from the publication",
            publication,
            _listed(tables),
        )
