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
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson

from postgres_cdc_source.catalog import CatalogLookup, TableInfo
from postgres_cdc_source.decoding.changes import (
    DELETE,
    INSERT,
    TRUNCATE,
    UNCHANGED,
    UPDATE,
    Begin,
    Change,
    Commit,
    Event,
    MessageFilter,
    PeekRow,
    RawValue,
    RowShape,
    TableFilter,
    build_change,
    decode_error,
    empty_change,
    message_event,
)
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.lsn import format_lsn
from postgres_cdc_source.values import converter_for_oid, converter_for_type_name

__all__ = ["TEST_DECODING_OPTIONS", "TextFormatDecoder", "message_line"]

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
Columns = list[tuple[str, str, RawValue]]
"""Columns as printed: ``(name, format_type name, raw value)``."""

# quote_identifier's output: a double-quoted name with "" inside, or a bare one.
_IDENT = r'(?:"(?:[^"]|"")*"|[^\s"\[\].:,]+)'
_HEADER = re.compile(rf"table ({_IDENT})\.({_IDENT}): (INSERT|UPDATE|DELETE):")
_TRUNCATE = re.compile(
    rf"table ((?:{_IDENT}\.{_IDENT}, )*{_IDENT}\.{_IDENT}): TRUNCATE:"
    r"(?: restart_seqs)?(?: cascade)?(?: \(no-flags\))?\Z"
)
_QUALIFIED = re.compile(rf"({_IDENT})\.({_IDENT})(?:, |\Z)")
# ' name[type]:value'. The type ends at the first ']:' outside double quotes ('integer[]]:'),
# a value is bare or a '-quoted string with '' inside.
_COLUMN = re.compile(
    rf" ({_IDENT})\[((?:[^\"\]]|\"(?:[^\"]|\"\")*\"|\](?!:))+)\]:('[^']*(?:''[^']*)*'|[^' ][^ ]*)"
)
_COMMIT = re.compile(r"COMMIT (\d+) \(at ([^)]+)\)\Z")
_MESSAGE = re.compile(rb"message: transactional: ([01]) prefix: ")
_MESSAGE_SIZE = re.compile(rb", sz: (\d+) content:")
_HEX = "message-hex: "
_QUOTED = r"'([^']*(?:''[^']*)*)'"

_UNQUOTED = frozenset({20, 21, 23, 26, 700, 701, 1700})  # print_literal's bare types
_BOOL = 16
_BITS = frozenset({1560, 1562})
_NO_TUPLE = " (no-tuple-data)"


def _unquote_ident(text: str) -> str:
    return text[1:-1].replace('""', '"') if text.startswith('"') else text


def _raw(token: str) -> RawValue:
    """A printed value -> the type output text pgoutput would have sent (None, UNCHANGED)."""
    first = token[0]
    if first == "'":
        return token[1:-1].replace("''", "'")
    if token == "null":
        return None
    if token == "unchanged-toast-datum":
        return UNCHANGED
    if first == "B" and token[1:2] == "'":  # bit string, B'101'
        return token[2:-1]
    return token  # number or boolean


def _value_pattern(type_oid: int, capture: bool) -> str:
    """Regex for one printed value of a type: its text in a group (unless ``capture`` is off)."""
    if type_oid in _UNQUOTED:
        inner = r"([^ ']+)"
    elif type_oid == _BOOL:
        inner = r"(true|false)"
    elif type_oid in _BITS:
        inner = r"B'([01]*)'"
    else:
        inner = _QUOTED
    if not capture:
        inner = inner.replace("(", "(?:", 1)
    return rf"(?:null|{inner})"


