"""Postgres text output -> JSON-ready Python values, chosen by type OID or by type name.

Both output plugins hand over column values as the text of the type's output function, run in
the session that peeks the slot. That text depends on session settings, so the reader must open
its peek sessions with exactly :data:`SESSION_SETTINGS`; the converters here assume them (ISO
dates in UTC, shortest-exact floats, hex ``bytea``, UTF-8).

pgoutput names a column's type by OID, test_decoding by the ``format_type`` name (``integer``,
``timestamp with time zone``, ``text[]``). Both lookups read the same table of built-in types, so
a value converts identically whichever plugin delivered it. Types outside that table (enums,
domains, extension types, arrays of those) stay strings in both: pgoutput gives only their OID,
so anything smarter would make the two plugins disagree.

A converter is called once per column per change, which makes this module the decoders' hot
path: converters are plain builtins where possible (``int``, ``str``, ``orjson.Fragment``) and
are looked up once per relation, never per value.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson

__all__ = [
    "SESSION_SETTINGS",
    "Converter",
    "builtin_types",
    "converter_for_oid",
    "converter_for_type_name",
    "parse_array",
]

SESSION_SETTINGS: dict[str, str] = {
    "TimeZone": "UTC",
    "DateStyle": "ISO",
    "IntervalStyle": "iso_8601",
    "extra_float_digits": "1",
    "bytea_output": "hex",
    "client_encoding": "UTF8",
}
"""GUCs every peek session must set (e.g. libpq ``options='-c TimeZone=UTC ...'``).

