"""The decoders' ``key``/``after`` JSON of a whole row, built by Postgres inside the SELECT.

Readers of whole rows (the snapshot's chunks, polling's batches) would otherwise fetch every
value as text and convert and serialize it in Python, one value at a time: that per-value work
was most of a snapshot's cost. For the types whose converter (:mod:`.values`)
is a plain rewrite of the output text, the same JSON can be written by a SQL expression, so the
row arrives as ready strings and the worker only moves them into Arrow.

The expressions must give exactly the bytes ``orjson.dumps`` gives for the converted value
(tests compare them on edge values of every type here, and on random text). Each starts from
the value's output text, ``format('%s', v)``, which runs the type's output function as pgoutput
does (a plain ``::text`` cast does not always: ``bpchar`` drops trailing blanks, ``inet`` adds
the mask):

* converter ``str`` (text, numeric, dates, uuid, inet, enums, domains, any type not built in):
  ``to_json(text)``, whose string escaping is orjson's (``\\"``, ``\\\\``, ``\\b\\f\\n\\r\\t``,
  other control characters as lower-case ``\\u00xx``, everything else as is);
* ``int`` (smallint, integer, bigint, oid): the text is already the JSON number;
* ``bool``: ``true``/``false``; ``json``/``jsonb`` (``orjson.Fragment``): the text as is;
* ``timestamp``/``timestamptz``: the converters' string rewrites, spelled in SQL.

Where a type's ``::text`` cast is its output function (integers, numeric, uuid, date, json,
jsonb, text), the cheaper cast replaces ``format``, and timestamps after 1 AD use ``to_json``
directly (its ISO form is the rewrite's result): about half what the per-value ``format``
spelling costs Postgres (figures in bench/results/decoders.json).

Any other converter (floats, ``bytea``, arrays) has no expression: :func:`row_json_sql`
returns ``None`` and the caller converts in Python, as the decoders do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson
from psycopg import sql

from postgres_cdc_source.pg_types import TYPES
from postgres_cdc_source.rows.json import values
from postgres_cdc_source.sql_names import Name

__all__ = ["column_json_sql", "row_json_sql", "text_json_sql"]

_Render = Callable[[sql.Composable], sql.Composable]


def _text(column: sql.Composable) -> sql.Composable:
    """The value's output text (``%%`` because queries carrying it are run with parameters)."""
    return sql.SQL("format('%%s', {})").format(column)


def _string(column: sql.Composable) -> sql.Composable:
    return sql.SQL("to_json({})::text").format(_text(column))


def _number(column: sql.Composable) -> sql.Composable:
    return _text(column)


def _bool(column: sql.Composable) -> sql.Composable:
    return sql.SQL("CASE WHEN {} THEN 'true' ELSE 'false' END").format(column)


def _timestamp(column: sql.Composable) -> sql.Composable:
    # values._timestamp: "... BC" as is, else the first space becomes "T"
    t = _text(column)
    return sql.SQL(
        "to_json(CASE WHEN right({t}, 3) = ' BC' OR strpos({t}, ' ') = 0 THEN {t} "
        "ELSE split_part({t}, ' ', 1) || 'T' || substr({t}, strpos({t}, ' ') + 1) END)::text"
    ).format(t=t)


def _timestamptz(column: sql.Composable) -> sql.Composable:
    # values._timestamptz: "+00" -> "T...+00:00"; "... BC" and words as is; else "T" and an
    # offset of two digits gets ":00"
    t = _text(column)
    return sql.SQL(
        "to_json(CASE "
        "WHEN right({t}, 3) = '+00' THEN split_part({t}, ' ', 1) || 'T' "
        "|| substr({t}, strpos({t}, ' ') + 1, length({t}) - strpos({t}, ' ') - 3) || '+00:00' "
        "WHEN right({t}, 3) = ' BC' OR strpos({t}, ' ') = 0 THEN {t} "
        "ELSE split_part({t}, ' ', 1) || 'T' || substr({t}, strpos({t}, ' ') + 1) "
        "|| CASE WHEN {t} ~ '[+-][^+-]{{2}}$' THEN ':00' ELSE '' END END)::text"
    ).format(t=t)


