"""Spark's VARIANT binary encoding, written from Python values (``row_format=variant``).

A variant is two byte strings (the encoding Spark and Parquet share): ``metadata``, a header
byte and a dictionary of the object keys, and ``value``, a tree of values each starting with a
header byte whose two low bits say what it is (a primitive, a string of up to 63 bytes, an
object, an array) and whose six high bits say which primitive, how long the string, or how
wide an object's or array's counts, key ids and offsets are. Numbers are little-endian.

Values given to :func:`encode` and :func:`variant_array`:

* ``bytes``: an already encoded value with no object in it, built by the functions here
  (:func:`integer`, :func:`decimal`, :func:`string`, ...): a row's columns are encoded once,
  by their column's converter, and only put together per row;
* ``None``, ``bool``, ``int``, ``float`` (a double), ``str``;
* ``dict`` (string keys) and ``list``, holding any of these.

The key dictionary is sorted and the object fields are written in key order, by UTF-16 code
units as Spark compares strings (a large object is searched by binary search). A row's keys
are its column names, so the dictionary and the object's field ids of each set of keys are
built once and reused; only rows with JSON objects in them (``json``/``jsonb`` columns) build
their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import accumulate
from operator import itemgetter
from struct import Struct
from typing import Any, Final

import pyarrow as pa

__all__ = [
    "FALSE",
    "NO_KEYS",
    "NULL",
    "TRUE",
    "VARIANT_ARROW",
    "binary",
    "date_days",
    "decimal",
    "double",
    "encode",
    "float32",
    "int16",
    "int32",
    "int64",
    "integer",
    "is_variant",
    "plain",
    "string",
    "timestamp",
    "timestamp_ntz",
    "variant_array",
]

VARIANT_ARROW: Final = pa.struct([
    pa.field("value", pa.binary(), nullable=False),
    pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"}),
])
"""A VARIANT as Spark reads it from Arrow (pyspark's ``to_arrow_type(VariantType())``)."""

# primitive headers: the type id in the six high bits, basic type 0
NULL: Final = b"\x00"
TRUE: Final = b"\x04"
FALSE: Final = b"\x08"
_INT8, _INT16, _INT32, _INT64 = (Struct("<Bb"), Struct("<Bh"), Struct("<Bi"), Struct("<Bq"))
_INT_HEADERS = (3 << 2, 4 << 2, 5 << 2, 6 << 2)
_DOUBLE = Struct("<Bd")
_DOUBLE_HEADER = 7 << 2
_DECIMAL4, _DECIMAL8 = Struct("<BBi"), Struct("<BBq")
_DECIMAL_HEADERS = (8 << 2, 9 << 2, 10 << 2)
_DAYS = Struct("<Bi")
_DATE_HEADER = 11 << 2
_MICROS = Struct("<Bq")
_TIMESTAMP_HEADER, _TIMESTAMP_NTZ_HEADER = 12 << 2, 13 << 2
_FLOAT = Struct("<Bf")
_FLOAT_HEADER = 14 << 2
_SIZED = Struct("<BI")
_BINARY_HEADER, _LONG_STRING_HEADER = 15 << 2, 16 << 2
_SHORT_STRING = 1
_OBJECT, _ARRAY = 2, 3
_MAX_SHORT_STRING = 63
_MAX_DECIMAL_DIGITS = 38
_DECIMAL_LIMITS = (10**9, 10**18, 10**38)  # unscaled values below these fit decimal4/8/16
_I8, _I16, _I32, _I64 = 1 << 7, 1 << 15, 1 << 31, 1 << 63


def integer(n: int) -> bytes:
    """The smallest of int8/16/32/64 that holds ``n``; beyond int64 a decimal of scale 0, and
    beyond 38 digits its text as a string (Spark has no exact number that wide)."""
    if -_I8 <= n < _I8:
        return _INT8.pack(_INT_HEADERS[0], n)
    if -_I16 <= n < _I16:
        return _INT16.pack(_INT_HEADERS[1], n)
    if -_I32 <= n < _I32:
        return _INT32.pack(_INT_HEADERS[2], n)
    if -_I64 <= n < _I64:
        return _INT64.pack(_INT_HEADERS[3], n)
    return decimal(n, 0) or string(str(n))


def decimal(unscaled: int, scale: int) -> bytes | None:
    """``unscaled * 10**-scale`` as the narrowest of decimal4/8/16 whose precision holds both
    its digits and its scale (``0.00`` keeps its scale); ``None`` beyond 38 digits."""
    if scale < 0:  # 1E+2: no negative scales in a variant
        unscaled, scale = unscaled * 10**-scale, 0
    magnitude = -unscaled if unscaled < 0 else unscaled
    if magnitude < _DECIMAL_LIMITS[0] and scale <= 9:
        return _DECIMAL4.pack(_DECIMAL_HEADERS[0], scale, unscaled)
    if magnitude < _DECIMAL_LIMITS[1] and scale <= 18:
        return _DECIMAL8.pack(_DECIMAL_HEADERS[1], scale, unscaled)
    if magnitude < _DECIMAL_LIMITS[2] and scale <= _MAX_DECIMAL_DIGITS:
        return bytes((_DECIMAL_HEADERS[2], scale)) + unscaled.to_bytes(16, "little", signed=True)
    return None


# The fixed-size primitives: a packer each, called once per value of a column of the type.
int16: Final = partial(_INT16.pack, _INT_HEADERS[1])
int32: Final = partial(_INT32.pack, _INT_HEADERS[2])
int64: Final = partial(_INT64.pack, _INT_HEADERS[3])
double: Final = partial(_DOUBLE.pack, _DOUBLE_HEADER)
float32: Final = partial(_FLOAT.pack, _FLOAT_HEADER)
"""A 4-byte float: the double given rounded to the nearest (the caller knows it is exact)."""
date_days: Final = partial(_DAYS.pack, _DATE_HEADER)
"""A date, as days since 1970-01-01."""
timestamp: Final = partial(_MICROS.pack, _TIMESTAMP_HEADER)
"""An instant (Spark's TIMESTAMP), as microseconds since 1970-01-01 00:00 UTC."""
timestamp_ntz: Final = partial(_MICROS.pack, _TIMESTAMP_NTZ_HEADER)
"""A local date and time (Spark's TIMESTAMP_NTZ), as microseconds since 1970-01-01 00:00."""


_SHORT_HEADERS = tuple(bytes((_SHORT_STRING | n << 2,)) for n in range(_MAX_SHORT_STRING + 1))


def string(s: str) -> bytes:
    data = s.encode()
    n = len(data)
    if n <= _MAX_SHORT_STRING:
        return _SHORT_HEADERS[n] + data
    return _SIZED.pack(_LONG_STRING_HEADER, n) + data


def binary(data: bytes) -> bytes:
    return _SIZED.pack(_BINARY_HEADER, len(data)) + data




# --- objects and arrays ----------------------------------------------------------------------

_UINT = {1: Struct("<B"), 2: Struct("<H"), 4: Struct("<I")}


def _width(n: int) -> int:
    """Bytes of the unsigned integers of an offset or id list whose largest is ``n``."""
    return 1 if n <= 0xFF else 2 if n <= 0xFFFF else 3 if n <= 0xFFFFFF else 4


def _uints(numbers: Sequence[int], width: int) -> bytes:
    if width == 3:
        return b"".join(n.to_bytes(3, "little") for n in numbers)
    return Struct(f"<{len(numbers)}{'BHxI'[width - 1]}").pack(*numbers)


def _count(n: int) -> bytes:
    return bytes((n,)) if n <= 0xFF else _UINT[4].pack(n)


def _container(parts: list[bytes], ids: bytes | None, id_width: int) -> bytes:
    """An object (with the field ids ``ids``, in key order) or an array (``ids`` ``None``) of
    the encoded ``parts``."""
    offsets = [0]
    total = 0
    for part in parts:
        total += len(part)
        offsets.append(total)
    width = _width(total)
    large = len(parts) > 0xFF
    if ids is None:
        header = _ARRAY | (large << 2 | (width - 1)) << 2
        return b"".join((bytes((header,)), _count(len(parts)), _uints(offsets, width), *parts))
    header = _OBJECT | (large << 4 | (id_width - 1) << 2 | (width - 1)) << 2
    return b"".join((bytes((header,)), _count(len(parts)), ids, _uints(offsets, width), *parts))


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _metadata(keys: Sequence[str]) -> bytes:
    """The metadata of a sorted, unique key dictionary."""
    encoded = [k.encode() for k in keys]
    offsets = [0]
    for k in encoded:
        offsets.append(offsets[-1] + len(k))
    width = _width(max(offsets[-1], len(keys)))
    header = 1 | (1 << 4) | (width - 1) << 6  # version 1, sorted strings
    return b"".join((bytes((header,)), _uints([len(keys), *offsets], width), *encoded))


NO_KEYS: Final = _metadata(())
"""The metadata of a value that holds no object (:func:`plain`'s, and every scalar's)."""


class _Keys:
    """One set of object keys: the sorted dictionary's metadata, and what a flat object with
    exactly these keys (the usual row) needs: its values in key order (``values``), and per
    width of its offsets the bytes before them (header, size, field ids) and their packer."""

    __slots__ = ("heads", "metadata", "offsets", "values")

    def __init__(self, keys: tuple[str, ...]) -> None:
        ordered = sorted(keys, key=_utf16)
        n = len(ordered)
        self.metadata = _metadata(ordered)
        self.values: Callable[[dict[str, Any]], Sequence[Any]] = (
            itemgetter(*ordered) if n > 1 else lambda obj: tuple(obj.values()))
        id_width = _width(n - 1)
        ids = _uints(range(n), id_width)
        self.heads = tuple(b"".join((bytes((_OBJECT | ((n > 0xFF) << 4 | (id_width - 1) << 2
                                                    | (width - 1)) << 2,)), _count(n), ids))
                           for width in (1, 2, 3, 4))
        self.offsets = tuple(Struct(f"<{n + 1}{'BHxI'[width - 1]}").pack for width in (1, 2, 4))


_FLAT: dict[tuple[str, ...], _Keys] = {}
_MAX_FLAT = 4096  # sets of keys kept; a query has one or two per table


def _flat(keys: tuple[str, ...]) -> _Keys:
    if len(_FLAT) >= _MAX_FLAT:
        _FLAT.clear()
    found = _FLAT[keys] = _Keys(keys)
    return found


def encode(obj: Any) -> tuple[bytes, bytes]:
    """``obj`` (see the module docstring) as a variant's ``(value, metadata)``."""
    if type(obj) is dict:  # the hot path: a row of encoded values and nulls
        keys = tuple(obj)
        flat = _FLAT.get(keys) or _flat(keys)
        parts = flat.values(obj)
        if None in parts:
            parts = [NULL if v is None else v for v in parts]
        try:
            data = b"".join(parts)
        except TypeError:  # a JSON object or array: the general way
            pass
        else:
            offsets = (0, *accumulate(map(len, parts)))
            total = offsets[-1]
            if total <= 0xFF:
                return flat.heads[0] + flat.offsets[0](*offsets) + data, flat.metadata
            if total <= 0xFFFF:
                return flat.heads[1] + flat.offsets[1](*offsets) + data, flat.metadata
            if total <= 0xFFFFFF:
                return flat.heads[2] + _uints(offsets, 3) + data, flat.metadata
            return flat.heads[3] + flat.offsets[2](*offsets) + data, flat.metadata
    dictionary = sorted(set(_keys(obj)), key=_utf16)
    ids = {k: i for i, k in enumerate(dictionary)}
    return _value(obj, ids), _metadata(dictionary)


def plain(obj: Any) -> bytes:
    """``obj``, which holds no object, as a variant value (its metadata is an empty
    dictionary's)."""
    return _value(obj, {})


def _keys(obj: Any) -> Iterable[str]:
    """Every object key in ``obj``, depth first (repeats included)."""
    if type(obj) is dict:
        yield from obj
        for v in obj.values():
            if type(v) is dict or type(v) is list:
                yield from _keys(v)
    elif type(obj) is list:
        for v in obj:
            if type(v) is dict or type(v) is list:
                yield from _keys(v)


def _value(obj: Any, ids: dict[str, int]) -> bytes:
    kind = type(obj)
    if kind is bytes:
        return obj  # type: ignore[no-any-return]
    if obj is None:
        return NULL
    if kind is str:
        return string(obj)
    if kind is bool:
        return TRUE if obj else FALSE
    if kind is int:
        return integer(obj)
    if kind is float:
        return double(obj)
    if kind is list:
        return _container([_value(v, ids) for v in obj], None, 0)
    if kind is dict:
        fields = sorted(((ids[k], v) for k, v in obj.items()))
        width = _width(fields[-1][0]) if fields else 1
        return _container([_value(v, ids) for _, v in fields],
                          _uints([i for i, _ in fields], width), width)
    raise TypeError(f"no variant encoding for {kind.__name__} {obj!r:.40}")


def is_variant(arrow_type: pa.DataType) -> bool:
    """Whether ``arrow_type`` is :data:`VARIANT_ARROW` (its field metadata included, which a
    struct of two binary columns named so lacks)."""
    return arrow_type.equals(VARIANT_ARROW, check_metadata=True)  # type: ignore[no-any-return]


def variant_array(objs: Sequence[Any]) -> pa.StructArray:
    """``objs`` (``None`` for a null) as an Arrow column of :data:`VARIANT_ARROW`."""
    if not objs:
        return pa.array([], VARIANT_ARROW)
    values, metadata = zip(*[_NULL_PAIR if obj is None else encode(obj) for obj in objs],
                           strict=True)
    mask = pa.array([obj is None for obj in objs], pa.bool_()) if None in objs else None
    return pa.StructArray.from_arrays(
        [pa.array(values, pa.binary()), pa.array(metadata, pa.binary())],
        fields=list(VARIANT_ARROW), mask=mask)


_NULL_PAIR: Final = (NULL, _metadata(()))  # under a null: a valid variant all the same
