"""Decode pgoutput's logical replication protocol (version 1, text values) into events.

The reader peeks with ``pg_logical_slot_peek_binary_changes(slot, upto, NULL, VARIADIC
options)`` and :func:`pgoutput_options`; each row's ``data`` is one protocol message:

=====  ==================================================================================
``B``  Begin: final LSN, commit timestamp, xid
``C``  Commit: flags, commit LSN, end LSN, commit timestamp
``R``  Relation: id, namespace, name, replica identity, then per column flags/name/type
``I``  Insert: relation id, ``N`` + tuple
``U``  Update: relation id, optional ``K`` (old key) or ``O`` (old row) + tuple, ``N`` + tuple
``D``  Delete: relation id, ``K`` or ``O`` + tuple
``T``  Truncate: relation count, flags, relation ids
``M``  Logical message (with ``messages 'true'``): flags (1 = transactional), LSN, prefix,
       content length, content
``Y``  Type, ``O`` Origin: skipped
=====  ==================================================================================

A tuple is a count then, per column, ``n`` (NULL), ``u`` (unchanged TOAST value, not sent) or
``t`` + length + text. Integers are big-endian. pgoutput sends a Relation message before the
first change of each relation in a decoding session (and again after it changes), so a decoder
built fresh for each peek always sees every relation it needs.

Only tables in the publications are sent. For ``seq`` to agree with test_decoding's, the
publications must cover every table that changes in the transaction.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import orjson

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
    GeneratedColumns,
    MessageFilter,
    PeekRow,
    RawValue,
    Retyping,
    RowShape,
    TableFilter,
    build_change,
    decode_error,
    empty_change,
    message_event,
)
from postgres_cdc_source.decoding.schema_changes import ColumnTracker
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.rows.json.values import Converter, converter_for_oid

__all__ = ["DECODE_FAILURES", "PGOUTPUT_OPTIONS", "FastShape", "PgOutputDecoder",
           "decode_failure", "payload_bytes", "pgoutput_options", "read_message"]

PGOUTPUT_OPTIONS: dict[str, str] = {"proto_version": "1"}
"""Options for every pgoutput peek, besides ``publication_names`` (see :func:`pgoutput_options`).

