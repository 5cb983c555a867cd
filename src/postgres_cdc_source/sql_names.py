"""Identifiers for queries that also carry parameters.

psycopg reads every ``%`` of a query run with parameters as the start of a placeholder, and
``sql.Identifier`` does not escape it: a table named ``50%_off`` breaks such a query (or, with
``%s`` in a name, shifts its parameters). :class:`Name` doubles the ``%``, which the query's
conversion turns back into one. Use it only in queries run with parameters (a sequence, even an
empty one): without them nothing is converted and the name would keep both.

:func:`qualified_name` is a table's name as the include/exclude rules match it.
"""

from __future__ import annotations

from psycopg import sql
from psycopg.abc import AdaptContext

__all__ = ["Name", "qualified_name"]


class Name(sql.Identifier):
    """An identifier (or a dot-separated sequence) for a query run with parameters."""

    def as_bytes(self, context: AdaptContext | None = None) -> bytes:
        return super().as_bytes(context).replace(b"%", b"%%")


def qualified_name(schema: str, table: str) -> str:
    """The text ``include_tables``/``exclude_tables`` match: ``schema.table``, each name as it
    is unless it holds a ``.`` or a ``"``, which is written double-quoted with its ``"``
    doubled, as in SQL (``a."b.c"`` is table ``b.c`` of schema ``a``, ``"a.b".c`` table ``c``
    of schema ``a.b``).

    Two tables never share a text, so a pattern picks the (schema, table) pairs it means;
    names without either character (``public.Orders``, ``public.7``) read as they always did,
    so the patterns of existing queries keep their tables.
    """
    return f"{_name_text(schema)}.{_name_text(table)}"


def _name_text(name: str) -> str:
    if "." in name or '"' in name:
        return '"' + name.replace('"', '""') + '"'
    return name