class _Table:
    """Per-table state of one decoder: filter verdict, catalog info and derived shapes."""

    __slots__ = ("schema", "table", "keep", "loaded", "info", "shape", "full", "key_names",
                 "generated", "printed", "fast", "quoted", "index", "shapes", "warned")

    def __init__(self, schema: str, table: str, keep: bool) -> None:
        self.schema = schema
        self.table = table
        self.keep = keep
        self.loaded = False
        self.info: TableInfo | None = None
        self.shape: RowShape | None = None  # the catalog's published columns
        self.full = False
        self.key_names: frozenset[str] = frozenset()
        self.generated: frozenset[str] = frozenset()
        self.printed: tuple[tuple[str, str], ...] = ()  # (name, type) as the catalog predicts
        self.fast: re.Pattern[str] | None = None  # whole new tuple as the catalog predicts
        self.quoted: tuple[int, ...] = ()  # shape positions of '-quoted values
        self.index: dict[str, int] = {}
        self.shapes: dict[tuple[tuple[str, str], ...], RowShape] = {}
        self.warned = False  # the key-unknown warning was given

    def load(self, info: TableInfo | None) -> None:
        self.loaded = True
        self.info = info
        if info is None:
            return
        published = [c for c in info.columns if not c.generated]
        self.full = info.replica_identity == "f"
        self.key_names = frozenset(c.name for c in published if c.key)
        self.generated = frozenset(c.name for c in info.columns if c.generated)
        self.printed = tuple((c.name, c.type_name) for c in info.columns)
        self.shape = RowShape(
            self.schema, self.table, [c.name for c in published],
            [converter_for_oid(c.type_oid) for c in published],
            [i for i, c in enumerate(published) if c.key], True,
        )
        self.index = {name: i for i, name in enumerate(self.shape.names)}
        self.fast = re.compile("".join(
            re.escape(f" {c.quoted_name}[{c.type_name}]:")
            + _value_pattern(c.type_oid, capture=not c.generated)
            for c in info.columns
        ) + r"\Z")
        self.quoted = tuple(
            i for i, c in enumerate(published)
            if c.type_oid not in _UNQUOTED and c.type_oid != _BOOL and c.type_oid not in _BITS
        )

    def logged_as_catalog(self, shape: RowShape, columns: Columns) -> bool:
        """Whether an old tuple Postgres printed is what the catalog's identity predicts: all of
        ``shape``'s columns under ``FULL`` (NULL ones are left out), exactly its key columns
        otherwise. If not, the identity changed since the change was written."""
        names = {name for name, _, _ in columns if name not in self.generated}
        if self.full:
            return names <= set(shape.names)
        return names == set(shape.key_names)

    def shape_of_old(self, columns: Columns) -> tuple[RowShape, list[RawValue]]:
        """Shape and values of an old tuple whose columns the catalog does not predict (the
        table's identity changed, or the table is gone): the printed columns, all of them the
        key, since that is the identity Postgres logged."""
        columns = [c for c in columns if c[0] not in self.generated]
        shape = RowShape(self.schema, self.table, [name for name, _, _ in columns],
                         [converter_for_type_name(t) for _, t, _ in columns],
                         range(len(columns)), True)
        return shape, [value for _, _, value in columns]

    def shape_with_key(self, shape: RowShape, key_names: list[str]) -> RowShape:
        """``shape`` with ``key_names`` as its key: the identity as logged, not as the catalog
        says now."""
        return RowShape(self.schema, self.table, shape.names, shape.converters,
                        [i for i, n in enumerate(shape.names) if n in key_names], True)

    def shape_for(self, printed: tuple[tuple[str, str], ...]) -> RowShape:
        """The shape of a tuple printed with these ``(name, type)`` columns."""
        if printed == self.printed and self.shape is not None:
            return self.shape
        shape = self.shapes.get(printed)
        if shape is None:
            columns = [(n, t) for n, t in printed if n not in self.generated]
            shape = RowShape(
                self.schema, self.table, [n for n, _ in columns],
                [converter_for_type_name(t) for _, t in columns],
                [i for i, (n, _) in enumerate(columns) if n in self.key_names], True,
            )
            self.shapes[printed] = shape
        return shape


