"""The event trigger that keeps the managed publications safe through identity changes and
new tables (see :mod:`.publication`).

A table created by ``CREATE TABLE AS`` or ``SELECT INTO`` holds its rows before the trigger
runs at ``ddl_command_end``, and pgoutput decides what to send as of each change, so those rows
are never sent, whatever the trigger then does. For every pair it added such a table to (when
the table has rows), the trigger inserts a ``created`` request into
:data:`~postgres_cdc_source.options.REQUESTS_TABLE` (the table's own trigger places it in the
WAL and notifies, :mod:`.request_table`), naming the pair, the
creating transaction's xid and the command that added the table: a query reading that pair
backfills exactly the rows its publications did not send, those that transaction wrote before
the table joined them and nobody changed since (``xmin`` and ``cmin`` say so). The function is
``SECURITY DEFINER``, so it may insert where the owner of the DDL may not.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from postgres_cdc_source.replication import request_table
from postgres_cdc_source.replication.publication import (
    HAS_IDENTITY,
    INSERTS_SUFFIX,
    MARKER,
    inserts_name,
)

__all__ = ["GUARD", "ensure_guard"]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]

GUARD = "pg_cdc_identity_guard"
"""The event trigger (and its function, in ``public``) that keeps identity changes safe."""

# The guard, for every managed pair: moves a member whose identity no longer matches its
# publication, and adds a table just created (an identity decides which of the two), inside the
# DDL transaction; the next planning drops a new table the filters do not capture. For a table
# created with its rows it also asks for them (see the module docstring). Any error becomes a
# warning, so the owner's statement never fails because of it (the next planning then does the
# same work, and the rows written before it are not sent).
_GUARD_BODY = """
DECLARE
  created oid[];
  filled oid[];
  pair record;
  t record;
  has_rows boolean;
BEGIN
  created := ARRAY(SELECT objid FROM pg_event_trigger_ddl_commands()
                   WHERE object_type = 'table'
                     AND command_tag IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO'));
  filled := ARRAY(SELECT objid FROM pg_event_trigger_ddl_commands()
                  WHERE object_type = 'table'
                    AND command_tag IN ('CREATE TABLE AS', 'SELECT INTO'));
  FOR pair IN
    SELECT f.oid AS full_oid, f.pubname AS full_name, i.oid AS ins_oid, i.pubname AS ins_name
    FROM pg_publication f JOIN pg_publication i ON i.pubname = f.pubname || {suffix}
    WHERE obj_description(f.oid, 'pg_publication') = {marker}
      AND obj_description(i.oid, 'pg_publication') = {marker}
  LOOP
    BEGIN  -- one pair's failure leaves the others' work done
      FOR t IN
        SELECT c.oid, c.oid::regclass::text AS rel, {has_identity} AS ident, c.xmin,
          n.nspname, c.relname,
          EXISTS (SELECT 1 FROM pg_publication_rel r
                  WHERE r.prrelid = c.oid AND r.prpubid = pair.full_oid) AS in_full,
          EXISTS (SELECT 1 FROM pg_publication_rel r
                  WHERE r.prrelid = c.oid AND r.prpubid = pair.ins_oid) AS in_ins
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid IN (SELECT r.prrelid FROM pg_publication_rel r
                        WHERE r.prpubid IN (pair.full_oid, pair.ins_oid))
           OR (c.oid = ANY (created) AND c.relkind IN ('r', 'p') AND c.relpersistence = 'p')
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
        IF t.oid = ANY (filled) THEN
          EXECUTE format('SELECT EXISTS (SELECT FROM ONLY %s)', t.rel) INTO has_rows;
          IF has_rows THEN
            BEGIN  -- without the requests table, the pair's work above still stands
              INSERT INTO {requests} (kind, tables, publication, created_xmin, created_cid)
              VALUES ('created', ARRAY[t.oid]::regclass[], pair.full_name, t.xmin::text::bigint,
                      (SELECT r.cmin::text::bigint FROM pg_publication_rel r
                       WHERE r.prrelid = t.oid AND r.prpubid IN (pair.full_oid, pair.ins_oid)));
            EXCEPTION WHEN OTHERS THEN
              RAISE WARNING 'pg_cdc identity guard: cannot request the rows of % (%)', t.rel,
                SQLERRM;
            END;
          END IF;
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


def ensure_guard(conn: Conn, publication: str) -> None:
    """Install (or bring up to date) :data:`GUARD` if allowed; say what its absence costs to
    the query reading the managed pair ``publication``."""
    body = sql.SQL(_GUARD_BODY).format(
        suffix=sql.Literal(INSERTS_SUFFIX), marker=sql.Literal(MARKER),
        has_identity=sql.SQL(HAS_IDENTITY), requests=request_table.TABLE,
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
            "pg_cdc: cannot create event trigger %s (%s): until the next batch is planned, "
            "rows written to a table created (or dropped and created again) after pg_cdc "
            "started are not captured (in the creating transaction, before its rows: ALTER "
            "PUBLICATION %s ADD TABLE <table>, or %s for a table without a primary key); "
            "after ALTER TABLE ... REPLICA IDENTITY NOTHING (or dropping the primary key or the "
            "identity index) of a captured table, the owner's UPDATE and DELETE on it fail, "
            "and a table that gains an identity has its updates and deletes skipped; a "
            "superuser can install it by starting pg_cdc once (docs: pg_cdc, Publications)",
            GUARD, exc.diag.message_primary, sql.Identifier(publication).as_string(conn),
            sql.Identifier(inserts_name(publication)).as_string(conn),
        )
