"""The JSON payload of a row sent without a ``value`` column, built column by column.

The object holds every column that is not a routing column, in column order, byte for byte as
``orjson.dumps`` of the row as a dict writes it; how each type is written is part of the row
contract (:mod:`iggy_spark.sink.encoding`). Arrow formats what it can for a whole column at once
(numbers, dates and times, decimals, strings with nothing to escape, lists of such strings);
orjson writes the rest one value at a time, after :func:`_converter` made it JSON-ready. The
rows' objects are then joined from those texts: by the compiled core where it is installed
(:mod:`connector_common.compiled_core`), else by Arrow; both write the same bytes.
"""

from __future__ import annotations

import math
import re
from base64 import b64encode
from collections.abc import Callable
from datetime import UTC
from typing import Any, cast

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector_common import compiled_core
from connector_common.arrow_values import encoded_strings, int64s, string
from iggy_spark.errors import EncodingError
from iggy_spark.sink.arrow_types import is_binary, is_text

__all__ = ["json_payloads"]

_TIMESPEC = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
_FLOATS = (pa.float32(), pa.float64())

_Convert = Callable[[Any], Any]


def json_payloads(
    batch: pa.RecordBatch, routing: frozenset[str], json_columns: frozenset[str], rows: int
) -> list[bytes]:
    """Every row as the JSON object of its non-routing columns, in column order: byte for byte
    what ``orjson.dumps`` of the row as a dict writes, built column by column.

    Each column becomes an Arrow array of its values' JSON texts (Arrow casts numbers and
    formats dates; orjson writes what Arrow cannot, one value at a time) or of strings, and
    the objects are joined from those: row by row in the compiled core, which writes the
    strings as orjson does, or with one Arrow join per row (strings without anything to escape
    quoted as they are, orjson writing the others). Per row this costs a fraction of building a
    dict and dumping it, and the payloads come out as bytes objects of their own size:
    orjson's own output keeps a block of a few KB per payload, which the writer would hold
    until its flush (200 MiB for 6 MB of small payloads).
    """
    fields = [name for name in batch.schema.names if name not in routing]
    if not fields:
        return [b"{}"] * rows
    has_maps = any(_contains_map(batch.schema.field(name).type) for name in fields)
    option = orjson.OPT_NON_STR_KEYS if has_maps else 0
    columns = [(("{" if number == 0 else ",") + orjson.dumps(name).decode() + ":",
                *_json_texts(batch.column(name), name, name in json_columns, option))
               for number, name in enumerate(fields)]
    core = compiled_core.core()
    if core is not None:
        return cast(list[bytes], core.json_objects(
            [(opening.encode(), strings, *_buffers(texts))
             for opening, strings, texts in columns],
            rows))
    parts: list[pa.Array | pa.Scalar] = []
    for opening, strings, texts in columns:
        parts += [string(opening, _JSON), _json(strings, texts)]
    objects = pc.binary_join_element_wise(*parts, _CLOSE, _NOTHING)
    return cast(list[bytes], objects.cast(pa.large_binary()).to_pylist())


def _buffers(texts: pa.Array) -> tuple[pa.Buffer | None, pa.Buffer, pa.Buffer | None, int]:
    """A column of JSON texts as the core takes it: a large_string array's validity, offsets
    and data buffers, and its offset into them."""
    large = texts.cast(_JSON)
    validity, offsets, data = large.buffers()
    return (validity if large.null_count else None), offsets, data, large.offset


_JSON = pa.large_string()  # the JSON texts of a batch can outgrow a 2 GB string array
_NULL, _QUOTE, _CLOSE, _NOTHING, _COMMA, _OPEN_LIST, _CLOSE_LIST = (
    string(text, _JSON) for text in ("null", '"', "}", "", ",", "[", "]"))
_Z, _EMPTY, _ZERO = string("Z"), string(""), int64s([0])[0]
_ESCAPED = re.compile(rb'[\x00-\x1f"\\]')
"""What a JSON string must escape, and all that orjson escapes (it writes UTF-8 as is)."""


def _json_texts(array: pa.Array, name: str, embedded: bool, option: int
                ) -> tuple[bool, pa.Array]:
    """One payload column as the JSON text of each value, or (``True`` first) as strings, to
    be written as JSON strings; a null stays null (``null`` in the object).

    ``embedded`` (a ``json_columns`` column): its text is JSON already and goes in as is.
    """
    t = array.type
    if embedded:
        if not is_text(t):
            raise EncodingError(name, None, f"is listed in json_columns but is {t}, not a "
                                "string column of JSON text")
        return False, array
    if pa.types.is_dictionary(t):
        return _json_texts(array.dictionary_decode(), name, False, option)
    if _is_plain_text(t):
        return True, array
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return False, array.cast(_JSON)
    text = _formatted(array)
    if text is not None:
        return True, text
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_plain_text(t.value_type):
        if array.null_count == len(array):  # pg_cdc's `unchanged`, most of the time
            return False, pa.nulls(len(array), _JSON)
        items = array.flatten()  # the items of the non-null lists, in order
        if not _needs_escapes(items):
            return False, _json_lists(array, _quoted(items))
    return False, _dumped(_json_values(array, name), option)


def _json(strings: bool, texts: pa.Array) -> pa.Array:
    """A column's JSON texts (what :func:`_json_texts` gave, ``strings`` written as JSON
    strings), ``null`` for each null: the part of each row's object Arrow joins."""
    if not strings:
        return _filled(texts)
    if not _needs_escapes(texts):
        return _quoted(texts)
    return _dumped(texts.to_pylist(), 0)


