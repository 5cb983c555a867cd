"""Asking a running ``pg_cdc`` query to backfill tables: the request as a logical message.

A request is a transactional logical message with prefix :data:`REQUEST_PREFIX` and JSON
content ``{"id": ..., "slot": ..., "tables": [["schema", "table"], ...], "where": ...}``
(a cancel: ``{"cancel": <id>, "slot": ...}``), followed by ``NOTIFY`` on
:data:`BACKFILL_CHANNEL`, which tells a running query to look for it at once (without it, the
query finds it at its next start). The event trigger writes a third kind for a table created
with its rows (``{"created": ...}``, see :func:`parse_request`).
From SQL::

    SELECT pg_logical_emit_message(true, 'pg_cdc.backfill',
        '{"id": "b1", "slot": "orders", "tables": [["public", "orders"]], "where": null}');
    NOTIFY pg_cdc_backfill;
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from postgres_cdc_source.backfill.progress import Request
from postgres_cdc_source.errors import BackfillRefused
from postgres_cdc_source.options import BACKFILL_CHANNEL, MARKER_PREFIX, REQUEST_PREFIX
from postgres_cdc_source.snapshot.offsets import Creation

__all__ = [
    "BACKFILL_CHANNEL",
    "MARKER_PREFIX",
    "REQUEST_PREFIX",
    "cancel_backfill",
    "main",
    "parse_request",
    "request_backfill",
]


_TABLE = """\
SELECT n.nspname, c.relname, c.relkind,
       EXISTS (SELECT FROM pg_catalog.pg_index AS i WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = pg_catalog.to_regclass(%s)"""
_SLOT = ("SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = %s "
         "AND database = pg_catalog.current_database()")


def _table(conn: psycopg.Connection[Any], name: str) -> tuple[str, str]:
    """``name`` (``schema.table`` as SQL writes it, ``search_path`` applies) resolved, or
    :class:`BackfillRefused` saying why it cannot be backfilled."""
    row = conn.execute(_TABLE, (name,)).fetchone()
    if row is None:
        raise BackfillRefused(f"table {name!r} does not exist")
    schema, table, kind, has_key = row
    if kind not in ("r", "p"):
        raise BackfillRefused(f"{name!r} is not a table")
    if not has_key:
        raise BackfillRefused(
            f"table {schema}.{table} has no primary key: a backfill reads it in key ranges, "
            "and a consumer could not match the rows it reads to the later changes of the "
            "same rows; add a primary key, or restart the query on a new checkpoint with "
            "snapshot=initial")
    return str(schema), str(table)


def _send(dsn: str, slot: str, content: dict[str, Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute(_SLOT, (slot,)).fetchone() is None:
            raise BackfillRefused(f"replication slot {slot!r} does not exist in this database "
                                  "(requests are made on the primary the query reads)")
        tables = content.get("tables")
        if tables is not None:
            content["tables"] = [list(_table(conn, name)) for name in tables]
        with conn.transaction():  # flushed at commit: the query that is told finds it
            conn.execute("SET LOCAL synchronous_commit = on")
            conn.execute("SELECT pg_catalog.pg_logical_emit_message(true, %s, %s)",
                         (REQUEST_PREFIX, json.dumps(content)))
            conn.execute(sql.SQL("NOTIFY {}").format(sql.Identifier(BACKFILL_CHANNEL)))


def request_backfill(
    dsn: str, slot: str, tables: Sequence[str], where: str | None = None
) -> str:
    """Ask the query reading ``slot`` to deliver every row of ``tables`` (SQL names) as ``read``
    rows while it streams, and return the backfill id.

    ``where`` (trusted SQL, e.g. ``"created_at > now() - interval '7 days'"``) limits the rows;
    the query runs it in read-only transactions. Raises :class:`BackfillRefused` for an unknown
    slot, an unknown table or one without a primary key; a table the query does not capture is
    refused by the query when it picks the request up (a warning in its log).
    """
    if not tables:
        raise BackfillRefused("no table to backfill")
    backfill_id = uuid.uuid4().hex
    _send(dsn, slot, {"id": backfill_id, "slot": slot, "tables": list(tables), "where": where})
    return backfill_id


def cancel_backfill(dsn: str, slot: str, backfill_id: str) -> None:
    """Stop backfill ``backfill_id`` (queued or running) after its current chunk."""
    _send(dsn, slot, {"cancel": backfill_id, "slot": slot})


def parse_request(
    content: bytes, slot: str, publication: str | None = None
) -> Request | str | None:
    """A request message's content: the :class:`Request` for ``slot``, the id a cancel names,
    or ``None`` (for another slot, or not a request this version understands).

    With ``publication`` (a query reading that managed pair with pgoutput, whose publications
    did not send a new table's first rows), also the event trigger's request for the rows a
    ``CREATE TABLE AS``/``SELECT INTO`` wrote before the table joined the pair
    (:mod:`~postgres_cdc_source.replication.identity_guard`): those of its creating
    transaction (``xmin``) written before the command that added it (``cmin``)."""
    try:
        data = json.loads(content)
    except ValueError:
        return None
    if isinstance(data, dict) and "created" in data:
        return None if publication is None else _created(data, publication)
    if not isinstance(data, dict) or data.get("slot") != slot:
        return None
    if "cancel" in data:
        return str(data["cancel"])
    try:
        return Request(str(data["id"]), tuple((str(s), str(t)) for s, t in data["tables"]),
                       None if data.get("where") is None else str(data["where"]))
    except (KeyError, TypeError, ValueError):
        return None


def _created(data: dict[str, Any], publication: str) -> Request | None:
    if data.get("publication") != publication:
        return None
    try:
        schema, table = (str(n) for n in data["created"])
        xmin, cid = int(data["xmin"]), int(data["cid"])
    except (KeyError, TypeError, ValueError):
        return None
    return Request(f"created {schema}.{table} in transaction {xmin}", ((schema, table),),
                   created=Creation(xmin, cid))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pg-cdc-backfill", description=(
        "Ask a running pg_cdc query to backfill tables (prints the backfill id)."))
    dsn = os.environ.get("PG_CDC_DSN")
    p.add_argument("--dsn", default=dsn, required=dsn is None,
                   help="Postgres conninfo or URI of the primary (default: $PG_CDC_DSN)")
    p.add_argument("--slot", required=True, help="the query's replication slot")
    p.add_argument("--where", help="trusted SQL condition limiting the rows")
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
