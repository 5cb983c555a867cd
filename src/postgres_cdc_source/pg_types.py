"""Postgres's built-in types by name, and the rules of their output text every row format reads.

Both output plugins hand over column values as the text of the type's output function, run in
the session that peeks the slot; the snapshot, backfill, reselect and polling readers fetch the
same text. What that text looks like depends on session settings, so every such session sets
exactly :data:`SESSION_SETTINGS`, and every row format's converters assume them.

pgoutput names a column's type by OID, test_decoding (and ``format_type``) by name
(``integer``, ``timestamp with time zone``, ``text[]``). :data:`TYPES` is the one registry of
the built-in types, as psycopg keeps one (``psycopg.types.TypesRegistry``): each type's
``format_type`` name, OID and array type's OID. Each row format keys its converters on these
names (:mod:`postgres_cdc_source.rows`) and builds its tables by OID and by name from here, so
a value converts identically whichever plugin delivered it, in every format. Types outside
the registry (enums, domains, extension types, arrays of those) are each format's text.

:func:`parse_array` reads an array's text as ``array_out`` prints it, for every format.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

__all__ = [
    "SESSION_SETTINGS",
    "TYPES",
    "BuiltinType",
    "TypeRegistry",
    "builtin_types",
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


class BuiltinType(NamedTuple):
    """A built-in type: its name as ``format_type(oid, NULL)`` prints it, its OID and its
    array type's OID (whose name is the type's with ``[]``)."""

    name: str
    oid: int
    array_oid: int


# Every built-in type whose array type uses ',' as delimiter, so arrays of them parse. box is
# absent on purpose: its arrays use ';'.
_BUILTINS: tuple[BuiltinType, ...] = tuple(BuiltinType(name, oid, array_oid) for oid, array_oid,
                                           name in (
    (16, 1000, "boolean"),
    (17, 1001, "bytea"),
    (18, 1002, '"char"'),
    (19, 1003, "name"),
    (20, 1016, "bigint"),
    (21, 1005, "smallint"),
    (23, 1007, "integer"),
    (24, 1008, "regproc"),
    (25, 1009, "text"),
    (26, 1028, "oid"),
    (27, 1010, "tid"),
    (28, 1011, "xid"),
    (29, 1012, "cid"),
    (114, 199, "json"),
    (142, 143, "xml"),
    (600, 1017, "point"),
    (601, 1018, "lseg"),
    (602, 1019, "path"),
    (604, 1027, "polygon"),
    (628, 629, "line"),
    (650, 651, "cidr"),
    (700, 1021, "real"),
    (701, 1022, "double precision"),
    (718, 719, "circle"),
    (774, 775, "macaddr8"),
    (790, 791, "money"),
    (829, 1040, "macaddr"),
    (869, 1041, "inet"),
    (1042, 1014, "character"),
    (1043, 1015, "character varying"),
    (1082, 1182, "date"),
    (1083, 1183, "time without time zone"),
    (1114, 1115, "timestamp without time zone"),
    (1184, 1185, "timestamp with time zone"),
    (1186, 1187, "interval"),
    (1266, 1270, "time with time zone"),
    (1560, 1561, "bit"),
    (1562, 1563, "bit varying"),
    (1700, 1231, "numeric"),
    (2205, 2210, "regclass"),
    (2206, 2211, "regtype"),
    (2950, 2951, "uuid"),
    (3220, 3221, "pg_lsn"),
    (3614, 3643, "tsvector"),
    (3615, 3645, "tsquery"),
    (3802, 3807, "jsonb"),
    (4072, 4073, "jsonpath"),
    (5069, 271, "xid8"),
))


class TypeRegistry:
    """The built-in types, looked up by ``format_type`` name (``registry["integer"]``) or by
    OID (``registry[23]``); :class:`KeyError` naming the type for one not built in."""

    def __init__(self, types: tuple[BuiltinType, ...]) -> None:
        self._types = types
        self._by_name = {t.name: t for t in types}
        self._by_oid = {t.oid: t for t in types}

    def __getitem__(self, key: str | int) -> BuiltinType:
        found = self.get(key)
        if found is None:
            raise KeyError(f"{key!r} is not a built-in type pg_cdc knows")
        return found

    def get(self, key: str | int) -> BuiltinType | None:
        return self._by_oid.get(key) if isinstance(key, int) else self._by_name.get(key)

    def __iter__(self) -> Iterator[BuiltinType]:
        return iter(self._types)

    def oid(self, name: str) -> int:
        """The OID of the built-in type ``name``."""
        return self[name].oid


TYPES = TypeRegistry(_BUILTINS)
"""The built-in types pg_cdc knows by name."""


def builtin_types() -> tuple[tuple[int, int, str], ...]:
    """``(oid, array oid, format_type name)`` of each built-in type, to check against a server."""
    return tuple((t.oid, t.array_oid, t.name) for t in TYPES)


# --- arrays -------------------------------------------------------------------------------------

# One token of array_out's output: a quoted element (group 1), a brace or comma (group 2), or an
# unquoted element (group 3). array_out quotes every element containing braces, commas, quotes,
# backslashes or white space, and every element equal to NULL in any case, so an unquoted NULL
# is always SQL NULL.
_ARRAY_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|([{},])|([^{},"]+)', re.DOTALL)
_ARRAY_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def parse_array(text: str, element: Callable[[str], Any] = str) -> list[Any]:
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


def _parse_nested(text: str, body: str, element: Callable[[str], Any]) -> list[Any]:
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
