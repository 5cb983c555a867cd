"""Decode test_decoding's text output into the same events as :mod:`.pgoutput`.

The reader peeks with ``pg_logical_slot_peek_changes(slot, upto, NULL, VARIADIC options)`` and
:data:`TEST_DECODING_OPTIONS`, which yields lines such as::

    BEGIN 731
    table "My Schema"."T""1": UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:2 d[text]:'a''b'
    table public.t2, public.t3: TRUNCATE: (no-flags)
    COMMIT 731 (at 2024-01-02 03:04:05.123456+00)
    message: transactional: 1 prefix: outbox, sz: 7 content:{"a":1}

Names are printed with ``quote_identifier`` and types with ``format_type_be``. Values are the
type's output text, quoted with ``'`` (doubled inside) except for integers, floats and numeric
(bare), booleans (``true``/``false``) and bit strings (``B'101'``); ``null`` is SQL NULL and
``unchanged-toast-datum`` a TOAST value that was not logged.

The text alone is not enough to match pgoutput exactly: the old tuple is labelled ``old-key:``
both for a key-only image and for a whole REPLICA IDENTITY FULL row, NULL columns are left out of
it, generated columns are printed (pgoutput omits them) and the key columns are not marked. So
the decoder asks a catalog lookup for each table's
:class:`~postgres_cdc_source.catalog.TableInfo` once per peek session
(:func:`postgres_cdc_source.catalog.table_info`, in the peeking session).

The catalog describes the table as it is now, while the change was written under the table's
definition at that time, so what Postgres printed wins. The printed columns give ``after``. An
old tuple (a delete, an update that changed the key) is the identity as logged: when its
columns are not what the catalog's identity predicts (a key column renamed, the key moved, the
table gone), they are the key. An insert or a key-keeping update prints no key: it takes the
catalog's key columns from the printed row, and when they are not all there the key is null
and a warning says so (an identity moved between columns the row still has cannot be seen
here; pgoutput's Relation messages carry it).
"""


from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime

import orjson

from connector_common.lsn import format_lsn
from postgres_cdc_source.catalog import CatalogLookup
from postgres_cdc_source.decoding.changes import (
    DELETE,
    INSERT,
    TRUNCATE,
    UPDATE,
    Begin,
    Change,
    Commit,
    Event,
    MessageFilter,
    PeekRow,
    Retyping,
    TableFilter,
    build_change,
    decode_error,
    empty_change,
    message_event,
)
from postgres_cdc_source.decoding.schema_changes import Columns as Tracked
from postgres_cdc_source.decoding.schema_changes import ColumnTracker
from postgres_cdc_source.decoding.text_lines import (
    COMMIT_LINE,
    HEADER,
    HEX,
    NO_TUPLE,
    QUALIFIED,
    TRUNCATE_LINE,
    Columns,
    message_line,
    parse_columns,
    unquote_ident,
)
from postgres_cdc_source.decoding.text_tables import (
    Printed,
    TextTable,
    align,
    catalog_tuple,
    new_tuple,
)
from postgres_cdc_source.errors import DecodeError

__all__ = ["TEST_DECODING_OPTIONS", "TextFormatDecoder"]

TEST_DECODING_OPTIONS: dict[str, str] = {
    "include-xids": "1",
    "include-timestamp": "1",
    "skip-empty-xacts": "0",
}
"""Options for every test_decoding peek, passed as name/value pairs in this order.

xids and commit timestamps are part of the output rows; empty transactions are kept so every
commit, even of a DDL-only transaction, is seen.
"""

log = logging.getLogger(__name__)
_PLUGIN = "test_decoding"
_dumps = orjson.dumps