Protocol version 1 without ``binary``, ``streaming`` or ``two_phase``: values come as text, and
only the messages this decoder understands are sent. ``messages`` is added when logical messages
are delivered (:func:`pgoutput_options`).
"""

_PLUGIN = "pgoutput"
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)

_u16 = struct.Struct(">H").unpack_from
_u32 = struct.Struct(">I").unpack_from
_message = struct.Struct(">BQ").unpack_from  # flags, LSN of the message
_begin = struct.Struct(">QqI").unpack_from  # final_lsn, commit timestamp, xid
_commit = struct.Struct(">BQQq").unpack_from  # flags, commit_lsn, end_lsn, commit timestamp
_column = struct.Struct(">Ii").unpack_from  # type OID, type modifier
_dumps = orjson.dumps


def pgoutput_options(publications: Iterable[str], *, messages: bool = False) -> dict[str, str]:
    """The full peek options for ``publications``, quoting each name as Postgres expects, and
    with ``messages`` pgoutput's option that sends logical messages.

    ``publication_names`` is parsed like a list of SQL identifiers, so a name with upper-case
    letters, commas or quotes must be double-quoted or pgoutput looks up a different name.
    """
    names = ",".join('"' + name.replace('"', '""') + '"' for name in publications)
    if not names:
        raise ValueError("pgoutput needs at least one publication name")
    options = {**PGOUTPUT_OPTIONS, "publication_names": names}
    if messages:
        options["messages"] = "true"
    return options


def _timestamp(micros: int) -> datetime:
    """A protocol timestamp (microseconds since 2000-01-01 UTC) as an aware datetime."""
    return _PG_EPOCH + timedelta(microseconds=micros)


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(0, pos)
    return data[pos:end].decode(), end + 1


def _read_tuple(data: bytes, pos: int) -> tuple[list[RawValue], int, bool]:
    """Parse TupleData at ``pos``: (column texts, position after it, any 'u' column seen).

    A truncated message shows up as a final position beyond ``len(data)``, which the caller
    checks once instead of every column checking its length.
    """
    count = (data[pos] << 8) | data[pos + 1]
    pos += 2
    values: list[RawValue] = [None] * count  # NULL unless a 't' or 'u' says otherwise
    unchanged = False
    for i in range(count):
        kind = data[pos]
        if kind == 116:  # 't': text value
            start = pos + 5
            pos = start + _u32(data, pos + 1)[0]
            values[i] = data[start:pos].decode()
        elif kind == 110:  # 'n': NULL
            pos += 1
        elif kind == 117:  # 'u': unchanged TOAST value, not sent
            values[i] = UNCHANGED
            unchanged = True
            pos += 1
        else:
            raise ValueError(
                f"unexpected column kind {chr(kind)!r} (binary values are not supported: "
                "do not pass the 'binary' option)"
            )
    return values, pos, unchanged


def _new_row(columns: tuple[tuple[str, Converter], ...], data: bytes) -> dict[str, Any] | None:
    """The fast path for the commonest message, a lone new tuple (``N`` at byte 5): parse and
    convert it straight into the ``after`` object, in one pass.

    ``None`` when anything is unusual (an unchanged TOAST column, a width or length mismatch),
    and exceptions propagate: the caller then takes the general path, :func:`_read_tuple` +
    :func:`build_change`, which gives the same row or the precise error.
    """
    if (data[6] << 8) | data[7] != len(columns):
        return None
    row: dict[str, Any] = {}
    pos = 8
    for name, convert in columns:
        kind = data[pos]
        if kind == 116:  # 't'
            start = pos + 5
            pos = start + _u32(data, pos + 1)[0]
            row[name] = convert(data[start:pos].decode())
        elif kind == 110:  # 'n'
            row[name] = None
            pos += 1
        else:  # 'u' (unchanged TOAST value) or garbage
            return None
    return row if pos == len(data) else None


class FastShape(NamedTuple):
    """What :meth:`PgOutputDecoder.events`' hot path needs of a kept relation, in one lookup."""

    schema: str
    table: str
    columns: tuple[tuple[str, Converter], ...]
    key_names: tuple[str, ...]
    key_one: str | None
    """The key column's name when the key is exactly one column (the usual primary key)."""
    typed: bool
    """``row_format=struct``: the images stay dicts of the struct's values (no JSON text)."""

    @classmethod
    def of(cls, shape: RowShape, typed: bool) -> FastShape:
        return cls(shape.schema, shape.table, tuple(zip(shape.names, shape.converters,
                                                        strict=True)),
                   shape.key_names, shape.key_names[0] if len(shape.key_names) == 1 else None,
                   typed)


_new = tuple.__new__  # builds a Change without NamedTuple.__new__'s Python frame


