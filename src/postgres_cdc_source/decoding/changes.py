"""What the output-plugin decoders produce, and the row building both of them share.

A decoder turns the rows of one ``pg_logical_slot_peek_*changes`` call into a flat stream of
:class:`Begin`, :class:`Change` and :class:`Commit` events, in the order Postgres emitted them:
whole transactions in commit order, never interleaved, and between them the
:class:`LoneMessage` events of logical messages written outside any transaction. Decoders are
pure (no I/O) and stateful for one peek session only (pgoutput's relation cache), so the reader
builds a fresh one per read.

The two decoders differ only in parsing; from parsed column text onward they share
:class:`RowShape` and :func:`build_change`, which is what makes them produce identical rows for
the same changes: same converters (:mod:`postgres_cdc_source.rows.json.values`), same
key/before/after rules, same JSON serialization.

Row rules (the output contract):

* ``after``: the new row, for insert and update. A column whose unchanged TOAST value Postgres
  did not send is left out of ``after`` and named in ``unchanged``; it is never a silent null.
* ``before``: the whole old row, only when Postgres logs it (``REPLICA IDENTITY FULL``).
* ``key``: the replica-identity columns: of the new row for an insert; of an update or delete
  from the old key/row when Postgres sent one (the key changed, or FULL), else from the new row;
  ``None`` when the table has no identity (``NOTHING``, or ``DEFAULT`` without a primary key)
  and for truncate. Routing by ``key`` therefore sends every change of a row the same way.
  Under FULL every column is part of the identity, as pgoutput's relation message says, so
  ``key`` equals ``before`` there.
* JSON objects keep the table's column order.

Logical messages (``pg_logical_emit_message``, the transactional outbox) are changes too, with
op :data:`MESSAGE` (see :func:`message_change`): a transactional one sits in its transaction at
its place among the row changes and counts in ``seq``; one written outside a transaction is a
:class:`LoneMessage`, delivered when Postgres decodes it (after every transaction that
committed before it was written), with no ``seq``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple, Protocol

import orjson

from connector_common.lsn import format_lsn
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.rows.json.values import Converter
from postgres_cdc_source.rows.shape import Retyping, RowShape, json_text

__all__ = [
    "DELETE",
    "INSERT",
    "MESSAGE",
    "TRUNCATE",
    "UNCHANGED",
    "UPDATE",
    "Begin",
    "Change",
    "Commit",
    "Decoder",
    "Event",
    "GeneratedColumns",
    "LoneMessage",
    "MessageFilter",
    "PeekRow",
    "RawValue",
    "Retyping",
    "RowShape",
    "TableFilter",
    "build_change",
    "conversion_error",
    "decode_error",
    "empty_change",
    "json_text",
    "message_change",
    "message_event",
    "message_prefix",
    "route_values",
    "row_json",
]

INSERT: Final = "insert"
UPDATE: Final = "update"
DELETE: Final = "delete"
TRUNCATE: Final = "truncate"
MESSAGE: Final = "message"


class Begin(NamedTuple):
    """A transaction starts; ``lsn`` is the LSN of the row that announced it."""

    xid: int
    lsn: int


class Change(NamedTuple):
    """One changed row (or one truncated table); ``key``/``before``/``after`` are JSON text,
    or with ``row_format=struct`` dicts of the struct's values, decimals, dates and timestamps
    still their text until the batch is built (:attr:`RowShape.encode`).

    ``seq`` is the change's 0-based position in its transaction, counted before any table
    filtering, so ``(commit_lsn, seq)`` identifies a change whatever the filter; ``None`` for a
    message written outside a transaction. ``schema`` and ``table`` are ``None`` for a
    logical message (op :data:`MESSAGE`).
    """

    lsn: int
    seq: int | None
    schema: str | None
    table: str | None
    op: str
    key: Any
    before: Any
    after: Any
    unchanged: tuple[str, ...]
    values: dict[str, Any] | None = None
    """Decoded column values for routing by a column, kept only when the decoder is asked to
    (``keep_values``): per column, the new row's value, else the old row's (``REPLICA IDENTITY
    FULL``), else the key's. ``None`` otherwise, and for truncate."""
    new_row: dict[str, Any] | None = None
    """The new row's converted values in table order, :data:`UNCHANGED` for the columns in
    ``unchanged``; kept only for changes that have such columns, so that
    :mod:`postgres_cdc_source.stream.reselect` can complete them with the same JSON."""