class TextFormatDecoder:
    """Decoder for one test_decoding peek session.

    ``catalog(schema, table)`` is called at most once per kept table per decoder, lazily at its
    first change; ``table_filter(schema, table)`` once per table. Changes of filtered tables
    advance ``seq`` without their tuples being parsed or the catalog being asked: after the
    first of each kind, a set lookup of the line's header is all they cost.
    ``messages(prefix)`` picks the logical messages to deliver; with it every transactional
    message counts in ``seq``, as with pgoutput; without it they are skipped and not counted.
    ``typed`` (``row_format=struct``) types the kept tables' rows
    (:meth:`~postgres_cdc_source.rows.RowFormat.retyped`): the hot path then keeps
    their images as dicts of the struct's values. ``columns`` (``include_schema_changes``) is
    handed the printed columns of each kept table's insert and update; a ``ddl`` change it makes
    comes right before that change and counts in ``seq``. The hot path then takes only the tables
    whose tracked columns are the catalog's, which its regex matches. ``owner(schema, table)``
    (:func:`~postgres_cdc_source.partitions.owner_lookup`), asked once per table, names the
    captured table a partition's changes belong to (its partitioned ancestor the rules keep),
    as pgoutput's ``publish_via_partition_root`` does.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        catalog: CatalogLookup,
        table_filter: TableFilter | None = None,
        *,
        keep_values: bool = False,
        messages: MessageFilter | None = None,
        typed: Retyping | None = None,
        columns: ColumnTracker | None = None,
        owner: Callable[[str, str], tuple[str, str] | None] | None = None,
    ) -> None:
        self._catalog = catalog
        self._owner = owner
        self._typed = typed
        self._columns = columns
        self._ddl: Change | None = None  # the ddl change _change found before its change
        self._filter = table_filter
        self._keep_values = keep_values
        self._messages = messages
        self._tables: dict[tuple[str, str], TextTable] = {}
        # "table s.t: INSERT:" / "...: UPDATE:" of kept tables with a catalog: the hot path's
        # lookup, filled as the general path meets them
        self._headers: dict[str, tuple[TextTable, str]] = {}
        # "table s.t: INSERT:" (and UPDATE, DELETE) of tables the filter rejects, as met
        self._skipped: set[str] = set()

    # one branch per message type, inline: a call per message would cost in this hot loop
    def events(self, rows: Iterable[PeekRow]) -> Iterator[Event]:  # noqa: C901
        xid = -1  # xid of the open transaction; -1 outside one
        seq = 0
        headers = self._headers
        skipped = self._skipped
        keep_values = self._keep_values
        for lsn, row_xid, line in rows:
            if not isinstance(line, str):
                raise decode_error(_PLUGIN, lsn, "got bytes, expected text: peek test_decoding "
                                   "with pg_logical_slot_peek_changes")
            try:
                first = line[:1]
                if first == "t":
                    if xid < 0:
                        raise ValueError("change outside a transaction")
                    # The hot path, inline: an insert, or an update without an old key (its key
                    # did not change), of a known table, the whole new tuple as the catalog
                    # predicts. The header is found by its text: a quoted name holding ": "
                    # gives a text that is no known header, and goes the general way.
                    end = line.find(":", line.find(": ", 6) + 2) + 1
                    if line[:end] in skipped:  # a table the filter rejects: nothing parsed
                        seq += 1
                        continue
                    known = headers.get(line[:end])
                    if known is not None and not line.startswith(" old-key:", end):
                        change = _inline(known[0], known[1], line, end, lsn, seq, keep_values)
                        if change is not None:
                            yield change
                            seq += 1
                            continue
                    header = HEADER.match(line)
                    if header is not None:
                        change = self._change(header, line, lsn, seq)
                        if self._ddl is not None:
                            yield self._ddl
                            self._ddl = None
                            seq += 1
                        seq += 1
                        if change is not None:
                            yield change
                    else:
                        for change in self._truncate(line, lsn, seq):
                            if change is not None:
                                yield change
                            seq += 1
                elif first == "B" and line.startswith("BEGIN "):
                    xid = int(line[6:])
                    seq = 0
                    yield Begin(xid, lsn)
                elif first == "C" and line.startswith("COMMIT "):
                    yield self._commit(line, xid, lsn)
                    xid = -1
                elif first == "m" and line.startswith(("message: ", HEX)):
                    if self._messages is None:
                        continue
                    parsed = message_line(line)
                    event, seq = message_event(self._messages, lsn, xid, row_xid, seq, parsed,
                                               keep_values=keep_values)
                    if event is not None:
                        yield event
                else:
                    raise ValueError("unrecognized line (were TEST_DECODING_OPTIONS passed?)")
            except DecodeError:
                raise
            except ValueError as exc:
                raise decode_error(_PLUGIN, lsn, f"{exc}: {line[:120]!r}") from exc

    @staticmethod
    def _commit(line: str, xid: int, lsn: int) -> Commit:
        """The commit row's own LSN is the end of the commit record, like pgoutput's end_lsn."""
        match = COMMIT_LINE.match(line)
        if match is None:
            raise ValueError("COMMIT without xid and timestamp (include-xids and "
                             "include-timestamp must be on)")
        if int(match[1]) != xid:
            raise ValueError(f"COMMIT of xid {match[1]} while transaction {xid} is open")
        commit_ts = datetime.fromisoformat(match[2]).astimezone(UTC)
        return Commit(xid, lsn, commit_ts)

    def _table(self, schema_ident: str, table_ident: str) -> TextTable:
        key = (schema_ident, table_ident)
        table = self._tables.get(key)
        if table is None:
            schema, name = unquote_ident(schema_ident), unquote_ident(table_ident)
            if self._owner is not None:  # a partition's changes are its captured ancestor's
                owner = self._owner(schema, name)
                if owner is not None and owner != (schema, name):
                    # named as the ancestor, its tuples read against the partition's columns
                    table = self._tables[key] = TextTable(*owner, True, self._typed)
                    table.load(self._catalog(schema, name))
                    return table
            keep = self._filter is None or self._filter(schema, name)
            table = self._tables[key] = TextTable(schema, name, keep, self._typed)
        return table

    def _change(self, header: re.Match[str], line: str, lsn: int, seq: int) -> Change | None:
        """Decode an INSERT, UPDATE or DELETE line; ``None`` if its table is filtered out."""
        table = self._table(header[1], header[2])
        if not table.keep:
            self._skipped.add(header[0])
            return None
        if not table.loaded:
            table.load(self._catalog(table.schema, table.table))
        op = _OPS[header[3]]
        pos = header.end()
        hot = (op != DELETE and table.fast is not None and table.shape is not None
               and table.shape.changed is None)
        if hot and self._columns is None:
            self._headers[line[:pos]] = (table, op)
        if line.endswith(NO_TUPLE) and pos + len(NO_TUPLE) == len(line):
            return empty_change(lsn, seq, table.schema, table.table, op)
        if op == DELETE:
            printed, pos = parse_columns(line, pos)
            if pos != len(line):
                raise ValueError(f"cannot parse the old tuple at offset {pos}")
            old = None
            if (table.shape is not None and table.shape.changed is None
                    and table.logged_as_catalog(table.shape, printed)):
                old = align(table, table.shape, printed)
            if old is not None and table.shape is not None:
                return build_change(table.shape, lsn, seq, DELETE, old, None,
                                    old_is_full=table.full, new_has_unchanged=False,
                                    keep_values=self._keep_values)
            shape, old = table.shape_of_old(printed)
            return build_change(shape, lsn, seq, DELETE, old, None, old_is_full=False,
                                new_has_unchanged=False, keep_values=self._keep_values)
        columns: Columns | None = None
        if op == UPDATE and line.startswith(" old-key:", pos):
            columns, pos = parse_columns(line, pos + 9)
            if not line.startswith(" new-tuple:", pos):
                raise ValueError(f"cannot parse the old tuple at offset {pos}")
            pos += 11
        shape, new, unchanged, shown = new_tuple(table, line, pos)
        if self._columns is not None and self._track(
                table, (header[0], op) if hot else None, shown, lsn, seq):
            seq += 1
        old = None
        old_is_full = table.full
        if columns is not None:
            old = align(table, shape, columns)
            if old is None:
                raise ValueError("the old tuple has a column the new tuple does not")
            if table.info is None or not table.logged_as_catalog(shape, columns):
                # what Postgres logged is the key, whatever the catalog says now
                shape = table.shape_with_key(shape, [n for n, _, _ in columns])
                old_is_full = False
        elif len(shape.key) < len(table.key_names) or table.info is None:
            shape = table.shape_with_key(shape, [])
            self._warn_key_unknown(table, lsn)
        return build_change(shape, lsn, seq, op, old, new, old_is_full=old_is_full,
                            new_has_unchanged=unchanged, keep_values=self._keep_values)

    def _track(self, table: TextTable, hot: tuple[str, str] | None, printed: Printed, lsn: int,
               seq: int) -> bool:
        """Hand the tracker a change's printed columns; whether it made a ``ddl`` change (at
        ``seq``, kept for :meth:`events`). The hot path, whose regex takes the catalog's columns
        without asking the tracker, takes the table's ``hot`` header only while the tracked
        columns are the catalog's."""
        assert self._columns is not None
        columns = _published(table, printed)
        old = self._columns.seen(table.schema, table.table, columns)
        if columns == _published(table, table.printed):
            if hot is not None:
                self._headers[hot[0]] = (table, hot[1])
        else:
            for gone in [h for h, t in self._headers.items() if t[0] is table]:
                del self._headers[gone]  # in place: events() holds the dict
        if old is None:
            return False
        self._ddl = self._columns.change(lsn, seq, table.schema, table.table, old, columns,
                                         table.key_names)
        return True

    def _warn_key_unknown(self, table: TextTable, lsn: int) -> None:
        """Say once per table and peek that rows go out without the key test_decoding did not
        print and the catalog can no longer tell."""
        if table.warned:
            return
        table.warned = True
        log.warning(
            "pg_cdc: %s.%s changed (or was dropped) after changes from LSN %s were written: "
            "test_decoding does not print the key of an insert or of an update that keeps it, "
            "and the table's key columns are not all in those rows any more, so their key is "
            "null; plugin=pgoutput logs it with every change (docs: pg_cdc, Keys)",
            table.schema, table.table, format_lsn(lsn),
        )

    def _truncate(self, line: str, lsn: int, seq: int) -> Iterator[Change | None]:
        """One change per truncated table (``None`` for filtered ones, which count too)."""
        match = TRUNCATE_LINE.match(line)
        if match is None:
            raise ValueError("unrecognized table line")
        for offset, name in enumerate(QUALIFIED.finditer(match[1])):
            table = self._table(name[1], name[2])
            # a partition of a captured table: its truncate is not the table's (pgoutput, under
            # publish_via_partition_root, sends only the truncate of the table itself)
            own = (table.schema, table.table) == (unquote_ident(name[1]), unquote_ident(name[2]))
            yield (empty_change(lsn, seq + offset, table.schema, table.table, TRUNCATE)
                   if table.keep and own else None)


