"""The pgoutput publications ``pg_cdc`` creates, kept safe for the owner's writes: their names,
and which of them a batch reads.

Postgres refuses ``UPDATE``/``DELETE`` on a table that is in a publication publishing updates or
deletes but has no usable replica identity (``DEFAULT`` without a primary key, ``NOTHING``, or a
dropped ``USING INDEX`` index). A ``FOR ALL TABLES`` publication of every operation therefore
breaks the application on every such table the moment it is created. So ``pg_cdc`` never
creates one; it manages a pair instead, holding only the captured tables, so that the slot
sends the reader only what the filters can match:

* ``<publication>`` publishes insert, update, delete and truncate, and holds the captured tables
  that have a usable replica identity;
* ``<publication>_inserts`` publishes only insert and truncate (which never make a write fail),
  and holds the captured tables without one.

Both are peeked together (pgoutput takes several ``publication_names`` and sends each change
once). Membership is re-synchronised on the driver whenever a batch is planned
(:func:`~.publication_sync.sync`): new tables that match the filters join, tables that gained or
lost their identity move, tables that no longer match leave. They carry :data:`MARKER` as their
comment; a publication without it (the user's own, or one created by hand for
``create_slot=false``) is never altered.

New tables and identity changes (superuser). pgoutput decides as of each change whether it is
published, so a row written before its table joined the pair is never sent. Where the role may
create event triggers (a superuser), ``pg_cdc`` installs :data:`~.identity_guard.GUARD`: inside
the transaction of the DDL, it adds a table created by ``CREATE TABLE``/``CREATE TABLE AS``/
``SELECT INTO`` to every managed pair (the next planning drops it where the filters do not
capture it), so every later row of that transaction is sent; it moves a table whose identity
changed (``ALTER TABLE``, ``DROP INDEX``), so the owner's next ``UPDATE`` never fails and a
table that gained an identity has its updates and deletes sent. The rows a ``CREATE TABLE AS``
or ``SELECT INTO`` wrote are older than the trigger: it asks for them with a logical message,
and the query backfills exactly those rows (:mod:`.identity_guard`,
:mod:`~postgres_cdc_source.backfill`). A table is added to ``<publication>`` by a planning
inside a transaction that first takes ``SHARE UPDATE EXCLUSIVE`` on it (which ordinary reads and
writes do not conflict with, but ``ALTER TABLE`` does) and re-checks its identity under that
lock. The guard never fails the owner's statement: an error becomes a warning, and the next
planning does the work. Without it (no superuser, and none ever started ``pg_cdc`` in the
database), rows written to a new table before the next planning are not sent, and identity
changes leave the same window; a warning at start names it and the hand fix (the migration adds
its table to the pair before filling it: no role below superuser can create a publication or
trigger that covers tables created later).

``<publication>_all`` (``all_tables_publication=true``, superuser) is ``FOR ALL TABLES`` and
publishes only insert and truncate: every insert of the database then travels to the reader,
which drops those of tables it does not capture; it is the way to get new tables' inserts
without the guard. pgoutput looks a publication up as of each decoded change, and before
Postgres 18 fails the peek ("publication does not exist") for a change written before the
publication was. So whether a slot reads it is recorded in its comment as switches ("slot <s>
from LSN <l>", "slot <s> until LSN <l>", :func:`admit`), each applying to the batches that
start after the slot's position when recorded; a "from" only once the slot's restart point is
past the publication's creation. The default stops a slot that reads it that way. The
publications a batch is read with are a function of the batch, so a replay reads the same
rows.

Creating them is :mod:`.publication_setup`'s work, keeping their membership in step
:mod:`.publication_sync`'s, and the event trigger :mod:`.identity_guard`'s.
"""

from __future__ import annotations

import logging
import re
from typing import Any, NamedTuple

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from connector_common.lsn import format_lsn, parse_lsn
from postgres_cdc_source.options import CdcOptions

__all__ = [
    "ALL_SUFFIX",
    "HAS_IDENTITY",
    "INSERTS_SUFFIX",
    "MARKER",
    "AllState",
    "admit",
    "all_name",
    "all_state",
    "inserts_name",
    "managed_oids",
    "names",
    "reads_all",
    "switches",
]

log = logging.getLogger(__name__)
Conn = psycopg.Connection[Any]

MARKER = "pg_cdc managed publication: membership follows include_tables and replica identity"
INSERTS_SUFFIX = "_inserts"
ALL_SUFFIX = "_all"

HAS_IDENTITY = """(c.relreplident = 'f' OR EXISTS (
    SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisvalid AND i.indisready
      AND CASE c.relreplident WHEN 'd' THEN i.indisprimary
                              WHEN 'i' THEN i.indisreplident ELSE false END))"""
"""SQL true for a table Postgres lets update and delete while it is published for those
operations (``c`` is its ``pg_class`` row)."""


