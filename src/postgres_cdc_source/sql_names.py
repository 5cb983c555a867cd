"""Identifiers for queries that also carry parameters.

psycopg reads every ``%`` of a query run with parameters as the start of a placeholder, and
``sql.Identifier`` does not escape it: a table named ``50%_off`` breaks such a query (or, with
``%s`` in a name, shifts its parameters). :class:`Name` doubles the ``%``, which the query's
conversion turns back into one. Use it only in queries run with parameters (a sequence, even an
empty one): without them nothing is converted and the name would keep both.
"""

from __future__ import annotations

from psycopg import sql
from psycopg.abc import AdaptContext

__all__ = ["Name"]


class Name(sql.Identifier):
    """An identifier (or a dot-separated sequence) for a query run with parameters."""

    def as_bytes(self, context: AdaptContext | None = None) -> bytes:
        return super().as_bytes(context).replace(b"%", b"%%")