_OPS = {"INSERT": INSERT, "UPDATE": UPDATE, "DELETE": DELETE}


def _published(table: TextTable, printed: Printed) -> Tracked:
    """Printed columns as the tracker holds them: generated ones left out, as in the rows."""
    return tuple(c for c in printed if c[0] not in table.generated)


_new = tuple.__new__  # builds a Change without NamedTuple.__new__'s Python frame


def _inline(
    table: TextTable, op: str, line: str, pos: int, lsn: int, seq: int, keep_values: bool
) -> Change | None:
    """The change of an insert or key-keeping update whose new tuple (from ``pos``) matches
    the catalog's regex: what :meth:`TextFormatDecoder._change` builds for it, or ``None``
    for anything else (an unchanged TOAST value, a changed table, a value its converter
    rejects), which the general path then decodes or names as an error."""
    shape = table.shape
    raw = catalog_tuple(table, line, pos)
    if raw is None or shape is None:
        return None
    try:
        values = [None if r is None else c(r) for c, r in zip(shape.converters, raw, strict=True)]
    except (ValueError, KeyError, TypeError):
        return None
    after = dict(zip(shape.names, values, strict=True))
    key_image = {n: after[n] for n in shape.key_names} if shape.key else None
    if table.typed is not None:  # row_format=struct: the images stay dicts
        return _new(Change, (lsn, seq, shape.schema, shape.table, op, key_image, None, after,
                             (), after if keep_values else None, None))
    key = None if key_image is None else _dumps(key_image).decode()
    return _new(Change, (lsn, seq, shape.schema, shape.table, op, key, None,
                         _dumps(after).decode(), (), after if keep_values else None, None))
