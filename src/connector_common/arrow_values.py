"""Arrow arrays of a few Python values, made from buffers.

pyarrow turning Python objects into an array (:func:`pyarrow.array`, :func:`pyarrow.scalar`)
first asks whether they are pandas objects, and so imports pandas where it is installed: about
0.3 s of CPU in each of Spark's Python workers, which import nothing of pandas themselves when
a data source yields Arrow batches. The columns every batch carries (a transaction's LSN, ids
and times, a table's name repeated, the sink's constant texts) are made here instead; values
of the user's types still go through :func:`pyarrow.array`.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate

import pyarrow as pa

__all__ = ["encoded_strings", "int32s", "int64s", "repeated", "string", "strings"]

_STRING, _LARGE, _LARGE_BINARY = pa.string(), pa.large_string(), pa.large_binary()


def strings(values: Sequence[str | None], kind: pa.DataType = _STRING) -> pa.Array:
    """A string array of ``values``, ``None`` null; ``kind`` string or large string."""
    return encoded_strings([b"" if value is None else value.encode() for value in values],
                           kind, _validity(values))


def encoded_strings(encoded: Sequence[bytes], kind: pa.DataType = _STRING,
                    validity: tuple[pa.Buffer | None, int] = (None, 0)) -> pa.Array:
    """An array of ``encoded`` values: of ``kind`` string or large string (UTF-8 texts, not
    checked: what :meth:`str.encode` or orjson wrote), or binary or large binary; ``validity``
    the bitmap of the values not null and the count of those that are."""
    large = kind in (_LARGE, _LARGE_BINARY)
    offsets = array("q" if large else "i", accumulate(map(len, encoded), initial=0))
    bitmap, nulls = validity
    return pa.Array.from_buffers(
        kind, len(encoded), [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))],
        nulls)


def string(value: str, kind: pa.DataType = _STRING) -> pa.Scalar:
    """The string scalar ``value`` of ``kind`` (string or large string)."""
    return strings((value,), kind)[0]


def repeated(value: str, count: int) -> pa.Array:
    """``value`` ``count`` times."""
    return pa.repeat(string(value), count)


def int32s(values: Sequence[int | None]) -> pa.Array:
    """An int32 array of ``values``, ``None`` null."""
    return _integers(pa.int32(), "i", values)


def int64s(values: Sequence[int | None]) -> pa.Array:
    """An int64 array of ``values``, ``None`` null."""
    return _integers(pa.int64(), "q", values)


def _integers(kind: pa.DataType, code: str, values: Sequence[int | None]) -> pa.Array:
    data = array(code, (0 if value is None else value for value in values))
    bitmap, nulls = _validity(values)
    return pa.Array.from_buffers(kind, len(values), [bitmap, pa.py_buffer(data)], nulls)


def _validity(values: Sequence[object]) -> tuple[pa.Buffer | None, int]:
    """Arrow's validity bitmap of ``values`` (``None`` where none is null) and their nulls."""
    if None not in values:
        return None, 0
    flags = "".join("0" if value is None else "1" for value in reversed(values))
    bitmap = int(flags, 2).to_bytes((len(values) + 7) // 8, "little")
    return pa.py_buffer(bitmap), flags.count("0")
