"""Creating the managed publications (or checking the user's own) when a query starts (see
:mod:`.publication`)."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from connector_common.lsn import format_lsn
from postgres_cdc_source.decoding.factory import sends_generated
from postgres_cdc_source.errors import ConfigError, SlotError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication.identity_guard import ensure_guard
from postgres_cdc_source.replication.publication import (
    HAS_IDENTITY,
    MARKER,
    all_name,
    all_state,
    inserts_name,
    managed_oids,
    reads_all,
)
from postgres_cdc_source.replication.publication_sync import Table, listed, sync

__all__ = ["ensure"]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]


def ensure(conn: Conn, options: CdcOptions) -> None:
    """Check the publication exists, creating the managed pair if allowed; for a managed pair,
    also :data:`~.identity_guard.GUARD` (and with ``all_tables_publication``
    ``<publication>_all``) where the role may, warning where not; then sync it."""
    name = options.publication
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    if exists is None:
        if not options.create_slot:
            raise SlotError(
                f"publication {name!r} does not exist: CREATE PUBLICATION it or set "
                "create_slot=true"
            )
        _create(conn, options)
    if options.delivers_generated:
        _check_sends_generated(conn, name)
    if managed_oids(conn, name) is None:
        _warn_if_unsafe(conn, name)
        _warn_partitions_by_name(conn, options)
        return
    _send_generated(conn, name)
    _via_root(conn, name)
    if options.all_tables_publication:
        _ensure_all(conn, options)
    ensure_guard(conn, name)
    sync(conn, options)


def _check_sends_generated(conn: Conn, publication: str) -> None:
    """``generated_columns=include`` with pgoutput: refused where no publication can send them
    (before Postgres 18), or where the user's own publication does not."""
    if not sends_generated(conn):
        raise ConfigError(
            "generated_columns",
            f"include needs Postgres 18 with plugin=pgoutput (this server is "
            f"{conn.info.server_version // 10000}): pgoutput sends no generated column before "
            "it; use plugin=test_decoding, which prints them on every version")
    if managed_oids(conn, publication) is None:
        row = conn.execute("SELECT pubgencols FROM pg_catalog.pg_publication WHERE pubname = %s",
                           (publication,)).fetchone()
        if row is not None and row[0] != "s":
            raise ConfigError(
                "generated_columns",
                f"include: publication {publication!r} (not created by pg_cdc) does not send "
                f"them: ALTER PUBLICATION {sql.Identifier(publication).as_string(conn)} SET "
                "(publish_generated_columns = stored)")


def _send_generated(conn: Conn, publication: str) -> None:
    """On Postgres 18, have the managed pair send stored generated columns: 18 refuses the
    owner's ``UPDATE`` and ``DELETE`` on a table in a publication of updates whose replica
    identity (``FULL``, or an index) holds a generated column the publication does not send.
    The decoders leave them out of the rows again (:func:`~..decoding.factory.sends_generated`),
    so rows are as on every other version."""
    if sends_generated(conn):
        _set_on_pair(conn, publication, "pubgencols", "s", "publish_generated_columns = stored",
                     "send generated columns", "on Postgres 18 the owner's UPDATE and DELETE "
                     "fail on a captured table whose replica identity holds a stored generated "
                     "column (REPLICA IDENTITY FULL, say)")


def _via_root(conn: Conn, publication: str) -> None:
    """Have the managed pair publish a partition's changes as those of the partitioned table it
    holds (``publish_via_partition_root``, which every pair is created with): a pair created by
    an earlier release gets it here. From the ``ALTER`` on, the changes of a partition whose
    partitioned table the rules match name that table (batches before it are read as they
    were); the pair holds partitioned tables only since then, so nothing else changes."""
    _set_on_pair(conn, publication, "pubviaroot", True, "publish_via_partition_root = true",
                 "publish partitions as their partitioned table", "the changes of a captured "
                 "partitioned table name its partitions, which the rules may not match")


