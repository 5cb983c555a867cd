"""The table whose rows are backfill requests, and how the query trusts them.

``pg_logical_emit_message`` checks no privilege and ``NOTIFY`` is open to every role, so the
content of a message in the WAL proves nothing about who wrote it. A request is therefore a row
of :data:`~postgres_cdc_source.options.REQUESTS_TABLE` (``public.pg_cdc_requests``), and who may
insert one is what Postgres's own privileges say: its owner grants ``INSERT`` to the roles it
chooses (``INSERT (slot, tables)`` alone: backfills without a ``condition``, which the query
runs as SQL). A trigger on the table writes a transactional logical message with prefix
:data:`~postgres_cdc_source.options.REQUEST_PREFIX` for each row and stores the message's LSN
as the row's key, then notifies :data:`~postgres_cdc_source.options.BACKFILL_CHANNEL`. The
message gives the request its place in the stream; the query takes it for a request only when
the table holds a row at its LSN, and reads the request from that row
(:func:`~postgres_cdc_source.backfill.requests.request_of`): a message's content is never read,
so one written by hand (or by a release that wrote requests as messages) is skipped with a
warning naming its LSN.

The table is trusted only while its owner is a superuser, the query's role, or (for a query
whose role is no superuser) a role it inherits the privileges of: a table someone else created
under the name would let them grant what they like. The query creates it when it starts, where
its role may create in ``public``; otherwise the operator does (:func:`ensure`'s warning says
how).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from connector_common.lsn import format_lsn
from postgres_cdc_source.options import BACKFILL_CHANNEL, REQUEST_PREFIX, REQUESTS_TABLE

__all__ = [
    "KINDS", "MAX_CONDITION", "MAX_ID", "MAX_TABLES", "TABLE", "RequestRow", "ensure",
    "may_hold", "rows_at",
]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]

KINDS = ("backfill", "cancel", "created")
"""A row's ``kind``: a backfill, a cancel of the backfill ``id`` names, or the event trigger's
request for the rows a ``CREATE TABLE AS`` wrote (:mod:`.identity_guard`)."""
MAX_TABLES = 1000
"""Tables one request may name."""
MAX_CONDITION = 65536
"""Characters a request's ``condition`` may hold."""
MAX_ID = 200
"""Characters a request's ``id`` may hold."""

TABLE = sql.Identifier(*REQUESTS_TABLE)
_PLACED = sql.Identifier(REQUESTS_TABLE[0], "pg_cdc_request_placed")

_CREATE = """
CREATE TABLE {table} (
  lsn pg_catalog.pg_lsn PRIMARY KEY,
  kind text NOT NULL DEFAULT 'backfill' CHECK (kind IN ('backfill', 'cancel', 'created')),
  id text NOT NULL DEFAULT pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''),
  slot text,
  tables pg_catalog.regclass[],
  condition text,
  publication text,
  created_xmin bigint,
  created_cid bigint,
  requested_by name NOT NULL DEFAULT current_user,
  requested_at timestamptz NOT NULL DEFAULT pg_catalog.now()
)"""
# SECURITY INVOKER: the message is written as the inserting role, which needs no privilege for
# it; the LSN it returns is the one decoding reports for the message
_PLACE = """
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog AS $$
BEGIN
  NEW.lsn := pg_logical_emit_message(true, {prefix},
    json_build_object('kind', NEW.kind, 'id', NEW.id, 'slot', NEW.slot)::text);
  PERFORM pg_notify({channel}, '');
  RETURN NEW;
END $$"""
_TRIGGER = ("CREATE TRIGGER pg_cdc_request_placed BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION {function}()")
_COMMENT = ("pg_cdc backfill requests: a row asks the query reading its slot to backfill "
            "tables; INSERT granted here is who may (docs: pg_cdc, Backfill)")

# a superuser has every role's privileges, so pg_has_role alone would trust any owner
_TRUST = """
SELECT pg_catalog.pg_get_userbyid(c.relowner),
       o.rolsuper OR o.oid = me.oid
       OR (NOT me.rolsuper AND pg_catalog.pg_has_role(me.oid, o.oid, 'USAGE'))
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_roles AS o ON o.oid = c.relowner,
     pg_catalog.pg_roles AS me
WHERE c.oid = pg_catalog.to_regclass(%s) AND c.relkind = 'r' AND me.rolname = current_user"""

_ROWS = """
SELECT (q.lsn - '0/0')::int8, q.kind, pg_catalog.left(q.id, {max_id} + 1), q.slot,
       (SELECT pg_catalog.array_agg(ARRAY[n.nspname::text, c.relname::text] ORDER BY u.i)
        FROM pg_catalog.unnest(q.tables[1:{max_tables} + 1]) WITH ORDINALITY AS u(oid, i)
        LEFT JOIN pg_catalog.pg_class AS c ON c.oid = u.oid
        LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace),
       pg_catalog.cardinality(q.tables), pg_catalog.left(q.condition, {max_condition} + 1),
       q.publication, q.created_xmin, q.created_cid, q.requested_by
FROM {table} AS q WHERE q.lsn = ANY (%s::pg_catalog.pg_lsn[])"""


# a session inserting a row holds this lock until its commit is visible (locks are released
# after the transaction leaves the proc array), and a prepared transaction until it ends
_WRITING = """
SELECT EXISTS (SELECT FROM pg_catalog.pg_locks
               WHERE relation = pg_catalog.to_regclass(%s) AND mode <> 'AccessShareLock'
                 AND database = (SELECT oid FROM pg_catalog.pg_database
                                 WHERE datname = pg_catalog.current_database())
                 AND pid IS DISTINCT FROM pg_catalog.pg_backend_pid())"""