def _xsd(slow: _Render, floor: str) -> _Render:
    """``to_json`` of a timestamp (ISO 8601 with ``T``, offsets as ``+hh:mm``) is already what
    the rewrite gives for years after 1 AD, and about four times cheaper than spelling the
    rewrite out; earlier values (BC, ``-infinity``) take the spelled-out branch. ``floor`` is a
    day into 1 AD, so no time zone's offset moves a value past it into BC."""

    def render(column: sql.Composable) -> sql.Composable:
        return sql.SQL("CASE WHEN {c} > {floor} THEN to_json({c})::text ELSE {slow} END").format(
            c=column, floor=sql.SQL(floor), slow=slow(column))

    return render


def _cast(template: str) -> _Render:
    """A cheaper spelling for types whose ``::text`` cast is their output function."""
    return lambda column: sql.SQL(template).format(column)


# Types whose value text needs no format(): the cast to text is the output function itself
# (ints, numeric, uuid, date, jsonb: I/O casts; json and text types: the stored text).
_INTEGERS = ("bigint", "smallint", "integer", "oid")
_STRING_NAMES = ("numeric", "uuid", "date", "text", "character varying")
_BY_NAME: dict[str, _Render] = {
    **dict.fromkeys(_INTEGERS, _cast("{}::text")),
    **dict.fromkeys(("numeric", "uuid", "date"), _cast("to_json({}::text)::text")),
    **dict.fromkeys(("text", "character varying"), _cast("to_json({})::text")),
    **dict.fromkeys(("json", "jsonb"), _cast("{}::text")),
    "timestamp without time zone": _xsd(_timestamp, "'0001-01-02 00:00:00'::timestamp"),
    "timestamp with time zone": _xsd(_timestamptz, "'0001-01-02 00:00:00+00'::timestamptz"),
}
_BY_OID: dict[int, _Render] = {TYPES.oid(name): render for name, render in _BY_NAME.items()}
_STRINGS = frozenset(map(TYPES.oid, _STRING_NAMES))  # converter str, a cheaper spelling
_BY_CONVERTER: dict[object, _Render] = {
    str: _string,
    int: _number,
    orjson.Fragment: _number,
    values.converter_for_type_name("boolean"): _bool,
}


def column_json_sql(type_oid: int, column: sql.Composable) -> sql.Composable | None:
    """SQL giving the JSON of ``column`` (of type ``type_oid``) as the decoders write it,
    ``'null'`` for NULL; ``None`` if its converter has no SQL spelling."""
    render = _BY_OID.get(type_oid) or _BY_CONVERTER.get(values.converter_for_oid(type_oid))
    if render is None:
        return None
    return sql.SQL("CASE WHEN {c} IS NULL THEN 'null' ELSE {json} END").format(
        c=column, json=render(column))


_INT_TEXT = frozenset(map(TYPES.oid, _INTEGERS))


def text_json_sql(type_oid: int, column: sql.Composable) -> sql.Composable:
    """SQL giving the JSON string of a non-NULL ``column``'s output text (``orjson.dumps`` of
    the text, whatever the type): how a snapshot row's ``id`` carries its key."""
    if type_oid in _INT_TEXT:  # digits and a sign: nothing to escape
        return sql.SQL("('\"' || {}::text || '\"')").format(column)
    return (_BY_OID[type_oid] if type_oid in _STRINGS else _string)(column)


def row_json_sql(
    names: Sequence[str], type_oids: Sequence[int],
    columns: Sequence[sql.Composable] | None = None,
) -> sql.Composable | None:
    """SQL giving ``orjson.dumps({name: converted value, ...})`` of the row's columns in order
    (``columns``: how the query names them, by default their identifiers); ``None`` when a
    column's type has no SQL spelling. For queries run with parameters, where ``%%`` is ``%``."""
    refs = columns if columns is not None else [Name(n) for n in names]
    parts: list[sql.Composable] = []
    for i, (name, oid, column) in enumerate(zip(names, type_oids, refs, strict=True)):
        value = column_json_sql(oid, column)
        if value is None:
            return None
        label = ("{" if i == 0 else ",") + orjson.dumps(name).decode() + ":"
        parts += [sql.Literal(label.replace("%", "%%")), value]
    if not parts:
        return sql.SQL("'{{}}'::text")
    return sql.SQL("({} || '}}')").format(sql.SQL(" || ").join(parts))