def _set_on_pair(conn: Conn, publication: str, column: str, wanted: object, setting: str,
                 what: str, why: str) -> None:
    """``ALTER PUBLICATION ... SET (setting)`` on each publication of the managed pair whose
    ``pg_publication.column`` is not ``wanted``; where the role may not, a warning saying
    ``why`` it matters and the statement its owner can run."""
    for pub in (publication, inserts_name(publication)):
        row = conn.execute(sql.SQL("SELECT {} FROM pg_catalog.pg_publication WHERE pubname = %s")
                           .format(sql.Identifier(column)), (pub,)).fetchone()
        if row is None or row[0] == wanted:
            continue
        statement = sql.SQL("ALTER PUBLICATION {} SET ({})").format(sql.Identifier(pub),
                                                                   sql.SQL(setting))
        try:
            with conn.transaction():
                conn.execute(statement)
            log.info("publication %s: %s", pub, setting)
        except pgerrors.InsufficientPrivilege as exc:
            log.warning("pg_cdc: cannot have publication %s %s (%s): %s; its owner can run %s",
                        pub, what, exc.diag.message_primary, why, statement.as_string(conn))


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
                    sql.SQL("CREATE PUBLICATION {} WITH (publish = {}, "
                            "publish_via_partition_root = true)").format(
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
    """Create ``<publication>_all`` if missing and allowed; say why it is not read."""
    name = all_name(options.publication)
    if all_state(conn, options) is None:
        if len(name.encode()) > 63:
            _warn_all_unused(name, "the name is longer than Postgres's 63 bytes: set a "
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
            _warn_all_unused(name, exc.diag.message_primary or "permission denied")
            return
    state = all_state(conn, options)
    if state is None:
        return
    if not state.fit:
        _warn_all_unused(name, "it exists but is not FOR ALL TABLES with publish = "
                         "'insert, truncate', so it is not used")
    elif not (state.decodable or state.confirmed is None  # no slot yet
              or reads_all(state, options.slot, state.confirmed + 1)):
        log.warning(
            "pg_cdc: publication %s is newer than replication slot %s's restart point: the "
            "slot reads it once it moves past it (usually within a few batches); until then "
            "only the captured tables' rows are read", name, options.slot,
        )


def _warn_all_unused(name: str, why: str) -> None:
    log.warning(
        "pg_cdc: no publication %s (%s): all_tables_publication=true is ignored; a superuser "
        "can create it: CREATE PUBLICATION %s FOR ALL TABLES WITH (publish = 'insert, "
        "truncate') (docs: pg_cdc, Publications)", name, why, name,
    )


def _warn_if_unsafe(conn: Conn, publication: str) -> None:
    """Say so when the user's own publication makes the owner's updates or deletes fail."""
    rows = conn.execute(
        "SELECT t.schemaname, t.tablename FROM pg_publication p"
        " JOIN pg_publication_tables t ON t.pubname = p.pubname"
        " JOIN pg_namespace n ON n.nspname = t.schemaname"
        " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename"
        f" WHERE p.pubname = %s AND (p.pubupdate OR p.pubdelete) AND NOT {HAS_IDENTITY}"
        " ORDER BY 1, 2",
        (publication,),
    ).fetchall()
    if rows:
        tables = [Table(0, s, t, False, True, False) for s, t in rows]
        log.warning(
            "pg_cdc: publication %s (not created by pg_cdc, left as it is) publishes updates or "
            "deletes of tables without a replica identity (%s): Postgres refuses UPDATE and "
            "DELETE on them; give them a primary key or REPLICA IDENTITY FULL, or drop them "
            "from the publication",
            publication,
            listed(tables),
        )



def _warn_partitions_by_name(conn: Conn, options: CdcOptions) -> None:
    """Say so when the user's own publication holds a partitioned table the rules match
    without ``publish_via_partition_root``: Postgres then sends its changes as its partitions',
    which the rules need not match."""
    rows = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_publication p"
        " JOIN pg_publication_rel r ON r.prpubid = p.oid"
        " JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE p.pubname = %s AND NOT p.pubviaroot AND c.relkind = 'p' ORDER BY 1, 2",
        (options.publication,),
    ).fetchall()
    kept = [Table(0, s, t, False, False, False) for s, t in rows if options.keeps(s, t)]
    if kept:
        log.warning(
            "pg_cdc: publication %s (not created by pg_cdc, left as it is) holds the partitioned "
            "table %s without publish_via_partition_root: Postgres sends its changes as its "
            "partitions', named by each partition, and the rules drop those they do not match; "
            "ALTER PUBLICATION %s SET (publish_via_partition_root = true) names them by the "
            "table (docs: pg_cdc, Partitioned tables)",
            options.publication, listed(kept),
            sql.Identifier(options.publication).as_string(conn),
        )
