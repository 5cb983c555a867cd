"""Reading the slot's changes without consuming them (``pg_logical_slot_peek_*changes``).

Reading is repeatable: a batch Spark replays after a crash decodes to exactly the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from connector_common.lsn import format_lsn
from postgres_cdc_source.decoding.factory import plugin_options
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import publication
from postgres_cdc_source.replication.positions import bring_to, temporary_copy
from postgres_cdc_source.replication.slots import in_use

__all__ = [
    "Row",
    "fetched_range",
    "fetches",
    "first_commit_end",
    "peek_messages",
    "peek_range",
    "publications",
]

Row = tuple[int, int, "bytes | str"]
"""A peeked change: ``(lsn, xid, data)``."""
Conn = psycopg.Connection[Any]


def publications(conn: Conn, options: CdcOptions, start: int) -> list[str]:
    """pgoutput's ``publication_names`` for a batch from ``start`` (empty for test_decoding)."""
    return publication.names(conn, options, start) if options.plugin == "pgoutput" else []


def peek_range(
    conn: Conn, options: CdcOptions, start: int, end: int, copy_from: int | None = None,
    *, relations: bool = False,
) -> Iterator[Row]:
    """The rows of the WAL range ``(start, end]``: the query's slot put at ``start``, or with
    ``copy_from`` (the batch's start) a temporary copy of it (:func:`~.positions.temporary_copy`),
    then peeked up to ``end``. The slot is placed (and that committed) now; the rows are read as
    the iterator is consumed. ``conn`` must not be in autocommit mode. ``relations`` keeps only
    pgoutput's Relation messages, filtered by the server."""
    return chain.from_iterable(
        fetched_range(conn, options, start, end, copy_from, relations=relations))


def fetched_range(
    conn: Conn, options: CdcOptions, start: int, end: int, copy_from: int | None = None,
    *, relations: bool = False,
) -> Iterator[list[Row]]:
    """:func:`peek_range`'s rows a fetch (a list of up to ``fetch_rows``) at a time
    (:func:`fetches`), for the compiled core, which reads a fetch in one call. Placed as
    :func:`peek_range` places."""
    if copy_from is None:
        copy = None
        bring_to(conn, options, start)
    else:
        copy = temporary_copy(conn, options, copy_from, start)
    pubs = publications(conn, options, start)
    conn.commit()
    return fetches(conn, options, end, pubs, copy, relations=relations)


def _peek_query(options: CdcOptions, pubs: list[str]) -> tuple[sql.Composed, list[str]]:
    if options.plugin == "pgoutput":
        func, data = "pg_logical_slot_peek_binary_changes", "data"
    else:
        func, data = "pg_logical_slot_peek_changes", _TEXT_DATA
    query = sql.SQL(
        "SELECT (lsn - '0/0')::int8, xid::text::int8, {}"
        " FROM {}(%s, %s::pg_lsn, %s, VARIADIC %s::text[])"
    ).format(sql.SQL(data), sql.Identifier(func))
    return query, plugin_options(options, pubs)


_TEXT_DATA = (
    "CASE WHEN starts_with(data, 'message: ') "
    "THEN 'message-hex: ' || encode(textsend(data), 'hex') ELSE data END"
)
"""test_decoding's line, with a logical message's line sent as the hex of its bytes: the
content is printed raw, and bytes that are not text in the client encoding would fail the read
(:mod:`postgres_cdc_source.decoding.text_format` reads both forms)."""


def fetches(
    conn: Conn,
    options: CdcOptions,
    upto: int,
    pubs: list[str],
    slot: str | None = None,
    *,
    relations: bool = False,
) -> Iterator[list[Row]]:
    """Stream ``(lsn, xid, data)`` rows up to ``upto`` without consuming them, each fetch's as
    the list the cursor returns.

    A server-side cursor fetches ``fetch_rows`` at a time, so a transaction of a million changes
    never sits whole in this process. The rows of each fetch are handed on as its list, not
    through the cursor's per-row ``__next__`` (a Python call per change, 2-3% of a read), and
    the compiled core reads a fetch in one call. ``conn`` must not be in autocommit mode.
    ``slot`` names a temporary copy to read instead of the query's slot; ``relations`` keeps
    only pgoutput's Relation messages.
    """
    query, plugin_options = _peek_query(options, pubs)
    if relations:
        query = sql.SQL("SELECT * FROM ({}) AS peeked(lsn, xid, data) "
                        "WHERE get_byte(data, 0) = 82").format(query)
    name = slot or options.slot
    try:
        with conn.cursor(name="pg_cdc_peek", binary=True) as cur:
            cur.execute(query, (name, format_lsn(upto), None, plugin_options))
            while rows := cur.fetchmany(options.fetch_rows):
                yield rows
    except pgerrors.ObjectInUse as exc:
        raise in_use(name, exc) from None


def peek_messages(
    conn: Conn, options: CdcOptions, upto: int, pubs: list[str]
) -> list[tuple[int, bytes | str]]:
    """``(lsn, data)`` of the logical messages the slot would emit up to ``upto`` (pgoutput
    peeked with ``messages``), filtered by the server: the rows of table changes never travel.
    """
    query, plugin_options = _peek_query(options, pubs)
    is_message = ("get_byte(data, 0) = 77" if options.plugin == "pgoutput"
                  else "starts_with(data, 'message-hex: ')")
    probe = sql.SQL("SELECT lsn, data FROM ({}) AS peeked(lsn, xid, data) WHERE {}").format(
        query, sql.SQL(is_message))
    try:
        rows = conn.execute(probe, (options.slot, format_lsn(upto), None, plugin_options))
        return [(int(lsn), data) for lsn, data in rows.fetchall()]
    except pgerrors.ObjectInUse as exc:
        raise in_use(options.slot, exc) from None


def first_commit_end(
    conn: Conn,
    options: CdcOptions,
    upto: int,
    pubs: list[str],
) -> int | None:
    """End LSN of the first transaction the slot would emit, looking no further than ``upto``.

    Used to stretch a byte-limited batch so it holds at least one whole transaction: otherwise a
    transaction larger than the limit would be re-decoded from its start by every batch it spans.
    """
    query, plugin_options = _peek_query(options, pubs)
    probe = sql.SQL("SELECT max(lsn) FROM ({}) AS peeked(lsn, xid, data)").format(query)
    try:
        row = conn.execute(probe, (options.slot, format_lsn(upto), 1, plugin_options)).fetchone()
    except pgerrors.ObjectInUse as exc:
        raise in_use(options.slot, exc) from None
    return None if row is None or row[0] is None else int(row[0])
