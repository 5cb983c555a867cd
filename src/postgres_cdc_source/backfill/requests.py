"""Asking a running ``pg_cdc`` query to backfill tables: a row of ``public.pg_cdc_requests``.

:func:`request_backfill` (or the ``pg-cdc-backfill`` command) inserts the row; who may is who
holds ``INSERT`` on that table, as its owner grants (:mod:`.request_table` says why a request
cannot be a bare logical message). From SQL, the same request is::

    INSERT INTO public.pg_cdc_requests (slot, tables)
    VALUES ('orders', ARRAY['public.orders']::regclass[]);

and a cancel ``INSERT INTO public.pg_cdc_requests (kind, id, slot) VALUES ('cancel', '<id>',
'orders')``. The table's trigger places the request in the WAL and tells a running query to
look for it at once (without a running query, the query finds it at its next start).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from postgres_cdc_source.backfill.progress import Request
from postgres_cdc_source.errors import BackfillRefused
from postgres_cdc_source.options import REQUESTS_TABLE
from postgres_cdc_source.replication import request_table
from postgres_cdc_source.replication.request_table import (
    KINDS,
    MAX_CONDITION,
    MAX_ID,
    MAX_TABLES,
    TABLE,
    RequestRow,
)
from postgres_cdc_source.snapshot.offsets import Creation

__all__ = ["Malformed", "cancel_backfill", "main", "request_backfill", "request_of"]


_TABLE = """\
SELECT c.oid, n.nspname, c.relname, c.relkind,
       EXISTS (SELECT FROM pg_catalog.pg_index AS i WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = pg_catalog.to_regclass(%s)"""
_SLOT = ("SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = %s "
         "AND database = pg_catalog.current_database()")


def _table(conn: psycopg.Connection[Any], name: str) -> int:
    """The oid of ``name`` (``schema.table`` as SQL writes it, ``search_path`` applies), or
    :class:`BackfillRefused` saying why it cannot be backfilled."""
    row = conn.execute(_TABLE, (name,)).fetchone()
    if row is None:
        raise BackfillRefused(f"table {name!r} does not exist")
    oid, schema, table, kind, has_key = row
    if kind not in ("r", "p"):
        raise BackfillRefused(f"{name!r} is not a table")
    if not has_key:
        raise BackfillRefused(
            f"table {schema}.{table} has no primary key: a backfill reads it in key ranges, "
            "and a consumer could not match the rows it reads to the later changes of the "
            "same rows; add a primary key, or restart the query on a new checkpoint with "
            "snapshot=initial")
    return int(oid)


def _insert(dsn: str, slot: str, columns: dict[str, Any], standby_dsn: str | None) -> None:
    """Insert the request row ``columns`` for ``slot`` (no ``RETURNING``: that would take
    ``SELECT`` on the table, which a requesting role needs not hold); the slot is looked for
    on ``standby_dsn`` when given."""
    if standby_dsn is not None:
        with psycopg.connect(standby_dsn, autocommit=True) as standby:
            if standby.execute(_SLOT, (slot,)).fetchone() is None:
                raise BackfillRefused(f"replication slot {slot!r} does not exist in this "
                                      "database on the standby standby_dsn names")
    with psycopg.connect(dsn, autocommit=True) as conn:
        if standby_dsn is None and conn.execute(_SLOT, (slot,)).fetchone() is None:
            raise BackfillRefused(f"replication slot {slot!r} does not exist in this database "
                                  "(requests are made on the primary the query reads; for a "
                                  "query reading a standby, on its primary_dsn, with "
                                  "standby_dsn naming the standby)")
        if "tables" in columns:
            columns["tables"] = [_table(conn, name) for name in columns["tables"]]
        names = {"slot": slot, **columns}
        values = [sql.Placeholder() if n != "tables" else sql.SQL("%s::oid[]::regclass[]")
                  for n in names]
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            TABLE, sql.SQL(", ").join(map(sql.Identifier, names)), sql.SQL(", ").join(values))
        if not request_table.ensure(conn):  # made here if no query has started yet
            raise BackfillRefused(
                f"{'.'.join(REQUESTS_TABLE)} does not exist and role {conn.info.user!r} may "
                "not create it, or it is not trusted (see the warning logged): start the query "
                "first, as a role that may create it")
        try:
            with conn.transaction():  # flushed at commit: the query that is told finds it
                conn.execute("SET LOCAL synchronous_commit = on")
                conn.execute(insert, list(names.values()))
        except pgerrors.InsufficientPrivilege as exc:
            raise BackfillRefused(
                f"role {conn.info.user!r} may not request backfills here: the owner of "
                f"{'.'.join(REQUESTS_TABLE)} grants INSERT (slot, kind, id, tables) for "
                "backfills, and INSERT (condition) too for a where") from exc


def request_backfill(
    dsn: str, slot: str, tables: Sequence[str], where: str | None = None, *,
    standby_dsn: str | None = None,
) -> str:
    """Ask the query reading ``slot`` to deliver every row of ``tables`` (SQL names) as ``read``
    rows while it streams, and return the backfill id.

    ``where`` (SQL, e.g. ``"created_at > now() - interval '7 days'"``) limits the rows; the
    query runs it as its own role, in read-only transactions, so only a role granted ``INSERT
    (condition)`` on ``public.pg_cdc_requests`` may give one. Raises :class:`BackfillRefused`
    for an unknown slot, an unknown table or one without a primary key, and for a role without
    the grant; a table the query does not capture is refused by the query when it picks the
    request up (a warning in its log).

    For a query reading a standby (its ``primary_dsn`` is ``dsn``), ``standby_dsn`` names
    the standby, where the slot is.
    """
    if not tables:
        raise BackfillRefused("no table to backfill")
    backfill_id = uuid.uuid4().hex
    columns: dict[str, Any] = {"id": backfill_id, "tables": list(tables)}
    if where is not None:
        columns["condition"] = where
    _insert(dsn, slot, columns, standby_dsn)
    return backfill_id


def cancel_backfill(
    dsn: str, slot: str, backfill_id: str, *, standby_dsn: str | None = None
) -> None:
    """Stop backfill ``backfill_id`` (queued or running) after its current chunk
    (``standby_dsn`` as for :func:`request_backfill`)."""
    _insert(dsn, slot, {"kind": "cancel", "id": backfill_id}, standby_dsn)


class Malformed(ValueError):
    """A row that is not a request this version can take; the message says why."""


def request_of(row: RequestRow, slot: str, publication: str | None) -> Request | str | None:
    """What ``row`` asks of the query reading ``slot``: a :class:`Request`, the id a cancel
    names, or ``None`` when it is for another query. ``publication``: the managed pair whose
    event-trigger requests this query takes (``None``: it takes none, see
    :func:`~.planning.BackfillPlanner`). Raises :class:`Malformed` for a row it cannot take."""
    if row.kind not in KINDS:
        raise Malformed(f"unknown kind {row.kind[:40]!r}")
    if len(row.id) > MAX_ID or not row.id:
        raise Malformed(f"an id must hold 1 to {MAX_ID} characters")
    if row.kind == "created":
        if publication is None or row.publication != publication:
            return None
        if row.created_xmin is None or row.created_cid is None:
            raise Malformed("a created request without created_xmin and created_cid")
        (schema, table), = _tables(row, most=1)
        return Request(f"created {schema}.{table} in transaction {row.created_xmin}",
                       ((schema, table),), created=Creation(row.created_xmin, row.created_cid))
    if row.slot != slot:
        return None
    if row.kind == "cancel":
        return row.id
    if row.condition is not None and len(row.condition) > MAX_CONDITION:
        raise Malformed(f"its condition is longer than {MAX_CONDITION} characters")
    return Request(row.id, _tables(row, most=MAX_TABLES), row.condition)


def _tables(row: RequestRow, most: int) -> tuple[tuple[str, str], ...]:
    if not row.tables or row.table_count is None:
        raise Malformed("it names no table")
    if row.table_count > most:
        raise Malformed(f"it names {row.table_count} tables, more than {most}")
    tables = tuple((str(schema), str(table)) for schema, table in row.tables
                   if schema is not None and table is not None)  # not dropped since
    if not tables:
        raise Malformed("every table it names was dropped")
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pg-cdc-backfill", description=(
        "Ask a running pg_cdc query to backfill tables (prints the backfill id)."))
    dsn = os.environ.get("PG_CDC_DSN")
    p.add_argument("--dsn", default=dsn, required=dsn is None,
                   help="Postgres conninfo or URI of the primary (default: $PG_CDC_DSN)")
    p.add_argument("--slot", required=True, help="the query's replication slot")
    p.add_argument("--where", help="SQL condition limiting the rows (needs INSERT (condition))")
    p.add_argument("--cancel", metavar="ID", help="cancel this backfill instead")
    p.add_argument("tables", nargs="*", help="tables, as SQL names them (schema.table)")
    args = p.parse_args(argv)
    try:
        if args.cancel:
            cancel_backfill(args.dsn, args.slot, args.cancel)
        else:
            print(request_backfill(args.dsn, args.slot, args.tables, args.where))
    except BackfillRefused as exc:
        print(f"pg-cdc-backfill: {exc}", file=sys.stderr)
        return 2
    return 0