The output functions run in the peeking backend, so these decide the text of every value:
``TimeZone=UTC`` makes every timestamptz end in ``+00``; ``DateStyle=ISO`` gives
``2024-01-02 03:04:05``; ``IntervalStyle=iso_8601`` gives ``P1DT2H``; ``extra_float_digits=1``
selects the shortest text that reads back to the same float; ``bytea_output=hex`` and
``client_encoding=UTF8`` fix the bytes of ``bytea`` and text. No value contains a space, so they
can be joined into a libpq ``options`` string without escaping.
"""

Converter = Callable[[str], Any]
"""Postgres output text of one non-NULL value -> a value ``orjson`` serializes as intended."""

_FLOAT_WORDS = frozenset({"NaN", "Infinity", "-Infinity"})


def _float(text: str) -> float | str:
    """float4/float8; NaN and infinities stay strings because JSON has no literal for them."""
    return text if text in _FLOAT_WORDS else float(text)


# "t"/"f" is boolout's text; test_decoding prints booleans as true/false instead.
_bool = {"t": True, "f": False, "true": True, "false": False}.__getitem__


def _bytea(text: str) -> str:
    """``\\x0aff`` (hex output) -> base64, the usual JSON carrier for bytes."""
    if not text.startswith("\\x"):
        raise ValueError(f"bytea value {text[:20]!r} is not in hex format (set bytea_output=hex)")
    return base64.b64encode(binascii.a2b_hex(text[2:])).decode("ascii")


def _timestamp(text: str) -> str:
    """``2024-01-02 03:04:05.5`` -> ``2024-01-02T03:04:05.5``; ``infinity`` and BC dates as is.

    Postgres trims trailing zeros of the fraction and omits it when zero; that is kept, since any
    number of fraction digits is valid ISO 8601.
    """
    if text.endswith(" BC"):
        return text
    return text.replace(" ", "T", 1)


def _timestamptz(text: str) -> str:
    """``2024-01-02 03:04:05.5+00`` -> ``2024-01-02T03:04:05.5+00:00``.

    With ``TimeZone=UTC`` the offset is always ``+00``; other offsets are still made ISO-like
    (``+05:30`` kept, ``+05`` -> ``+05:00``) so a session without the setting is not garbled.
    """
    if text.endswith("+00"):
        return text[:-3].replace(" ", "T", 1) + "+00:00"
    if text.endswith(" BC") or " " not in text:  # BC dates, 'infinity', '-infinity'
        return text
    stamp = text.replace(" ", "T", 1)
    sign = max(stamp.rfind("+"), stamp.rfind("-"))
    return stamp + ":00" if len(stamp) - sign == 3 else stamp


# --- arrays -------------------------------------------------------------------------------------

# One token of array_out's output: a quoted element (group 1), a brace or comma (group 2), or an
# unquoted element (group 3). array_out quotes every element containing braces, commas, quotes,
# backslashes or white space, and every element equal to NULL in any case, so an unquoted NULL
# is always SQL NULL.
_ARRAY_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|([{},])|([^{},"]+)', re.DOTALL)
_ARRAY_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def parse_array(text: str, element: Converter = str) -> list[Any]:
    """An array literal as array_out prints it -> nested lists, elements converted by ``element``.

    ``{1,NULL,3}`` -> ``[1, None, 3]``; ``{{a,"b c"},{"x\\"y",NULL}}`` -> nested lists;
    a leading dimension decoration (``[0:1]={7,8}``, printed when a lower bound is not 1) is
    dropped. Raises :class:`ValueError` for text array_out could not have produced.
    """
    body = text
    if text.startswith("["):  # explicit bounds, "[0:1]={7,8}"
        body = text[text.find("=") + 1:] if "=" in text else ""
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"bad array literal {text[:40]!r}: expected {{...}}")
    inner = body[1:-1]
    if '"' not in inner and "{" not in inner and "}" not in inner:  # the common case
        if not inner:
            return []
        return [None if item == "NULL" else element(item) for item in inner.split(",")]
    return _parse_nested(text, body, element)


def _parse_nested(text: str, body: str, element: Converter) -> list[Any]:
    root: list[Any] = []
    stack = [root]
    position = 0
    for match in _ARRAY_TOKEN.finditer(body):
        if match.start() != position:  # a character no token accepts, e.g. an unmatched quote
            break
        position = match.end()
        quoted, punct, bare = match.groups()
        if punct == "{":
            nested: list[Any] = []
            stack[-1].append(nested)
            stack.append(nested)
        elif punct == "}":
            if len(stack) == 1:  # more closing than opening braces
                raise ValueError(f"bad array literal {text[:40]!r}: unbalanced braces")
            stack.pop()
        elif punct == ",":
            continue
        elif quoted is not None:
            if "\\" in quoted:
                quoted = _ARRAY_ESCAPE.sub(r"\1", quoted)
            stack[-1].append(element(quoted))
        else:
            stack[-1].append(None if bare == "NULL" else element(bare))
    if len(stack) != 1 or position != len(body) or len(root) != 1:
        raise ValueError(f"bad array literal {text[:40]!r}")
    result: list[Any] = root[0]
    return result


# --- the type table -----------------------------------------------------------------------------

# (type OID, its array type's OID, format_type name, converter). Every built-in type whose array
# type uses ',' as delimiter is listed, so arrays of them parse; types whose text is already the
# right JSON string use `str` (the identity on str). box is absent on purpose: its arrays use ';'.
_BUILTINS: tuple[tuple[int, int, str, Converter], ...] = (
    (16, 1000, "boolean", _bool),
    (17, 1001, "bytea", _bytea),
    (18, 1002, '"char"', str),
    (19, 1003, "name", str),
    (20, 1016, "bigint", int),
    (21, 1005, "smallint", int),
    (23, 1007, "integer", int),
    (24, 1008, "regproc", str),
    (25, 1009, "text", str),
    (26, 1028, "oid", int),
    (27, 1010, "tid", str),
    (28, 1011, "xid", str),
    (29, 1012, "cid", str),
    (114, 199, "json", orjson.Fragment),
    (142, 143, "xml", str),
    (600, 1017, "point", str),
    (601, 1018, "lseg", str),
    (602, 1019, "path", str),
    (604, 1027, "polygon", str),
    (628, 629, "line", str),
    (650, 651, "cidr", str),
    (700, 1021, "real", _float),
    (701, 1022, "double precision", _float),
    (718, 719, "circle", str),
    (774, 775, "macaddr8", str),
    (790, 791, "money", str),
    (829, 1040, "macaddr", str),
    (869, 1041, "inet", str),
    (1042, 1014, "character", str),
    (1043, 1015, "character varying", str),
    (1082, 1182, "date", str),
    (1083, 1183, "time without time zone", str),
    (1114, 1115, "timestamp without time zone", _timestamp),
    (1184, 1185, "timestamp with time zone", _timestamptz),
    (1186, 1187, "interval", str),
    (1266, 1270, "time with time zone", str),
    (1560, 1561, "bit", str),
    (1562, 1563, "bit varying", str),
    (1700, 1231, "numeric", str),
    (2205, 2210, "regclass", str),
    (2206, 2211, "regtype", str),
    (2950, 2951, "uuid", str),
    (3220, 3221, "pg_lsn", str),
    (3614, 3643, "tsvector", str),
    (3615, 3645, "tsquery", str),
    (3802, 3807, "jsonb", orjson.Fragment),
    (4072, 4073, "jsonpath", str),
    (5069, 271, "xid8", str),
)


def _tables() -> tuple[dict[int, Converter], dict[str, Converter]]:
    by_oid: dict[int, Converter] = {}
    by_name: dict[str, Converter] = {}
    for oid, array_oid, name, convert in _BUILTINS:
        array = partial(parse_array, element=convert)
        by_oid[oid] = by_name[name] = convert
        by_oid[array_oid] = by_name[name + "[]"] = array
    return by_oid, by_name


_BY_OID, _BY_NAME = _tables()


def converter_for_oid(type_oid: int) -> Converter:
    """The converter for a column of type ``type_oid`` (``str`` for types not built in)."""
    return _BY_OID.get(type_oid, str)


def converter_for_type_name(name: str) -> Converter:
    """The converter for a ``format_type`` name such as ``integer[]`` (``str`` if not built in).

    Names are matched exactly as ``format_type(oid, NULL)`` prints them: one ``[]`` for arrays of
    any dimension, no type modifiers, user types possibly quoted or schema-qualified.
    """
    return _BY_NAME.get(name, str)


def builtin_types() -> tuple[tuple[int, int, str], ...]:
    """``(oid, array oid, format_type name)`` of each built-in type, to check against a server."""
    return tuple((oid, array_oid, name) for oid, array_oid, name, _ in _BUILTINS)