class TextFormatDecoder:
    """Decoder for one test_decoding peek session.

    ``catalog(schema, table)`` is called at most once per kept table per decoder, lazily at its
    first change; ``table_filter(schema, table)`` once per table. Changes of filtered tables
    advance ``seq`` without their tuples being parsed or the catalog being asked.
    ``messages(prefix)`` picks the logical messages to deliver; with it every transactional
    message counts in ``seq``, as with pgoutput; without it they are skipped and not counted.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        catalog: CatalogLookup,
        table_filter: TableFilter | None = None,
        *,
        keep_values: bool = False,
        messages: MessageFilter | None = None,
    ) -> None:
        self._catalog = catalog
        self._filter = table_filter
        self._keep_values = keep_values
        self._messages = messages
        self._tables: dict[tuple[str, str], _Table] = {}
        # "table s.t: INSERT:" / "...: UPDATE:" of kept tables with a catalog: the hot path's
        # lookup, filled as the general path meets them
        self._headers: dict[str, tuple[_Table, str]] = {}

    def events(self, rows: Iterable[PeekRow]) -> Iterator[Event]:
        xid = -1  # xid of the open transaction; -1 outside one
        seq = 0
        headers = self._headers
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
                    known = headers.get(line[:end])
                    if known is not None and not line.startswith(" old-key:", end):
                        change = _inline(known[0], known[1], line, end, lsn, seq, keep_values)
                        if change is not None:
                            yield change
                            seq += 1
                            continue
                    header = _HEADER.match(line)
                    if header is not None:
                        change = self._change(header, line, lsn, seq)
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
                elif first == "m" and line.startswith(("message: ", _HEX)):
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
        match = _COMMIT.match(line)
        if match is None:
            raise ValueError("COMMIT without xid and timestamp (include-xids and "
                             "include-timestamp must be on)")
        if int(match[1]) != xid:
            raise ValueError(f"COMMIT of xid {match[1]} while transaction {xid} is open")
        commit_ts = datetime.fromisoformat(match[2]).astimezone(UTC)
        return Commit(xid, lsn, commit_ts)

    def _table(self, schema_ident: str, table_ident: str) -> _Table:
        key = (schema_ident, table_ident)
        table = self._tables.get(key)
        if table is None:
            schema, name = _unquote_ident(schema_ident), _unquote_ident(table_ident)
            keep = self._filter is None or self._filter(schema, name)
            table = self._tables[key] = _Table(schema, name, keep)
        return table

    def _change(self, header: re.Match[str], line: str, lsn: int, seq: int) -> Change | None:
        """Decode an INSERT, UPDATE or DELETE line; ``None`` if its table is filtered out."""
        table = self._table(header[1], header[2])
        if not table.keep:
            return None
        if not table.loaded:
            table.load(self._catalog(table.schema, table.table))
        op = _OPS[header[3]]
        pos = header.end()
        if op != DELETE and table.fast is not None:
            self._headers[line[:pos]] = (table, op)
        if line.endswith(_NO_TUPLE) and pos + len(_NO_TUPLE) == len(line):
            return empty_change(lsn, seq, table.schema, table.table, op)
        if op == DELETE:
            printed, pos = _columns(line, pos)
            if pos != len(line):
                raise ValueError(f"cannot parse the old tuple at offset {pos}")
            old = None
            if table.shape is not None and table.logged_as_catalog(table.shape, printed):
                old = _align(table, table.shape, printed)
            if old is not None and table.shape is not None:
                return build_change(table.shape, lsn, seq, DELETE, old, None,
                                    old_is_full=table.full, new_has_unchanged=False,
                                    keep_values=self._keep_values)
            shape, old = table.shape_of_old(printed)
            return build_change(shape, lsn, seq, DELETE, old, None, old_is_full=False,
                                new_has_unchanged=False, keep_values=self._keep_values)
        columns: Columns | None = None
        if op == UPDATE and line.startswith(" old-key:", pos):
            columns, pos = _columns(line, pos + 9)
            if not line.startswith(" new-tuple:", pos):
                raise ValueError(f"cannot parse the old tuple at offset {pos}")
            pos += 11
        shape, new, unchanged = _new_tuple(table, line, pos)
        old = None
        old_is_full = table.full
        if columns is not None:
            old = _align(table, shape, columns)
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

    def _warn_key_unknown(self, table: _Table, lsn: int) -> None:
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
        match = _TRUNCATE.match(line)
        if match is None:
            raise ValueError("unrecognized table line")
        for offset, name in enumerate(_QUALIFIED.finditer(match[1])):
            table = self._table(name[1], name[2])
            yield (empty_change(lsn, seq + offset, table.schema, table.table, TRUNCATE)
                   if table.keep else None)


_OPS = {"INSERT": INSERT, "UPDATE": UPDATE, "DELETE": DELETE}


def message_line(line: str) -> tuple[bool, str, bytes]:
    """A message line's (transactional?, prefix, content), from the line as test_decoding prints
    it or as the reader fetches it (``message-hex: `` and the hex of its bytes, which carries
    content that is not text).

    The prefix and content are printed raw, so either may hold the ``, sz: N content:`` that
    separates them: the separator is the first one whose ``N`` is the byte length of the rest
    of the line (the content is its last ``N`` bytes).
    """
    raw = bytes.fromhex(line[len(_HEX):]) if line.startswith(_HEX) else line.encode()
    head = _MESSAGE.match(raw)
    if head is None:
        raise ValueError("unrecognized message line")
    for size in _MESSAGE_SIZE.finditer(raw, head.end()):
        if len(raw) - size.end() == int(size[1]):
            return head[1] == b"1", raw[head.end():size.start()].decode(), raw[size.end():]
    raise ValueError("message content does not match its printed size")


_new = tuple.__new__  # builds a Change without NamedTuple.__new__'s Python frame


def _inline(
    table: _Table, op: str, line: str, pos: int, lsn: int, seq: int, keep_values: bool
) -> Change | None:
    """The change of an insert or key-keeping update whose new tuple (from ``pos``) matches
    the catalog's regex: what :meth:`TextFormatDecoder._change` builds for it, or ``None``
    for anything else (an unchanged TOAST value, a changed table, a value its converter
    rejects), which the general path then decodes or names as an error."""
    shape = table.shape
    raw = _catalog_tuple(table, line, pos)
    if raw is None or shape is None:
        return None
    try:
        values = [None if r is None else c(r) for c, r in zip(shape.converters, raw, strict=True)]
    except (ValueError, KeyError, TypeError):
        return None
    after = dict(zip(shape.names, values, strict=True))
    key = _dumps({n: after[n] for n in shape.key_names}).decode() if shape.key else None
    return _new(Change, (lsn, seq, shape.schema, shape.table, op, key, None,
                         _dumps(after).decode(), (), after if keep_values else None, None))


def _columns(line: str, pos: int) -> tuple[Columns, int]:
    """Parse printed columns from ``pos`` while they last: ``[(name, type, raw)]``, end."""
    columns = []
    match = _COLUMN.match(line, pos)
    while match is not None:
        columns.append((_unquote_ident(match[1]), match[2], _raw(match[3])))
        pos = match.end()
        match = _COLUMN.match(line, pos)
    return columns, pos


def _catalog_tuple(table: _Table, line: str, pos: int) -> list[Any] | None:
    """The value texts (``None`` for null) of a new tuple from ``pos`` to the end, aligned with
    the catalog's shape, if the catalog's regex matches it whole; else ``None``."""
    if table.fast is None or "unchanged-toast-datum" in line:
        return None  # the catalog regex does not accept that marker
    match = table.fast.match(line, pos)
    if match is None:
        return None
    raw: list[Any] = list(match.groups())
    if "''" in line:  # some quoted value has an escaped quote
        for i in table.quoted:
            value = raw[i]
            if value is not None:
                raw[i] = value.replace("''", "'")
    return raw


def _new_tuple(table: _Table, line: str, pos: int) -> tuple[RowShape, list[RawValue], bool]:
    """The new tuple from ``pos`` to the end: (its shape, raw values, any UNCHANGED).

    Fast path: one regex built from the catalog matches the whole tuple and captures the value
    texts directly. It is skipped when a TOAST value is unchanged (the catalog regex does not
    accept that marker), and fails when the table changed since the row was written; then the
    columns are parsed one by one.
    """
    raw = _catalog_tuple(table, line, pos)
    if raw is not None:
        assert table.shape is not None
        return table.shape, raw, False
    columns, end = _columns(line, pos)
    if end != len(line):
        raise ValueError(f"cannot parse the new tuple at offset {end}")
    shape = table.shape_for(tuple((name, type_name) for name, type_name, _ in columns))
    values = [value for name, _, value in columns if name not in table.generated]
    return shape, values, any(value is UNCHANGED for value in values)


def _align(table: _Table, shape: RowShape, columns: Columns) -> list[RawValue] | None:
    """An old tuple (NULL columns left out) as values aligned with ``shape``, absent ones NULL;
    ``None`` if it names a column ``shape`` does not have."""
    index = table.index if shape is table.shape else {n: i for i, n in enumerate(shape.names)}
    old: list[RawValue] = [None] * len(shape.names)
    for name, _, value in columns:
        i = index.get(name)
        if i is None:
            if name in table.generated:
                continue
            return None
        old[i] = value
    return old