class PgOutputDecoder:
    """Decoder for one pgoutput peek session; see the module docstring for the protocol.

    ``table_filter(schema, table)`` is asked once per relation; a change of a table it rejects
    still advances ``seq``, but only its relation id is read (one set lookup per change).
    ``messages(prefix)`` picks the logical messages to deliver (peek with ``messages
    'true'``); every transactional message counts in ``seq``. Without it, messages are
    skipped and not counted (as when pgoutput does not send them). ``typed``
    (``row_format=struct``) types the kept tables' rows
    (:meth:`~postgres_cdc_source.rows.RowFormat.retyped`): the hot path then keeps
    their images as dicts of the struct's values. ``columns`` (``include_schema_changes``) is handed
    each kept table's Relation message inside a transaction; a ``ddl`` change it makes comes
    right there, before the change the message announces, and counts in ``seq``.
    ``generated(schema, table)``, asked once per kept relation, names the stored generated
    columns to leave out: Postgres 18 sends them from a publication with
    ``publish_generated_columns = stored``, which the managed pair has so that the owner's
    writes never fail on a table whose identity holds one; the rows stay as on earlier
    versions, where they are never sent.
    """

    def __init__(
        self, table_filter: TableFilter | None = None, *, keep_values: bool = False,
        messages: MessageFilter | None = None, typed: Retyping | None = None,
        columns: ColumnTracker | None = None, generated: GeneratedColumns | None = None,
    ) -> None:
        self._filter = table_filter
        self._generated = generated
        self._dropped: dict[int, list[int]] = {}  # kept relations' sent columns to keep
        self._typed = typed
        self._columns = columns
        self._keep_values = keep_values
        self._messages = messages
        self._relations: dict[int, RowShape] = {}
        self._fast: dict[int, FastShape] = {}  # kept relations only
        self._skipped: set[int] = set()  # relations the filter rejects

    # the hot path inline (a call per change would cost in this loop); the rest in step()
    def events(self, rows: Iterable[PeekRow]) -> Iterator[Event]:
        xid = -1  # xid of the open transaction; -1 outside one
        seq = 0
        fast = self._fast
        skipped = self._skipped
        keep_values = self._keep_values
        out: list[Event] = []  # what step() read from one message
        for lsn, row_xid, payload in rows:
            data = payload if type(payload) is bytes else payload_bytes(lsn, payload)
            try:
                kind = data[0]
                # A change of a table the filter rejects: counted, nothing else read (a busy
                # uncaptured table's rows still arrive with test_decoding or <pub>_all).
                if (kind == 73 or kind == 85 or kind == 68) and xid >= 0 and (
                        _u32(data, 1)[0] in skipped):
                    seq += 1
                    continue
                # The hot path, inline: an insert, or an update that did not change the key
                # ('N' alone at byte 5), of a kept table, every column sent. Anything else, or
                # a row _new_row cannot take, goes the general way (which also names errors).
                if (kind == 73 or kind == 85) and xid >= 0 and data[5] == 78:
                    shape = fast.get(_u32(data, 1)[0])
                    if shape is not None:
                        try:
                            row = _new_row(shape.columns, data)
                        except (ValueError, IndexError, KeyError, TypeError, struct.error):
                            row = None
                        if row is not None:
                            one = shape.key_one
                            if one is not None:
                                key_image: dict[str, Any] | None = {one: row[one]}
                            elif shape.key_names:
                                key_image = {n: row[n] for n in shape.key_names}
                            else:
                                key_image = None
                            key: Any
                            after: Any
                            if shape.typed:
                                key, after = key_image, row
                            else:
                                key = None if key_image is None else _dumps(key_image).decode()
                                after = _dumps(row).decode()
                            yield _new(Change, (lsn, seq, shape.schema, shape.table,
                                                INSERT if kind == 73 else UPDATE, key, None,
                                                after, (), row if keep_values else None, None))
                            seq += 1
                            continue
                xid, seq = self.step(kind, lsn, row_xid, data, xid, seq, out)
                if out:
                    yield from out
                    out.clear()
            except DecodeError:
                raise
            except DECODE_FAILURES as exc:
                raise decode_failure(lsn, exc, data) from exc

    def fast(self, relid: int) -> FastShape | None:
        """The hot path's view of kept relation ``relid`` (``None``: not kept, or its changes
        go the general way)."""
        return self._fast.get(relid)

    def skips(self, relid: int) -> bool:
        """Whether the filter rejected relation ``relid``: its changes are only counted."""
        return relid in self._skipped

    def step(self, kind: int, lsn: int, row_xid: int, data: bytes, xid: int, seq: int,
             out: list[Event]) -> tuple[int, int]:
        """Read one message the hot path in :meth:`events` did not take, appending its events
        to ``out``: the open transaction's xid (-1: none) and next ``seq`` after it.

        Shared with :mod:`postgres_cdc_source.decoding.compiled`, whose core takes the hot path;
        raises what :meth:`events` turns into a :class:`DecodeError` naming the LSN.
        """
        if kind in _CHANGE_KINDS:
            if xid < 0:
                raise ValueError(f"{chr(kind)!r} message outside a transaction")
            out.append(self._change(kind, lsn, seq, data))
            seq += 1
        elif kind == 84:  # 'T'
            if xid < 0:
                raise ValueError("'T' message outside a transaction")
            for change in self._truncate(lsn, seq, data):
                if change is not None:
                    out.append(change)
                seq += 1
        elif kind == 66:  # 'B'
            _final_lsn, _ts, xid = _begin(data, 1)
            seq = 0
            out.append(Begin(xid, lsn))
        elif kind == 67:  # 'C'
            _flags, _commit_lsn, end_lsn, micros = _commit(data, 1)
            if xid < 0:
                raise ValueError("'C' message outside a transaction")
            out.append(Commit(xid, end_lsn, _timestamp(micros)))
            xid = -1
        elif kind == 82:  # 'R'
            ddl = self._relation(data, lsn, seq if xid >= 0 else None)
            if ddl is not None:
                out.append(ddl)
                seq += 1
        elif kind == 77 and self._messages is not None:  # 'M'
            event, seq = message_event(self._messages, lsn, xid, row_xid, seq,
                                       read_message(data), keep_values=self._keep_values)
            if event is not None:
                out.append(event)
        elif kind not in _SKIPPED_KINDS:
            raise ValueError(f"unsupported message type {chr(kind)!r} (use "
                             f"proto_version 1 without streaming or two_phase)")
        return xid, seq

    def _relation(self, data: bytes, lsn: int, seq: int | None) -> Change | None:
        """Take a Relation message; the ``ddl`` change it makes at ``seq`` (``None``: outside a
        transaction) when the tracker of ``columns`` finds the table's columns changed."""
        (relid,) = _u32(data, 1)
        schema, pos = _cstring(data, 5)
        table, pos = _cstring(data, pos)
        (natts,) = _u16(data, pos + 1)
        pos += 3
        names: list[str] = []
        types: list[int] = []
        typmods: list[int] = []
        key: list[int] = []
        for index in range(natts):
            flags = data[pos]
            name, pos = _cstring(data, pos + 1)
            type_oid, typmod = _column(data, pos)
            pos += 8
            names.append(name)
            types.append(type_oid)
            typmods.append(typmod)
            if flags & 1:
                key.append(index)
        if pos != len(data):
            raise ValueError(f"Relation message has {len(data) - pos} unexpected trailing bytes")
        schema = schema or "pg_catalog"  # pgoutput sends '' for pg_catalog
        keep = self._filter is None or self._filter(schema, table)
        left_out = (self._generated(schema, table) if keep and self._generated is not None
                    else frozenset()) & set(names)
        if left_out:
            sent = [i for i, n in enumerate(names) if n not in left_out]
            key = [sent.index(i) for i in key if i in sent]
            names = [names[i] for i in sent]
            types = [types[i] for i in sent]
            typmods = [typmods[i] for i in sent]
            self._dropped[relid] = sent
        else:
            self._dropped.pop(relid, None)
        shape = RowShape(schema, table, names, [converter_for_oid(t) for t in types], key, keep)
        if keep and self._typed is not None:
            shape = self._typed.retyped(shape, types=types)
        self._relations[relid] = shape
        if keep:
            if shape.changed is None and not left_out:
                self._fast[relid] = FastShape.of(shape, self._typed is not None)
            else:  # the general way raises its error at the table's first change
                self._fast.pop(relid, None)
            self._skipped.discard(relid)
        else:
            self._fast.pop(relid, None)
            self._skipped.add(relid)
        if not keep or self._columns is None:
            return None
        keys = set(key)
        columns = tuple((n, t, m, i in keys)
                        for i, (n, t, m) in enumerate(zip(names, types, typmods, strict=True)))
        old = self._columns.seen(schema, table, columns)
        if old is None or seq is None:
            return None
        return self._columns.change(lsn, seq, schema, table, old, columns)

    def _shape(self, relid: int) -> RowShape:
        try:
            return self._relations[relid]
        except KeyError:
            raise ValueError(f"no Relation message was sent for relation {relid}") from None

    def _change(self, kind: int, lsn: int, seq: int, data: bytes) -> Change:
        """Decode an I, U or D message of a kept table the hot path in :meth:`events` did not
        take."""
        (relid,) = _u32(data, 1)
        shape = self._shape(relid)
        marker = data[5]
        old: list[RawValue] | None = None
        old_is_full = False
        pos = 6
        if marker in (75, 79):  # 'K' old key, 'O' old row
            old, pos, _ = _read_tuple(data, pos)
            old_is_full = marker == 79
            old = self._kept(relid, old)
            self._check_width(shape, old)
            if kind == 85:  # update: the new tuple follows
                marker = data[pos]
                pos += 1
        new: list[RawValue] | None = None
        has_unchanged = False
        if kind != 68:  # insert or update
            if marker != 78:  # 'N'
                raise ValueError(f"expected 'N' (new tuple) but found {chr(marker)!r}")
            new, pos, has_unchanged = _read_tuple(data, pos)
            new = self._kept(relid, new)
            self._check_width(shape, new)
        elif old is None:
            raise ValueError(f"expected 'K' or 'O' (old tuple) but found {chr(marker)!r}")
        if pos != len(data):
            raise ValueError(f"message length {len(data)} does not match its content ({pos})")
        op = INSERT if kind == 73 else UPDATE if kind == 85 else DELETE
        return build_change(shape, lsn, seq, op, old, new, old_is_full=old_is_full,
                            new_has_unchanged=has_unchanged, keep_values=self._keep_values)

    def _kept(self, relid: int, values: list[RawValue]) -> list[RawValue]:
        """``values`` without the generated columns left out of the relation's shape."""
        sent = self._dropped.get(relid)
        return values if sent is None else [values[i] for i in sent]

    @staticmethod
    def _check_width(shape: RowShape, values: list[RawValue]) -> None:
        if len(values) != len(shape.names):
            raise ValueError(f"tuple has {len(values)} columns but relation "
                             f"{shape.schema}.{shape.table} has {len(shape.names)}")

    def _truncate(self, lsn: int, seq: int, data: bytes) -> Iterator[Change | None]:
        """One change per truncated relation (``None`` for filtered ones, which count too)."""
        (count,) = _u32(data, 1)
        if len(data) != 6 + 4 * count:
            raise ValueError(f"Truncate message for {count} relations has {len(data)} bytes")
        shapes = [self._shape(_u32(data, 6 + 4 * i)[0]) for i in range(count)]
        for offset, shape in enumerate(shapes):
            yield (empty_change(lsn, seq + offset, shape.schema, shape.table, TRUNCATE)
                   if shape.keep else None)


