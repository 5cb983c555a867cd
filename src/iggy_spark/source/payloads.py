"""``payload_format``: JSON payloads parsed into rows of a given schema, in the executor.

Each column of the schema is the payload's top-level field of that name; a field the payload
lacks takes the message's own column of that name when there is one (``topic``, ``offset``,
...), else null. As in Spark's JSON reader, a string column receives a nested object or array
as its JSON text. ``pg_cdc`` is the change row of :mod:`connector_common.change_rows`: what an
``iggy_routed`` sink wrote from a ``pg_cdc`` query comes back as the row ``pg_cdc`` produced;
the sink sent ``id`` and ``partition_key`` as the message's id and partition, not in the
payload, so ``id`` is rebuilt (``<commit_lsn>:<seq>``) and ``partition_key`` stays null;
``position``, which the pipeline leaves out of the payload, is rebuilt from ``commit_lsn``,
``seq`` and ``op``.

A string column takes a field that is not a JSON string as the field's own text in the payload,
never parsed and written again: ``pg_cdc``'s ``key``/``before``/``after`` come back byte for
byte as ``pg_cdc`` wrote them (``1.50`` stays ``1.50``, a 30-digit integer its digits, a value
nested thousands deep as it is). The payload is parsed by orjson; one orjson refuses though it
is JSON (nested past its 1,024 levels, a number past a double's range such as ``1e400``) is
checked by :func:`_is_json` and read field by field, so only a column that needs the value
parsed refuses it. Nothing here recurses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector_common.change_rows import position
from iggy_spark.source.errors import SourceError

__all__ = ["parsed_batch"]


class _Unreadable:
    """A field orjson cannot read (``1e400``, nested past 1,024 levels), kept as its text for
    a string column and refused, with orjson's reason, by any other."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


_WS = "[ \t\n\r]*"
_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_FIELD = re.compile(
    rf"{_WS}[{{,]{_WS}({_STRING}){_WS}:{_WS}(?:({_STRING})|([\[{{])|([^ \t\n\r,}}]+))")
"""The next top-level field of a JSON object: its key, then its value's start (a string, an
opening bracket, or a number or literal)."""
_UNTIL_BRACKET = re.compile(rf"[^\"\[\]{{}}]*(?:{_STRING}[^\"\[\]{{}}]*)*")
"""Everything up to the next bracket outside a string."""


_PLAIN = r'[^"\[\]{}]++'
_SHALLOW = rf"[\[{{](?:{_STRING}|{_PLAIN}|[\[{{](?:{_STRING}|{_PLAIN})*+[\]}}])*+[\]}}]"
_SHALLOW_FIELD = re.compile(rf"{_WS}[{{,]{_WS}({_STRING}){_WS}:{_WS}"
                            rf"({_STRING}|{_SHALLOW}|[^ \t\n\r,\[\]{{}}\"]+)")
"""A top-level field whose value nests at most two levels (a change row's fields): one match
gives its key and its whole value."""


def _fields(text: str) -> dict[str, str]:
    """The JSON text of each top-level field of ``text``, a JSON object (checked already:
    orjson parsed it, or :func:`_is_json`), the last of a repeated key as orjson keeps it.

    Values are found, not parsed. Usually one regular expression finds every field, and the
    fields it found must follow one another up to the closing brace; a value nested deeper
    stops it, and the fields are then found one by one (objects and arrays by counting
    brackets outside strings), without recursion."""
    fields: dict[str, str] = {}
    pos = 0
    for field in _SHALLOW_FIELD.finditer(text):
        if field.start() != pos:
            break
        key = field[1]
        fields[key[1:-1] if "\\" not in key else json.loads(key)] = field[2]
        pos = field.end()
    else:
        if text[pos:].strip(" \t\n\r") == "}":
            return fields
    return _deep_fields(text)