def inserts_name(publication: str) -> str:
    """The insert/truncate-only sibling of ``publication``."""
    return publication + INSERTS_SUFFIX


def all_name(publication: str) -> str:
    """The ``FOR ALL TABLES`` insert/truncate-only sibling of ``publication``."""
    return publication + ALL_SUFFIX


def managed_oids(conn: Conn, publication: str) -> tuple[int, int] | None:
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
    ``<publication>_all`` where the slot reads it at ``start``, see :func:`reads_all`), or the
    user's one publication. A function of the batch: a replay peeks with the same
    publications."""
    if managed_oids(conn, options.publication) is None:
        return [options.publication]
    pubs = [options.publication, inserts_name(options.publication)]
    if reads_all(all_state(conn, options), options.slot, start):
        pubs.append(all_name(options.publication))
    return pubs


# <publication>_all as pg_cdc needs it (all tables, never update/delete), and the slot's
# positions. Whether a slot reads it is recorded in its comment as switches, "; slot <slot>
# from LSN <lsn>" and "; slot <slot> until LSN <lsn>", appended in LSN order by :func:`admit`;
# a batch reads it when the last switch at or before its start says "from". From Postgres 18
# pgoutput skips a publication that a decoded change predates, and a slot with no switch reads
# it (as every slot did before switches were recorded there); before 18 it fails the peek, so
# a "from" is recorded only once every change the slot can still decode comes after the
# publication: the slot's restart point is past the LSN recorded at creation, or (a
# publication created by hand) the publication is older than the slot's catalog_xmin.
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


class AllState(NamedTuple):
    """``<publication>_all`` as the server shows it, beside the slot's positions."""

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
        return self.skips_older or self.older_than_slot or (
            created is not None and self.restart is not None
            and self.restart >= parse_lsn(created[1])
        )


def all_state(conn: Conn, options: CdcOptions) -> AllState | None:
    row = conn.execute(_ALL_STATE, (options.slot, all_name(options.publication))).fetchone()
    return None if row is None else AllState(*row)


def switches(comment: str, slot: str) -> list[tuple[bool, int]]:
    """The switches recorded for ``slot``: (reads from there on, LSN), in LSN order."""
    return [(kind == "from", parse_lsn(lsn)) for kind, lsn in re.findall(
        rf"; slot {re.escape(slot)} (from|until) LSN ([0-9A-F]+/[0-9A-F]+)", comment)]


def reads_all(state: AllState | None, slot: str, start: int) -> bool:
    """Whether a batch of ``slot`` from ``start`` reads ``<publication>_all``."""
    if state is None or not state.fit:
        return False
    reads = state.skips_older  # 18: a slot without switches reads it, as it always did
    for on, lsn in switches(state.comment, slot):
        if lsn <= start:
            reads = on
    return reads


def admit(conn: Conn, options: CdcOptions, *, new_slot: bool = False) -> None:
    """On the driver, at start and planning: record that the slot's batches starting *after*
    its position read ``<publication>_all`` (``all_tables_publication``, once the slot can
    decode with it) or no longer read it (the default). Every batch read so far, or planned
    and maybe about to be replayed, starts at or before that position, so it is read again
    exactly as it was. A slot just created (``new_slot``) has had no batch yet: the switch
    applies from its position on."""
    state = all_state(conn, options)
    if state is None or not state.fit or state.confirmed is None:
        return
    at = state.confirmed + (0 if new_slot else 1)
    wanted = options.all_tables_publication
    if reads_all(state, options.slot, at) == wanted or (wanted and not state.decodable):
        return
    name = all_name(options.publication)
    switch = "from" if wanted else "until"
    comment = (state.comment if state.comment.startswith(MARKER) else MARKER) + (
        f"; slot {options.slot} {switch} LSN {format_lsn(at)}")
    try:
        conn.execute(sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
            sql.Identifier(name), sql.Literal(comment)))
    except pgerrors.InsufficientPrivilege as exc:
        log.warning("pg_cdc: cannot record in publication %s's comment that slot %s %s it "
                    "(%s); %s: make the role its owner", name, options.slot,
                    "reads" if wanted else "no longer reads", exc.diag.message_primary,
                    "it is not read" if wanted else "it is still read")
        return
    if wanted:
        log.info("replication slot %s reads publication %s from %s", options.slot, name,
                 format_lsn(at))
    else:
        log.warning(
            "pg_cdc: replication slot %s no longer reads publication %s from %s on "
            "(all_tables_publication=false): only the captured tables' changes are sent; "
            "rows a CREATE TABLE AS or SELECT INTO writes arrive through the event trigger "
            "instead. Drop the publication once no query reads it, or set "
            "all_tables_publication=true to keep reading it", options.slot, name,
            format_lsn(at))