class Commit(NamedTuple):
    """A transaction ends. ``end_lsn`` is the end of its commit record: where a reader that has
    consumed the transaction may advance the slot to.

    The reader also stands a :class:`LoneMessage` in a commit of its own: ``end_lsn`` its LSN,
    ``xid`` and ``commit_ts`` ``None`` when Postgres gives none."""

    xid: int | None
    end_lsn: int
    commit_ts: datetime | None


class LoneMessage(NamedTuple):
    """A logical message written outside a transaction (``transactional`` false): a unit of its
    own, delivered even if the transaction that wrote it (``xid``, ``None`` if none) aborts."""

    xid: int | None
    change: Change


Event = Begin | Change | Commit | LoneMessage
PeekRow = tuple[int, int, "bytes | str"]
"""``(lsn, xid, data)`` as the peek functions return them, with the LSN already an int."""
TableFilter = Callable[[str, str], bool]
GeneratedColumns = Callable[[str, str], frozenset[str]]
"""``(schema, table) -> names`` of the table's stored generated columns a decoder leaves out."""
"""``(schema, table) -> keep?``; called once per table per decoder, not per change."""
MessageFilter = Callable[[str], bool]
"""``prefix -> deliver?`` for logical messages; a decoder without one delivers none."""


class Decoder(Protocol):
    """Turns one peek session's rows into events. Build a fresh decoder for every peek."""

    def events(self, rows: Iterable[PeekRow]) -> Iterator[Event]:
        """Decode ``rows`` lazily; raises :class:`DecodeError` naming the LSN of a bad row."""
        ...


class _Unchanged:
    """Type of :data:`UNCHANGED`; a class of its own so it can never equal a column value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"

    def __reduce__(self) -> str:
        return "UNCHANGED"  # unpickled as the module's singleton: a spilled change keeps it


UNCHANGED: Final = _Unchanged()
"""Stands for a column whose unchanged TOAST value Postgres did not send."""

RawValue = str | None | _Unchanged
"""A column as parsed: its output text, ``None`` for SQL NULL, or :data:`UNCHANGED`."""


def decode_error(plugin: str, lsn: int, what: str) -> DecodeError:
    """The error for a row that cannot be decoded, naming the plugin and the row's LSN."""
    return DecodeError(f"{plugin} output at LSN {format_lsn(lsn)}: {what}", lsn)


_dumps = orjson.dumps


def _object(names: Iterable[str], values: Iterable[Any]) -> dict[str, Any]:
    """The columns as a dict in table order, leaving out those whose value is :data:`UNCHANGED`."""
    return {n: v for n, v in zip(names, values, strict=True) if v is not UNCHANGED}


def _convert(converters: Sequence[Converter], raw: Sequence[Any]) -> list[Any]:
    """Convert every column, keeping ``None`` and :data:`UNCHANGED` as they are."""
    return [
        r if r is None or r is UNCHANGED else conv(r)
        for conv, r in zip(converters, raw, strict=True)
    ]


def _key(shape: RowShape, values: Sequence[Any]) -> dict[str, Any] | None:
    """The key object picked from converted ``values`` (``None`` if the table has no key)."""
    indexes = shape.key
    if not indexes:
        return None
    return _object(shape.key_names, [values[i] for i in indexes])