def _deep_fields(text: str) -> dict[str, str]:
    """:func:`_fields`, one field at a time."""
    fields: dict[str, str] = {}
    pos = 0
    while (field := _FIELD.match(text, pos)) is not None:
        key = field[1][1:-1] if "\\" not in field[1] else json.loads(field[1])
        if field[3] is None:
            start, pos = field.span(2) if field[2] is not None else field.span(4)
        else:
            start = pos = field.start(3)
            depth = 0
            while True:
                depth += 1 if text[pos] in "[{" else -1
                pos += 1
                if not depth:
                    break
                pos = _UNTIL_BRACKET.match(text, pos).end()  # type: ignore[union-attr]
        fields[key] = text[start:pos]
    return fields


_TOKEN = re.compile(rf'{_WS}(?:(")|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?'
                    r"|true|false|null|([\[\]{}:,]))")
"""A JSON token: a string's opening quote, a number, a literal, or a structural mark."""
_STRING_REST = re.compile(r'(?:[^"\\\x00-\x1f]+|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_AFTER_VALUE, _VALUE, _FIRST_VALUE, _KEY, _FIRST_KEY, _COLON = range(6)
_OPENER = {"]": "[", "}": "{"}
_EMPTY = {"]": _FIRST_VALUE, "}": _FIRST_KEY}
"""What a closing mark may follow besides a value: the opening of an empty array or object."""


def _is_json(text: str) -> bool:
    """Whether ``text`` is one JSON value (RFC 8259, as orjson reads it), checked token by
    token with a stack of the open objects and arrays rather than by recursion: for the
    payloads orjson refuses only for their depth or their numbers' size."""
    stack: list[str] = []
    expect, pos = _VALUE, 0
    while True:
        token = _TOKEN.match(text, pos)
        if token is None:
            return False
        pos = token.end()
        quote, mark = token.groups()
        if quote is not None:
            rest = _STRING_REST.match(text, pos)
            if rest is None:
                return False
            pos = rest.end()
        scalar = mark is None
        if expect in (_VALUE, _FIRST_VALUE) and scalar:
            expect = _AFTER_VALUE
        elif expect in (_KEY, _FIRST_KEY) and quote is not None:
            expect = _COLON
        elif expect == _COLON and mark == ":":
            expect = _VALUE
        elif expect in (_VALUE, _FIRST_VALUE) and mark in ("[", "{"):
            stack.append(mark)
            expect = _FIRST_VALUE if mark == "[" else _FIRST_KEY
        elif (mark in _OPENER and expect in (_AFTER_VALUE, _EMPTY[mark]) and stack
              and stack[-1] == _OPENER[mark]):
            stack.pop()
            expect = _AFTER_VALUE
        elif expect == _AFTER_VALUE and mark == "," and stack:
            expect = _KEY if stack[-1] == "{" else _VALUE
        else:
            return False
        if expect == _AFTER_VALUE and not stack:
            return not text[pos:].strip(" \t\n\r")


def _document(payload: bytes) -> tuple[dict[str, Any], str | None] | None:
    """The payload's fields (``None`` if it is not a JSON object) and, when orjson could not
    read it, its text (:func:`_fields` is then what read it)."""
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError:
        pass
    else:
        return (document, None) if isinstance(document, dict) else None
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        return None
    if not text.lstrip(" \t\n\r").startswith("{") or not _is_json(text):
        return None
    return {key: _loaded(value) for key, value in _fields(text).items()}, text


def _loaded(value: str) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return _Unreadable(str(exc))


def _change_ids(documents: Sequence[dict[str, Any]]) -> list[str | None]:
    """pg_cdc's id of each change, ``<commit_lsn>:<seq>`` (null for snapshot rows, whose id
    holds key values the payload does not keep apart)."""
    return [doc.get("id") or (f"{doc['commit_lsn']}:{doc['seq']}"
                              if doc.get("seq") is not None and doc.get("commit_lsn") else None)
            for doc in documents]


def _positions(
    topic: str, partition: int, documents: Sequence[dict[str, Any]]
) -> list[dict[str, int] | None]:
    """pg_cdc's position of each change, from its ``commit_lsn``, ``seq`` and ``op``."""
    try:
        return [position(doc.get("commit_lsn"), doc.get("seq"), doc.get("op"))
                for doc in documents]
    except (ValueError, TypeError, AttributeError) as exc:
        raise SourceError(topic, f"partition {partition}: a payload's commit_lsn and seq give "
                          f"no position: {exc}") from exc


def parsed_batch(schema: pa.Schema, change_rows: bool, own: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of ``schema`` that the JSON payloads of ``own`` (polled messages of one
    partition, their message columns) hold.

    Raises :class:`SourceError` naming the offset for a payload that is not a JSON object and
    the column for a value that does not fit its type: skipping them would lose data quietly.
    """
    topic, partition = own["topic"][0].as_py(), own["partition"][0].as_py()
    payloads: list[bytes] = own["payload"].to_pylist()
    documents: list[dict[str, Any]] = []
    texts: list[str | None] = []
    for offset, payload in zip(own["offset"].to_pylist(), payloads, strict=True):
        read = _document(payload)
        if read is None:
            raise SourceError(topic, f"partition {partition} offset {offset}: the payload is "
                              "not a JSON object; read it with payload_format=binary")
        documents.append(read[0])
        texts.append(read[1])
    fields: dict[int, dict[str, str] | None] = {}

    def field_text(row: int, name: str) -> str:
        """Field ``name`` of payload ``row`` as the payload writes it: orjson's text of the
        value when the payload is orjson's text of its document (what ``iggy_routed`` writes,
        unless an embedded column's JSON is written otherwise), else found by :func:`_fields`;
        decided once a payload."""
        if row not in fields:
            text = texts[row]
            fields[row] = None if text is None and _is_orjsons(documents[row], payloads[row]) \
                else _fields(payloads[row].decode() if text is None else text)
        found = fields[row]
        return orjson.dumps(documents[row][name]).decode() if found is None else found[name]

    columns = []
    for field in schema:
        name, text = field.name, pa.types.is_string(field.type)
        fallback = (own.column(name).to_pylist() if name in own.schema.names
                    else [None] * len(documents))
        if change_rows and name == "id":
            fallback = _change_ids(documents)
        elif change_rows and name == "position":
            fallback = _positions(topic, partition, documents)
        cell = _text_cell(name, field_text) if text else _value_cell
        values = [cell(row, doc[name]) if name in doc else default
                  for row, (doc, default) in enumerate(zip(documents, fallback, strict=True))]
        columns.append(_column(topic, partition, field, values))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _is_orjsons(document: dict[str, Any], payload: bytes) -> bool:
    """Whether ``payload`` is orjson's text of ``document`` (which orjson read from it)."""
    try:
        return orjson.dumps(document) == payload
    except orjson.JSONEncodeError:  # nested past the 254 levels orjson writes
        return False


def _text_cell(name: str, field_text: Callable[[int, str], str]) -> Callable[[int, Any], Any]:
    """A string column's cell: a JSON string's value, else the field's text in the payload."""
    def cell(row: int, value: Any) -> Any:
        return value if value is None or type(value) is str else field_text(row, name)

    return cell


def _value_cell(row: int, value: Any) -> Any:
    return value


def _column(topic: str, partition: int, field: pa.Field, values: list[Any]) -> pa.Array:
    # Arrow would truncate 1.7 into an integer column and read true as 1.0: refused instead
    if pa.types.is_integer(field.type):
        odd = [v for v in values if isinstance(v, float) and not v.is_integer()]
    elif pa.types.is_floating(field.type):
        odd = [v for v in values if isinstance(v, bool)]
    else:
        odd = []
    unreadable = [v for v in values if isinstance(v, _Unreadable)]
    if odd or unreadable:
        why = unreadable[0].reason if unreadable else repr(odd[0])
        raise SourceError(topic, f"partition {partition}: payload field {field.name!r} does "
                          f"not fit the column's type {field.type}: {why}")
    try:
        if pa.types.is_timestamp(field.type) and any(isinstance(v, str) for v in values):
            return pc.cast(pa.array(values, pa.string()), field.type)  # ISO-8601 text
        return pa.array(values, field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise SourceError(topic, f"partition {partition}: payload field {field.name!r} does "
                          f"not fit the column's type {field.type}: {exc}") from exc