def read_message(data: bytes) -> tuple[bool, str, bytes]:
    """A logical message's (transactional?, prefix, content)."""
    flags, _lsn = _message(data, 1)
    prefix, pos = _cstring(data, 10)
    (length,) = _u32(data, pos)
    if pos + 4 + length != len(data):
        raise ValueError(f"content of {length} bytes does not match the message's length")
    return bool(flags & 1), prefix, data[pos + 4:]


_CHANGE_KINDS = frozenset(b"IUD")
_SKIPPED_KINDS = frozenset(b"YOM")


DECODE_FAILURES = (ValueError, IndexError, KeyError, struct.error)
"""What reading a malformed message raises; :func:`decode_failure` names it."""


def payload_bytes(lsn: int, payload: bytes | bytearray | memoryview | str) -> bytes:
    """A peek row's ``data`` as bytes; a text one is refused (pgoutput is peeked binary)."""
    if isinstance(payload, str):
        raise decode_error(_PLUGIN, lsn, "got text, expected bytes: peek pgoutput with "
                           "pg_logical_slot_peek_binary_changes")
    return bytes(payload)


def decode_failure(lsn: int, exc: Exception, data: bytes) -> DecodeError:
    """The :class:`DecodeError` for message ``data`` at ``lsn``, which raised ``exc``."""
    return decode_error(_PLUGIN, lsn, _describe(exc, data))


def _describe(exc: Exception, data: bytes) -> str:
    kind = chr(data[0]) if data else "?"
    if isinstance(exc, (IndexError, struct.error)):
        return f"truncated {kind!r} message ({len(data)} bytes)"
    if isinstance(exc, UnicodeDecodeError):
        return f"{kind!r} message has text that is not UTF-8 ({exc.reason})"
    return f"bad {kind!r} message: {exc}"
