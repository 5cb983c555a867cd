"""A run of changes the compiled core decoded, as Arrow arrays: :class:`ChangeBlock`.

The compiled core (:mod:`postgres_cdc_source.decoding.compiled`) hands back the changes it took
from one peek fetch as Arrow buffers, never as a Python object per change. A block stands among
the decoder's events where those changes were, inside one transaction, and
:mod:`postgres_cdc_source.assembly` carries it to the batch as it is: its rows are those the
pure-Python decoder gives as :class:`~postgres_cdc_source.decoding.Change` tuples for the same
messages (``row_format=json`` or ``struct``, no routing by a column): no ``before``, no
unchanged columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from postgres_cdc_source.decoding.changes import Change

__all__ = ["ChangeBlock", "Chunk", "Typed", "strings_of"]

_STRING = pa.string()

Typed = tuple[pa.StructType, pa.StructType, Sequence[str]]
"""A typed block's row struct, key struct, and the form of each of their fields
(:func:`~postgres_cdc_source.rows.struct.images.image_form`), row's then key's."""


def strings_of(count: int, buffers: tuple[Any, Any, Any | None, int]) -> pa.Array:
    """The string array of ``count`` values over the core's ``(offsets, data, validity or
    None, null count)``, each buffer lent by the core's block (``iggy_spark_core.View``, the
    buffer protocol), without copying them."""
    offsets, data, validity, nulls = buffers
    return pa.StringArray.from_buffers(
        count, pa.py_buffer(offsets), pa.py_buffer(data),
        None if validity is None else pa.py_buffer(validity), nulls)


class ChangeBlock:
    """Changes of one transaction in commit order: each column an Arrow array of one entry per
    change. ``lsn`` is the change's LSN as text; ``key`` and ``after`` are the JSON mode's
    images (``key`` null for a table without a replica identity), or with ``row_format=struct``
    structs of the row's and key's fields as the core keeps them
    (:func:`~postgres_cdc_source.rows.struct.images.image_form`), which the batch casts
    (:func:`~postgres_cdc_source.rows.struct.images.fields_texts`)."""

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
    def of(cls, block: Any, typed: Typed | None = None) -> ChangeBlock:
        """The arrays over a core ``Block``'s buffers, without copying them; ``typed``: the
        row and key structs of a typed block, and the form of each of their fields."""
        count = len(block)
        columns: dict[str, Any] = dict(block.buffers())
        strings = {name: strings_of(count, columns[name])
                   for name in ("lsn", "schema", "table", "op")}
        seq = pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(columns["seq"])])
        if typed is None:
            key, after = strings_of(count, columns["key"]), strings_of(count, columns["after"])
        else:
            (row, key_struct, forms), (fields, (keyed, unkeyed)) = typed, columns["fields"]
            arrays = [_field_of(count, field, form, buffers)
                      for field, form, buffers in zip([*row, *key_struct], forms, fields,
                                                      strict=True)]
            after = pa.StructArray.from_arrays(arrays[:len(row)], names=row.names)
            key = pa.Array.from_buffers(
                pa.struct([pa.field(name, array.type) for name, array
                           in zip(key_struct.names, arrays[len(row):], strict=True)]),
                count, [None if keyed is None else pa.py_buffer(keyed)], unkeyed,
                children=arrays[len(row):])
        return cls(strings["lsn"], seq, strings["schema"], strings["table"], strings["op"],
                   key, after)

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


def _field_of(count: int, field: pa.Field, form: str, buffers: Any) -> pa.Array:
    """One field of a typed block: the core's texts (bytes for ``bytea``) or, for values the
    converter made (form ``python``), the values as ``field``'s type."""
    if form == "python":
        return pa.array(buffers, field.type)
    offsets, data, validity, nulls = buffers
    return pa.Array.from_buffers(
        pa.binary() if form == "bytea" else pa.string(), count,
        [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
         pa.py_buffer(data)], nulls)


Chunk = list[Change] | ChangeBlock
"""Changes of one transaction in order: single changes, or a block the compiled core decoded."""
