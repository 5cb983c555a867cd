"""The pgoutput publications ``pg_cdc`` creates, kept safe for the owner's writes.

Postgres refuses ``UPDATE``/``DELETE`` on a table that is in a publication publishing updates or
deletes but has no usable replica identity (``DEFAULT`` without a primary key, ``NOTHING``, or a
dropped ``USING INDEX`` index). A ``FOR ALL TABLES`` publication of every operation therefore
breaks the application on every such table the moment it is created. So ``pg_cdc`` never
creates one; it manages three publications instead:

* ``<publication>`` publishes insert, update, delete and truncate, and holds the captured tables
  that have a usable replica identity;
* ``<publication>_inserts`` publishes only insert and truncate (which never make a write fail),
  and holds the captured tables without one;
* ``<publication>_all`` is ``FOR ALL TABLES`` but publishes only insert and truncate: it
  captures a table's inserts from the moment the table is created, before any planning can add
  it to the other two. Only a superuser may create it; without it, rows written to a table
  between its creation and the next planning are not sent (a warning at start says so).

All are peeked together (pgoutput takes several ``publication_names`` and sends each change
once). Membership of the first two is re-synchronised on the driver whenever a batch is planned
(:func:`sync`): new tables that match the filters join, tables that gained or lost their
identity move, tables that no longer match leave. They carry :data:`MARKER` as their comment; a
publication without it (the user's own, or one created by hand for ``create_slot=false``) is
never altered.

pgoutput looks a publication up as of each decoded change, and before Postgres 18 fails the
peek ("publication does not exist") for a change written before the publication was. So there
``<publication>_all`` is read only by batches that start after a position recorded in its
comment once the slot's restart point is past its creation (:func:`names`, :func:`admit`):
from the first batch for a slot created after it, within a few batches for an existing one.
The publications a batch is read with are a function of the batch, so a replay reads the same
rows.

Identity changes. A table is added to ``<publication>`` inside a transaction that first takes
``SHARE UPDATE EXCLUSIVE`` on it (which ordinary reads and writes do not conflict with, but
``ALTER TABLE`` does) and re-checks its identity under that lock. A table whose identity is
removed *while it is published* would refuse updates and deletes until the next planning moves
it, and a table that gains one would have its updates and deletes skipped until then; so where
the role may create event triggers (a superuser), ``pg_cdc`` installs :data:`GUARD`, an event
trigger that moves such tables inside the very ``ALTER TABLE``/``DROP INDEX`` transaction that
changed their identity, and adds a table to the pair inside the transaction that creates it
(so its updates and deletes are captured too; the next planning drops it if the filters do not
capture it). It never fails the owner's statement: an error becomes a warning, and the next
planning does the work. Without it, a warning at start names the window and the grant.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from postgres_cdc_source.errors import SlotError
from postgres_cdc_source.lsn import format_lsn, parse_lsn
from postgres_cdc_source.options import CdcOptions

__all__ = ["MARKER", "INSERTS_SUFFIX", "ALL_SUFFIX", "GUARD", "inserts_name", "all_name",
           "ensure", "sync", "names", "admit"]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]

MARKER = "pg_cdc managed publication: membership follows include_tables and replica identity"
INSERTS_SUFFIX = "_inserts"
ALL_SUFFIX = "_all"
GUARD = "pg_cdc_identity_guard"
"""The event trigger (and its function, in ``public``) that keeps identity changes safe."""
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


def all_name(publication: str) -> str:
    """The ``FOR ALL TABLES`` insert/truncate-only sibling of ``publication``."""
    return publication + ALL_SUFFIX


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


def names(conn: Conn, options: CdcOptions, start: int) -> list[str]:
    """The publications to peek a batch from ``start`` with: the managed pair (and
    ``<publication>_all`` where the slot reads it, see :func:`_reads_from`), or the user's one
    publication. A function of the batch: a replay peeks with the same publications."""
    if _managed_oids(conn, options.publication) is None:
        return [options.publication]
    pubs = [options.publication, inserts_name(options.publication)]
    if (state := _all_state(conn, options)) is not None and state.fit:
        reads_from = 0 if state.skips_older else _reads_from(state.comment, options.slot)
        if reads_from is not None and start >= reads_from:
            pubs.append(all_name(options.publication))
    return pubs


# <publication>_all as pg_cdc needs it (all tables, never update/delete). From Postgres 18
# pgoutput skips a publication that a decoded change predates; before, it fails the peek. So on
# 15-17 a slot reads it only for batches starting at or after an LSN recorded in its comment
# (:func:`admit`), once every change the slot can still decode comes after the publication:
# the slot's restart point is past the LSN recorded at creation, or (a publication created by
# hand) the publication is older than the slot's catalog_xmin.
_ALL_STATE = """
SELECT p.puballtables AND NOT p.pubupdate AND NOT p.pubdelete,
       current_setting('server_version_num')::int >= 180000,
       coalesce(age(p.xmin) > age(s.catalog_xmin), false),
       coalesce(obj_description(p.oid, 'pg_publication'), ''),
       (s.restart_lsn - '0/0')::int8, (s.confirmed_flush_lsn - '0/0')::int8