# a transaction the slot sends after its position wrote its changes after its restart point
_IN_RANGE = """
SELECT EXISTS (SELECT FROM {table}
               WHERE lsn > %s::pg_catalog.pg_lsn AND lsn <= %s::pg_catalog.pg_lsn
                 AND lsn >= COALESCE((SELECT restart_lsn FROM pg_catalog.pg_replication_slots
                                      WHERE slot_name = %s), '0/0'))"""


@dataclass(frozen=True)
class RequestRow:
    """A row of the table as read (bounded: longer values are cut one past their limit)."""

    lsn: int
    kind: str
    id: str
    slot: str | None
    tables: list[list[str | None]] | None
    """``[schema, table]`` of each ``regclass``; ``[None, None]`` for a table dropped since."""
    table_count: int | None
    condition: str | None
    publication: str | None
    created_xmin: int | None
    created_cid: int | None
    requested_by: str


def ensure(conn: Conn) -> bool:
    """Whether the requests table exists and is trusted, creating it (with its trigger) if it
    is missing and this role may; warns (once per call) when requests cannot be taken."""
    name = ".".join(REQUESTS_TABLE)
    if _trusted(conn) is None:
        try:
            with conn.transaction():
                conn.execute(sql.SQL(_CREATE).format(table=TABLE))
                conn.execute(sql.SQL(_PLACE).format(
                    function=_PLACED, prefix=sql.Literal(REQUEST_PREFIX),
                    channel=sql.Literal(BACKFILL_CHANNEL)))
                conn.execute(sql.SQL(_TRIGGER).format(table=TABLE, function=_PLACED))
                conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(
                    TABLE, sql.Literal(_COMMENT)))
            log.info("pg_cdc backfill: created %s (requests are its rows)", name)
        except (pgerrors.DuplicateTable, pgerrors.UniqueViolation, pgerrors.DuplicateObject):
            pass  # another query created it at the same moment
        except pgerrors.ReadOnlySqlTransaction:
            return False  # a standby: requests are rows of the primary's table
        except pgerrors.InsufficientPrivilege as exc:
            log.warning(
                "pg_cdc backfill: cannot create %s (%s): until it exists, no backfill can be "
                "requested of this query; start pg_cdc once as a role that may create it in "
                "schema %s, then ALTER TABLE %s OWNER TO the query's role (docs: pg_cdc, "
                "Backfill)", name, exc.diag.message_primary, REQUESTS_TABLE[0], name)
            return False
    trusted = _trusted(conn)
    if trusted is None:
        return False
    owner, ok = trusted
    if not ok:
        log.warning(
            "pg_cdc backfill: %s is owned by %s, which is neither a superuser nor a role this "
            "query's role acts as: its rows are not taken as requests (drop it, or ALTER TABLE "
            "... OWNER TO the query's role)", name, owner)
    return ok


def _trusted(conn: Conn) -> tuple[str, bool] | None:
    """``(owner, trusted)`` of the requests table, ``None`` if there is none."""
    row = conn.execute(_TRUST, (".".join(REQUESTS_TABLE),)).fetchone()
    return None if row is None else (str(row[0]), bool(row[1]))


def may_hold(conn: Conn, slot: str, after: int, upto: int) -> bool:
    """Whether a search of ``slot``'s WAL up to ``upto`` (flushed) could find a request
    message after ``after`` with a row of the table at its LSN, trusted or not: a row in that
    range visible now, or a session still writing to the table (its commit may be flushed but
    not yet visible). ``False`` spares the search, a second decode of the range: a message
    without a row is never a request. ``conn`` must be the primary's (a standby knows no other
    session's locks) and not inside a transaction: each check sees what is committed as it
    starts, the locks first, so that a writer is either seen at its lock or its row seen.
    """
    with conn.transaction():
        row = conn.execute(_WRITING, (".".join(REQUESTS_TABLE),)).fetchone()
    if row is None or row[0]:
        return True
    try:
        with conn.transaction():
            found = conn.execute(sql.SQL(_IN_RANGE).format(table=TABLE), (
                format_lsn(after), format_lsn(upto), slot)).fetchone()
    except psycopg.ProgrammingError:  # no such table, or not of this shape: search
        return True
    return found is None or bool(found[0])


def rows_at(conn: Conn, lsns: Sequence[int]) -> dict[int, RequestRow]:
    """The trusted table's rows at ``lsns``, by LSN (none at all if the table is not trusted)."""
    if not lsns or not ensure(conn):
        return {}
    query = sql.SQL(_ROWS).format(table=TABLE, max_id=sql.Literal(MAX_ID),
                                  max_tables=sql.Literal(MAX_TABLES),
                                  max_condition=sql.Literal(MAX_CONDITION))
    try:
        with conn.transaction():
            rows = conn.execute(query, ([format_lsn(lsn) for lsn in lsns],)).fetchall()
    except psycopg.ProgrammingError as exc:  # the table altered by its owner, say
        log.warning("pg_cdc backfill: cannot read %s (%s): its requests are skipped",
                    ".".join(REQUESTS_TABLE), exc.diag.message_primary)
        return {}
    return {int(r[0]): RequestRow(int(r[0]), *r[1:]) for r in rows}