def route_values(
    key: dict[str, Any] | None, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Per column, the value of ``after``, else ``before``, else ``key`` (see Change.values)."""
    present = [d for d in (key, before, after) if d]
    if len(present) <= 1:
        return present[0] if present else None
    merged: dict[str, Any] = {}
    for d in present:
        merged.update(d)
    return merged


def build_change(
    shape: RowShape,
    lsn: int,
    seq: int,
    op: str,
    old: Sequence[RawValue] | None,
    new: Sequence[RawValue] | None,
    *,
    old_is_full: bool,
    new_has_unchanged: bool,
    keep_values: bool = False,
) -> Change:
    """Build a change from parsed column text; ``old``/``new`` are aligned with ``shape``.

    ``old`` is the old tuple Postgres sent (``None`` if none): the whole old row when
    ``old_is_full``, else only the key columns (other positions ``None``). ``new_has_unchanged``
    says whether ``new`` holds :data:`UNCHANGED`, so the common case skips looking for it.
    ``keep_values`` fills :attr:`Change.values` for routing by a column.
    Raises :class:`DecodeError` naming the column whose text its converter rejects.
    """
    if shape.changed is not None:
        raise shape.changed
    names = shape.names
    converters = shape.converters
    encode = shape.encode
    key = before = after = None
    unchanged: tuple[str, ...] = ()
    new_row = None
    try:
        if new is not None:
            if new_has_unchanged:
                new_values = _convert(converters, new)
                after = _object(names, new_values)
                unchanged = tuple(
                    n for n, v in zip(names, new_values, strict=True) if v is UNCHANGED
                )
                new_row = dict(zip(names, new_values, strict=True))
            else:
                texts: Sequence[Any] = new  # str or None: there is no UNCHANGED
                new_values = [
                    None if r is None else c(r) for c, r in zip(converters, texts, strict=True)
                ]
                after = dict(zip(names, new_values, strict=True))
            if op == INSERT:  # the key an insert creates, so routing by key sees every op
                new_key = _key(shape, new_values)
                return Change(lsn, seq, shape.schema, shape.table, op,
                              None if new_key is None else encode(new_key), None, encode(after),
                              unchanged, after if keep_values else None, new_row)
            if old is None:  # Postgres sent no old key: the key has not changed
                key = _key(shape, new_values)
        if old is not None:
            if old_is_full:
                old_values = _convert(converters, old)
                before = _object(names, old_values)
                key = before if len(shape.key) == len(names) else _key(shape, old_values)
            else:  # only the key columns are set
                key = _key(shape, _convert(converters, old))
    except (ValueError, KeyError, TypeError) as exc:
        raise _conversion_error(shape, lsn, (old, new), exc) from exc
    values = None
    if keep_values:  # a new row without unchanged columns holds every column: no merging
        values = after if after is not None and not unchanged else route_values(key, before, after)
    before_image = None if before is None else encode(before)
    key_image = (before_image if key is before  # FULL: the key is the old row
                 else None if key is None else encode(key))
    return Change(lsn, seq, shape.schema, shape.table, op, key_image, before_image,
                  None if after is None else encode(after), unchanged, values, new_row)


def row_json(
    shape: RowShape, rows: Iterable[Sequence[str | None]]
) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    """``(key, after, values)`` of whole rows given as output text: what :func:`build_change`
    gives for an insert of each with ``keep_values`` (same converters, same JSON; ``values``
    for routes by a column), without building a :class:`Change`.

    For readers of rows rather than changes (``mode=polling``), where this is the hot path.
    A value its converter rejects raises :func:`build_change`'s :class:`DecodeError`.
    """
    names = shape.names
    converters = shape.converters
    key_names = shape.key_names
    key = shape.key
    for raw in rows:
        try:
            values = [None if r is None else c(r) for c, r in zip(converters, raw, strict=True)]
        except (ValueError, KeyError, TypeError):
            build_change(shape, 0, 0, INSERT, None, raw, old_is_full=False,
                         new_has_unchanged=False)
            raise
        row = dict(zip(names, values, strict=True))
        yield (
            _dumps(dict(zip(key_names, [values[i] for i in key], strict=True))).decode()
            if key else None,
            _dumps(row).decode(),
            row,
        )


def empty_change(lsn: int, seq: int, schema: str, table: str, op: str) -> Change:
    """A change without key or row images: a truncated table, or a delete Postgres logged
    without an old tuple (REPLICA IDENTITY NOTHING)."""
    return Change(lsn, seq, schema, table, op, None, None, None, ())


def message_change(
    lsn: int, seq: int | None, prefix: str, content: bytes, *, keep_values: bool = False
) -> Change:
    """The change of a logical message: ``key`` is ``{"prefix": ...}`` (so routing by key keeps
    a prefix's messages in order on one partition) and ``after`` holds ``prefix``, ``content``
    (the text, ``null`` if it is not UTF-8) and ``content_base64`` (the bytes, always).
    ``values`` (``keep_values``) is ``after``, so ``topic_from=prefix`` routes by prefix."""
    try:
        text: str | None = content.decode()
    except UnicodeDecodeError:
        text = None
    after = {"prefix": prefix, "content": text,
             "content_base64": base64.b64encode(content).decode()}
    return Change(lsn, seq, None, None, MESSAGE, _dumps({"prefix": prefix}).decode(), None,
                  _dumps(after).decode(), (), after if keep_values else None)


def message_event(
    messages: MessageFilter, lsn: int, xid: int, row_xid: int, seq: int,
    parsed: tuple[bool, str, bytes], *, keep_values: bool,
) -> tuple[Change | LoneMessage | None, int]:
    """The event of a parsed ``(transactional?, prefix, content)`` logical message (``None`` if
    ``messages`` does not deliver its prefix) and the next ``seq``: a change at ``seq`` of the
    open transaction (``xid`` -1: none open, an error), which takes its ``seq`` whether it is
    delivered or not, or a :class:`LoneMessage` (``row_xid`` 0: written outside any
    transaction)."""
    transactional, prefix, content = parsed
    if not transactional:
        lone = LoneMessage(row_xid or None, message_change(
            lsn, None, prefix, content, keep_values=keep_values))
        return (lone if messages(prefix) else None), seq
    if xid < 0:
        raise ValueError("transactional message outside a transaction")
    change = message_change(lsn, seq, prefix, content, keep_values=keep_values)
    return (change if messages(prefix) else None), seq + 1


def message_prefix(change: Change) -> str:
    """The prefix of a :func:`message_change`, read back from its key."""
    assert change.op == MESSAGE and change.key is not None
    prefix: str = orjson.loads(change.key)["prefix"]
    return prefix


def _conversion_error(
    shape: RowShape,
    lsn: int,
    tuples: tuple[Sequence[RawValue] | None, ...],
    exc: Exception,
) -> DecodeError:
    """Find the column that failed (slow, error path only) and say which and why."""
    for raw in tuples:
        for name, conv, value in zip(shape.names, shape.converters, raw or (), strict=False):
            if not isinstance(value, str):
                continue
            try:
                conv(value)
            except (ValueError, KeyError, TypeError) as column_exc:
                return conversion_error(lsn, f"{shape.schema}.{shape.table}", name, value,
                                        column_exc)
    return DecodeError(
        f"change at LSN {format_lsn(lsn)} on {shape.schema}.{shape.table}: {exc!r}", lsn
    )


def conversion_error(lsn: int, table: str, column: str, text: str, exc: BaseException
                     ) -> DecodeError:
    """The error for the output text of ``column`` of ``table`` (``schema.table``) in the
    change at ``lsn`` that its converter rejected with ``exc``."""
    return DecodeError(f"change at LSN {format_lsn(lsn)}: column {column!r} of {table}: "
                       f"cannot convert {text[:80]!r}: {exc!r}", lsn)