def _dumped(values: list[Any], option: int) -> pa.Array:
    """JSON-ready values as orjson writes them."""
    dumps = orjson.dumps
    return encoded_strings([dumps(value, option=option) for value in values], _JSON)


def _is_plain_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _quoted(text: pa.Array) -> pa.Array:
    """Strings that need no escapes as JSON strings; nulls as ``null``."""
    return _filled(pc.binary_join_element_wise(_QUOTE, text.cast(_JSON), _QUOTE, _NOTHING))


def _filled(texts: pa.Array) -> pa.Array:
    """JSON texts with ``null`` for each null."""
    return pc.fill_null(texts.cast(_JSON), _NULL)


def _json_lists(lists: pa.Array, items: pa.Array) -> pa.Array:
    """A list column as JSON arrays, given its items' JSON texts (``lists.flatten()`` order)."""
    lengths = pc.fill_null(pc.list_value_length(lists).cast(pa.int64()), _ZERO)
    offsets = pa.concat_arrays([int64s([0]), pc.cumulative_sum(lengths)])
    joined = pc.binary_join(pa.LargeListArray.from_arrays(offsets, items, mask=lists.is_null()),
                            _COMMA)
    return pc.fill_null(pc.binary_join_element_wise(_OPEN_LIST, joined, _CLOSE_LIST, _NOTHING),
                        _NULL)


def _needs_escapes(array: pa.Array) -> bool:
    """Whether a string array's characters may need escaping in JSON (its whole data buffer
    is searched at once: bytes outside the array's slice can only make this say yes)."""
    data = array.buffers()[2]
    return data is not None and _ESCAPED.search(memoryview(data)) is not None


def _formatted(array: pa.Array) -> pa.Array | None:
    """A temporal or decimal column as text, formatted by Arrow in one pass (several times
    faster than building ``datetime`` objects; :func:`_converter` formats nested ones
    identically); ``None`` for other types."""
    t = array.type
    if pa.types.is_timestamp(t):
        naive = array.view(pa.timestamp(t.unit))  # a zoned column stores UTC instants
        text = pc.replace_substring(naive.cast(pa.string()), " ", "T", max_replacements=1)
        return pc.binary_join_element_wise(text, _Z, _EMPTY) if t.tz else text
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_decimal(t):
        return array.cast(pa.string())
    return None


def _json_values(array: pa.Array, name: str) -> list[Any]:
    """A payload column Arrow cannot write as JSON texts (floats, binary, nested values, strings
    with characters to escape...) as JSON-ready Python values, for orjson."""
    t = array.type
    if t in _FLOATS and pc.all(pc.is_finite(array)).as_py() is not False:
        return cast("list[Any]", array.to_pylist())
    convert = _converter(t, name)
    values = array.to_pylist()
    return values if convert is None else [convert(v) for v in values]


def _contains_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    return any(_contains_map(t.field(i).type) for i in range(t.num_fields))


def _finite(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "NaN" if value != value else _NON_FINITE[value]


def _converter(t: pa.DataType, column: str) -> _Convert | None:
    """How to make ``to_pylist()`` values of type ``t`` orjson-ready; ``None`` if they are."""
    if pa.types.is_null(t) or pa.types.is_boolean(t) or pa.types.is_integer(t) or is_text(t):
        return None
    if t in _FLOATS:
        return _finite
    if is_binary(t):
        return lambda v: None if v is None else b64encode(v).decode("ascii")
    if pa.types.is_decimal(t):
        return lambda v: None if v is None else format(v, "f")
    if pa.types.is_date(t):
        return lambda v: None if v is None else v.isoformat()
    if (pa.types.is_timestamp(t) or pa.types.is_time(t)) and t.unit in _TIMESPEC:
        return _temporal(t)
    if pa.types.is_dictionary(t):
        return _converter(t.value_type, column)
    if pa.types.is_struct(t):
        return _struct_converter(t, column)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = _converter(t.value_type, column)
        return None if item is None else _list_converter(item)
    if pa.types.is_map(t):
        key = _converter(t.key_type, column) or _identity
        item = _converter(t.item_type, column) or _identity
        return lambda v: None if v is None else {key(k): item(x) for k, x in v}
    raise EncodingError(column, None, f"values of type {t} cannot be written as JSON; cast "
                        "them to a string or number in the query")


def _identity(value: Any) -> Any:
    return value


def _list_converter(item: _Convert) -> _Convert:
    return lambda v: None if v is None else [item(x) for x in v]


def _temporal(t: pa.DataType) -> _Convert:
    spec = _TIMESPEC[t.unit]
    if pa.types.is_timestamp(t) and t.tz:
        return lambda v: None if v is None else (
            v.astimezone(UTC).replace(tzinfo=None).isoformat(timespec=spec) + "Z"
        )
    return lambda v: None if v is None else v.isoformat(timespec=spec)


def _struct_converter(t: pa.StructType, column: str) -> _Convert | None:
    fields = {t.field(i).name: _converter(t.field(i).type, column) for i in range(t.num_fields)}
    active = {name: convert for name, convert in fields.items() if convert is not None}
    if not active:
        return None

    def convert(value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        return {k: (active[k](v) if k in active else v) for k, v in value.items()}

    return convert
