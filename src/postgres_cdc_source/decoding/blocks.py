"""A run of changes the compiled core decoded, as Arrow arrays: :class:`ChangeBlock`.

The compiled core (:mod:`postgres_cdc_source.decoding.compiled`) hands back the changes it took
from one peek fetch as Arrow buffers, never as a Python object per change. A block stands among
the decoder's events where those changes were, inside one transaction, and
:mod:`postgres_cdc_source.assembly` carries it to the batch as it is: its rows are those the
pure-Python decoder gives as :class:`~postgres_cdc_source.decoding.Change` tuples for the same
messages (``row_format=json``, no routing by a column): no ``before``, no unchanged columns.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from postgres_cdc_source.decoding.changes import Change

__all__ = ["ChangeBlock", "Chunk", "strings_of"]

_STRING = pa.string()


def strings_of(count: int, buffers: tuple[bytes, bytes, bytes | None, int]) -> pa.Array:
    """The string array of ``count`` values over the core's ``(offsets, data, validity or
    None, null count)``, without copying them."""
    offsets, data, validity, nulls = buffers
    return pa.StringArray.from_buffers(
        count, pa.py_buffer(offsets), pa.py_buffer(data),
        None if validity is None else pa.py_buffer(validity), nulls)


class ChangeBlock:
    """Changes of one transaction in commit order: each column an Arrow array of one entry per
    change. ``lsn`` is the change's LSN as text; ``key`` and ``after`` are the JSON mode's
    images (``key`` null for a table without a replica identity)."""

    __slots__ = ("after", "key", "lsn", "op", "schema", "seq", "table")

    def __init__(self, lsn: pa.Array, seq: pa.Array, schema: pa.Array, table: pa.Array,
                 op: pa.Array, key: pa.Array, after: pa.Array) -> None:
        self.lsn = lsn
        self.seq = seq
        self.schema = schema
        self.table = table
        self.op = op
        self.key = key
        self.after = after

    @classmethod
    def of(cls, block: Any) -> ChangeBlock:
        """The arrays over a core ``Block``'s buffers, without copying them."""
        count = len(block)
        columns: dict[str, Any] = dict(block.buffers())
        strings = {name: strings_of(count, columns[name])
                   for name in ("lsn", "schema", "table", "op", "key", "after")}
        seq = pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(columns["seq"])])
        return cls(strings["lsn"], seq, strings["schema"], strings["table"], strings["op"],
                   strings["key"], strings["after"])

    def __len__(self) -> int:
        return len(self.seq)

    def __getitem__(self, rows: slice) -> ChangeBlock:
        """The changes ``rows`` (a slice without step), sharing this block's buffers."""
        start, stop, _ = rows.indices(len(self))
        length = max(stop - start, 0)
        return ChangeBlock(*(column.slice(start, length) for column in self.columns()))

    def columns(self) -> tuple[pa.Array, ...]:
        """``lsn``, ``seq``, ``schema``, ``table``, ``op``, ``key``, ``after``."""
        return (self.lsn, self.seq, self.schema, self.table, self.op, self.key, self.after)


Chunk = list[Change] | ChangeBlock
"""Changes of one transaction in order: single changes, or a block the compiled core decoded."""