FROM pg_publication p LEFT JOIN pg_replication_slots s ON s.slot_name = %s
WHERE p.pubname = %s
"""
_CREATED_BEFORE = re.compile(r"; created before LSN ([0-9A-F]+/[0-9A-F]+)")


class _AllState(NamedTuple):
    fit: bool
    skips_older: bool  # Postgres 18+
    older_than_slot: bool
    comment: str
    restart: int | None
    confirmed: int | None

    @property
    def decodable(self) -> bool:
        """Whether every change the slot can still decode comes after the publication."""
        created = _CREATED_BEFORE.search(self.comment)
        return self.older_than_slot or (
            created is not None and self.restart is not None
            and self.restart >= parse_lsn(created[1])
        )


def _all_state(conn: Conn, options: CdcOptions) -> _AllState | None:
    row = conn.execute(_ALL_STATE, (options.slot, all_name(options.publication))).fetchone()
    return None if row is None else _AllState(*row)


def _reads_from(comment: str, slot: str) -> int | None:
    """The LSN from which batches of ``slot`` read ``<publication>_all``, if recorded."""
    match = re.search(rf"; slot {re.escape(slot)} from LSN ([0-9A-F]+/[0-9A-F]+)", comment)
    return None if match is None else parse_lsn(match[1])


def admit(conn: Conn, options: CdcOptions, *, new_slot: bool = False) -> None:
    """On the driver, at start and planning (Postgres 15-17): once the slot can decode with
    ``<publication>_all``, record that its batches starting *after* the slot's position read
    it. Every batch read so far, or planned and maybe about to be replayed, starts at or before
    that position, so it is read again exactly as it was. A slot just created (``new_slot``)
    has had no batch yet: its batches read it from its position on."""
    state = _all_state(conn, options)
    if (state is None or not state.fit or state.skips_older or state.confirmed is None
            or _reads_from(state.comment, options.slot) is not None or not state.decodable):
        return
    name = all_name(options.publication)
    comment = (state.comment if state.comment.startswith(MARKER) else MARKER) + (
        f"; slot {options.slot} from LSN {format_lsn(state.confirmed + (0 if new_slot else 1))}")
    try:
        conn.execute(sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
            sql.Identifier(name), sql.Literal(comment)))
        log.info("replication slot %s reads publication %s after %s", options.slot, name,
                 format_lsn(state.confirmed))
    except pgerrors.InsufficientPrivilege as exc:
        log.warning("pg_cdc: cannot record in publication %s's comment that slot %s reads it "
                    "(%s); it is not read: make the role its owner", name, options.slot,
                    exc.diag.message_primary)


def ensure(conn: Conn, options: CdcOptions) -> None:
    """Check the publication exists, creating the managed pair if allowed; for a managed pair,
    also ``<publication>_all`` and :data:`GUARD` where the role may (warning where not); then
    sync it."""
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
    _ensure_all(conn, options)
    _ensure_guard(conn)
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


def _ensure_all(conn: Conn, options: CdcOptions) -> None:
    """Create ``<publication>_all`` if missing and allowed; say what its absence costs."""
    name = all_name(options.publication)
    if _all_state(conn, options) is None:
        if len(name.encode()) > 63:
            _warn_new_tables_gap(name, "the name is longer than Postgres's 63 bytes: set a "
                                 "shorter publication option")
            return
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES WITH (publish = {})").format(
                        sql.Identifier(name), sql.Literal("insert, truncate")
                    )
                )
            # committed: the insert position now is past the creation's commit record
            (insert,) = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0')::int8"
                                     ).fetchone() or (0,)
            conn.execute(sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
                sql.Identifier(name),
                sql.Literal(f"{MARKER}; created before LSN {format_lsn(int(insert))}"),
            ))
            log.info("created publication %s (all tables, inserts and truncates)", name)
        except pgerrors.DuplicateObject:
            pass  # another query created it at the same moment
        except pgerrors.InsufficientPrivilege as exc:
            _warn_new_tables_gap(name, exc.diag.message_primary or "permission denied")
            return
    state = _all_state(conn, options)
    if state is None:
        return
    if not state.fit:
        _warn_new_tables_gap(name, "it exists but is not FOR ALL TABLES with publish = "
                             "'insert, truncate', so it is not used")
    elif not (state.skips_older or state.decodable or state.confirmed is None  # no slot yet
              or _reads_from(state.comment, options.slot) is not None):
        log.warning(
            "pg_cdc: publication %s is newer than replication slot %s's restart point: the "
            "slot reads it once it moves past it (usually within a few batches); until then "
            "rows written to a table before a planning adds it are not captured", name,
            options.slot,
        )


def _warn_new_tables_gap(name: str, why: str) -> None:
    log.warning(
        "pg_cdc: no publication %s (%s): rows written to a new (or dropped and re-created) "
        "table before the next batch is planned are not captured; a superuser can create it: "
        "CREATE PUBLICATION %s FOR ALL TABLES WITH (publish = 'insert, truncate') (docs: "
        "pg_cdc, Publications), or use plugin=test_decoding",
        name, why, name,
    )


# The guard, for every managed pair: moves a member whose identity no longer matches its
# publication, and adds a table just created (an identity decides which of the two), inside the
# DDL transaction; the next planning drops a new table the filters do not capture. Any error
# becomes a warning, so the owner's statement never fails because of it (the next planning then
# does the same work).
_GUARD_BODY = """
DECLARE
  created oid[];
  pair record;
  t record;
