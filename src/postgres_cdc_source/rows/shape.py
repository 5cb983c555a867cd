"""What a decoder hands a row format, and what it gets back: one relation's :class:`RowShape`.

A decoder (or a reader of whole rows: the snapshot, a backfill, polling) builds a
:class:`RowShape` for each table it meets, with the JSON mode's converters
(:mod:`postgres_cdc_source.rows.json.values`) and :func:`json_text` as its image encoder; a
format that types rows otherwise hands back its own (:class:`Retyping`,
:meth:`postgres_cdc_source.rows.RowFormat.retyped`). From then on the decoders' per-change
code applies the shape's converters and encoder, whichever format made them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import orjson

from postgres_cdc_source.rows.json.values import Converter

__all__ = ["Retyping", "RowShape", "json_text"]

_dumps = orjson.dumps


class RowShape:
    """One relation's columns as a decoder sees them, precomputed once per relation.

    ``names`` and ``converters`` are aligned with the tuples the decoder parses (dropped and
    generated columns excluded, as pgoutput does); ``key`` holds the indexes of the replica
    identity columns; ``keep`` is the table filter's verdict, so filtered changes are skipped
    before their tuples are parsed. ``encode`` makes a row image of the converted values
    (:func:`json_text`, or the dict itself for ``row_format=struct``, whose converters type
    it); ``changed``, when set, is raised by :func:`build_change` instead of building
    a change (the table no longer has the columns a ``row_format=struct`` query started with).
    """

    __slots__ = ("changed", "converters", "encode", "keep", "key", "key_names", "names",
                 "schema", "table")

    def __init__(
        self,
        schema: str,
        table: str,
        names: Sequence[str],
        converters: Sequence[Converter],
        key: Sequence[int],
        keep: bool,
        encode: Callable[[dict[str, Any]], Any] | None = None,
        changed: Exception | None = None,
    ) -> None:
        if len(names) != len(converters):
            raise ValueError("RowShape needs one converter per column")
        self.schema = schema
        self.table = table
        self.names = tuple(names)
        self.converters = tuple(converters)
        self.key = tuple(key)
        self.key_names = tuple(self.names[i] for i in self.key)
        self.keep = keep
        self.encode = json_text if encode is None else encode
        self.changed = changed

    def __repr__(self) -> str:
        return f"RowShape({self.schema!r}, {self.table!r}, {self.names!r}, key={self.key!r})"


class Retyping(Protocol):
    """What types a query's rows for the decoders (a row format's
    :attr:`~postgres_cdc_source.rows.RowFormat.retyping`: ``struct``'s and ``variant``'s): a
    decoder hands it each :class:`RowShape` it builds for a kept table, with the JSON mode's
    converters, and uses the shape it returns."""

    def retyped(self, shape: RowShape, *, whole: bool = True,
                types: Sequence[int | str] | None = None) -> RowShape:
        """``shape`` with typed converters and dict images
        (see :meth:`~postgres_cdc_source.rows.RowFormat.retyped`)."""
        ...


def json_text(obj: dict[str, Any]) -> str:
    """A row image as JSON text (``row_format=json``)."""
    return _dumps(obj).decode()