BEGIN
  created := ARRAY(SELECT objid FROM pg_event_trigger_ddl_commands()
                   WHERE object_type = 'table'
                     AND command_tag IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO'));
  FOR pair IN
    SELECT f.oid AS full_oid, f.pubname AS full_name, i.oid AS ins_oid, i.pubname AS ins_name
    FROM pg_publication f JOIN pg_publication i ON i.pubname = f.pubname || {suffix}
    WHERE obj_description(f.oid, 'pg_publication') = {marker}
      AND obj_description(i.oid, 'pg_publication') = {marker}
  LOOP
    BEGIN  -- one pair's failure leaves the others' work done
      FOR t IN
        SELECT c.oid::regclass::text AS rel, {has_identity} AS ident,
          EXISTS (SELECT 1 FROM pg_publication_rel r
                  WHERE r.prrelid = c.oid AND r.prpubid = pair.full_oid) AS in_full,
          EXISTS (SELECT 1 FROM pg_publication_rel r
                  WHERE r.prrelid = c.oid AND r.prpubid = pair.ins_oid) AS in_ins
        FROM pg_class c
        WHERE c.oid IN (SELECT r.prrelid FROM pg_publication_rel r
                        WHERE r.prpubid IN (pair.full_oid, pair.ins_oid))
           OR (c.oid = ANY (created) AND c.relkind = 'r' AND c.relpersistence = 'p')
      LOOP
        IF t.in_full AND NOT t.ident THEN
          EXECUTE format('ALTER PUBLICATION %I DROP TABLE %s', pair.full_name, t.rel);
        END IF;
        IF t.in_ins AND t.ident THEN
          EXECUTE format('ALTER PUBLICATION %I DROP TABLE %s', pair.ins_name, t.rel);
        END IF;
        IF t.ident AND NOT t.in_full THEN
          EXECUTE format('ALTER PUBLICATION %I ADD TABLE %s', pair.full_name, t.rel);
        END IF;
        IF NOT t.ident AND NOT t.in_ins THEN
          EXECUTE format('ALTER PUBLICATION %I ADD TABLE %s', pair.ins_name, t.rel);
        END IF;
      END LOOP;
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'pg_cdc identity guard, publication %: % (the next planning does its work)',
        pair.full_name, SQLERRM;
    END;
  END LOOP;
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'pg_cdc identity guard: % (the next planning does its work)', SQLERRM;
END
"""


def _ensure_guard(conn: Conn) -> None:
    """Install (or bring up to date) :data:`GUARD` if allowed; say what its absence costs."""
    body = sql.SQL(_GUARD_BODY).format(
        suffix=sql.Literal(INSERTS_SUFFIX), marker=sql.Literal(MARKER),
        has_identity=sql.SQL(_HAS_IDENTITY),
    ).as_string(conn)
    installed = conn.execute(
        "SELECT (SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        "        WHERE n.nspname = 'public' AND p.proname = %s),"
        " EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = %s)",
        (GUARD, GUARD),
    ).fetchone()
    if installed is not None and installed == (body, True):
        return
    try:
        with conn.transaction():
            conn.execute(sql.SQL(
                "CREATE OR REPLACE FUNCTION public.{}() RETURNS event_trigger LANGUAGE plpgsql"
                " SECURITY DEFINER SET search_path = pg_catalog AS {}"
            ).format(sql.Identifier(GUARD), sql.Literal(body)))
            if installed is None or not installed[1]:
                conn.execute(sql.SQL(
                    "CREATE EVENT TRIGGER {} ON ddl_command_end WHEN TAG IN ('ALTER TABLE',"
                    " 'DROP INDEX', 'CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO')"
                    " EXECUTE FUNCTION public.{}()"
                ).format(sql.Identifier(GUARD), sql.Identifier(GUARD)))
        log.info("installed event trigger %s", GUARD)
    except (pgerrors.DuplicateObject, pgerrors.UniqueViolation):
        pass  # another query installed it at the same moment
    except pgerrors.InsufficientPrivilege as exc:
        if installed is not None and installed[1]:
            log.warning("pg_cdc: event trigger %s is an older version (%s): start pg_cdc once "
                        "as a superuser to bring it up to date", GUARD, exc.diag.message_primary)
            return
        log.warning(
            "pg_cdc: cannot create event trigger %s (%s): after ALTER TABLE ... REPLICA "
            "IDENTITY NOTHING (or dropping the primary key or the identity index) of a captured "
            "table, the owner's UPDATE and DELETE on it fail until the next batch is planned, "
            "and a table that gains an identity has its updates and deletes skipped until then; "
            "a superuser can install it by starting pg_cdc once (docs: pg_cdc, Publications)",
            GUARD, exc.diag.message_primary,
        )


def sync(conn: Conn, options: CdcOptions) -> None:
    """Bring the managed pair's membership up to date (no-op for a publication we do not manage).

    Called when ``pg_cdc`` starts and whenever a batch is planned. A failure to alter (privileges,
    a table locked for longer than ``_LOCK_TIMEOUT``) is logged and retried at the next planning:
    tables it could not add are named in the warning, because their changes are not captured yet.
    """
    oids = _managed_oids(conn, options.publication)
    if oids is None:
        return
    admit(conn, options)
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
