"""Arrow rows → Iggy message parts, column-wise: the sink's hot path, pure and I/O-free.

:func:`encode_batch` turns one ``pyarrow.RecordBatch`` into parallel Python lists (one entry
per row) that the writer groups by destination and hands to the SDK. Work is done per column
wherever Arrow can do it (casts, min/max checks, ``to_pylist``); Python touches single cells
only where the data needs it (non-finite floats, binary, maps, hashing string ids).

The row contract follows Spark's Kafka sink. Column names come from :class:`ColumnNames`:

``stream``, ``topic``
    Strings; null (or an absent column) means "missing", resolved by ``on_missing_destination``.
``partition_key`` (encodings ``bytes`` and ``key_u32``)
    ``bytes``: string (as UTF-8) or binary. Null or empty means no key (the server balances).
    Keys longer than Iggy's 255-byte limit are replaced by their 16-byte xxh3-128 digest, which
    keeps "same key, same partition". ``key_u32``: an integer in ``0..2**32-1``, sent as 4
    little-endian bytes (what the Rust SDK's ``messages_key_u32`` sends).
``partition_id`` (encoding ``partition_id``)
    Integer, passed through as is (null means balanced); the writer checks it against the
    topic's real partition count with :func:`iggy_spark.sink.admission.check_partition_id`.
``value``
    String (sent as UTF-8) or binary, sent as is; the row's other columns are then ignored.
    Must be non-null and non-empty: Iggy has no tombstones and refuses empty payloads. Without
    this column the payload is JSON, below.
``headers``
    ``map<string, string|binary>`` (or Kafka's ``array<struct<key, value>>``). Null values are
    left out (an Iggy header cannot be null); keys and values must be 1-255 bytes.
``id``
    Integer ids are used as is and must be in ``1..2**128-1``. String or binary ids are hashed
    with **xxh3-128, seed 0, over the UTF-8 bytes** (``xxhash.xxh3_128_intdigest``), so a
    replayed row gets the same id and consumers can deduplicate. This mapping is part of the
    sink's contract and must never change. Null, or no id column, gives 0: the SDK assigns a
    random id.

JSON payload (no ``value`` column): an object of every column that is not a routing column
above, in column order, byte for byte as orjson writes it (built column-wise: see
:func:`_json_payloads`). Timestamps are ISO-8601: with a time zone, the UTC
instant with a ``Z`` suffix; without (``TIMESTAMP_NTZ``) no suffix; the fraction has the
column's precision (``.ffffff`` for Spark). Dates and times are ISO-8601, decimals exact
strings (``"12.50"``), binary base64, structs objects, arrays arrays, maps objects (non-string
keys written as strings). Non-finite floats become the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"``, as Spark's ``to_json`` writes them: silently writing ``null`` would lose them
and bare ``NaN`` is not JSON. Any other type (intervals...) fails with an error naming the
column.
"""

from __future__ import annotations

import math
import re
from base64 import b64encode
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, cast

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from xxhash import xxh3_128_digest, xxh3_128_intdigest

from iggy_spark.errors import EncodingError, PayloadTooLarge
from iggy_spark.sink.options import (
    MAX_MESSAGE_BYTES,
    ColumnNames,
    FailurePolicy,
    KeyEncoding,
    RoutedOptions,
)

__all__ = ["MAX_KEY_BYTES", "MAX_PAYLOAD_BYTES", "EncodedBatch", "encode_batch", "message_id"]

MAX_KEY_BYTES = 255  # Iggy's limit for partition keys, header keys and header values
MAX_PAYLOAD_BYTES = MAX_MESSAGE_BYTES
"""Iggy's limit for one message's payload. The SDK refuses a larger one with a bare
``ValueError: Too big message payload``; checking here names the row, its size and the limit."""
_MAX_U32 = 2**32 - 1
_TIMESPEC = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
_FLOATS = (pa.float32(), pa.float64())

_Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class EncodedBatch:
    """The messages of one Arrow batch, column-wise: index ``i`` of every list is row ``i``.

    ``partitioning`` holds key bytes (encodings ``bytes``/``key_u32``), partition ids
    (``partition_id``) or ``None`` (let the server balance).
    """

    streams: list[str | None]
    topics: list[str | None]
    partitioning: list[bytes | int | None]
    payloads: list[bytes]
    headers: list[dict[str, str | bytes] | None]
    ids: list[int]
    keyed: bool = False
    """The batch has an id column: its rows say what each message is (0 in ``ids``: a null
    id), so a replay can skip what landed by id (:mod:`iggy_spark.sink.delivery`)."""
    invalid: dict[int, EncodingError] = field(default_factory=dict)
    """Rows that cannot become a message (null or oversize payload, bad header, id or key),
    collected instead of raised when bad rows have a dead-letter destination to go to; their
    entries in the other lists are placeholders."""

    def __len__(self) -> int:
        return len(self.payloads)


def message_id(value: str | bytes) -> int:
    """The stable 128-bit message id of a string or binary id (xxh3-128 of its UTF-8 bytes)."""
    return xxh3_128_intdigest(value.encode() if isinstance(value, str) else value)


class _Problems:
    """Where row-level problems go: raised at once, or (``collect``) kept per row."""

    def __init__(self, collect: bool) -> None:
        self.collect = collect
        self.rows: dict[int, EncodingError] = {}

    def __call__(self, error: EncodingError) -> None:
        if not self.collect or error.row is None:
            raise error
        self.rows.setdefault(error.row, error)


def encode_batch(batch: pa.RecordBatch, options: RoutedOptions) -> EncodedBatch:
    """Encode every row of ``batch``; raises :class:`EncodingError` naming a bad column/row.

    With ``on_admission_failure=dlq`` a bad *row* does not fail the batch: it is listed in
    :attr:`EncodedBatch.invalid` for the writer to dead-letter. A bad *column* (wrong type)
    always raises: every row would fail alike.
    """
    columns = options.columns
    names = batch.schema.names
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise EncodingError(twice, None, "appears twice in the DataFrame; rename one of them")
    rows = batch.num_rows
    problems = _Problems(options.on_admission_failure is FailurePolicy.DLQ)
    return EncodedBatch(
        streams=_names(batch, columns.stream, rows),
        topics=_names(batch, columns.topic, rows),
        partitioning=_partitioning(batch, columns, options.partition_key_encoding, rows,
                                   problems),
        payloads=_payloads(batch, columns, options, rows, problems),
        headers=_headers(batch, columns.headers, rows, problems),
        ids=_ids(batch, columns.id, rows, problems),
        keyed=columns.id in batch.schema.names,
        invalid=problems.rows,
    )


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """The column called ``name``, dictionary-decoded, or ``None`` if the batch has none."""
    if name not in batch.schema.names:
        return None
    array = batch.column(name)
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_binary(t: pa.DataType) -> bool:
    return (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _names(batch: pa.RecordBatch, name: str, rows: int) -> list[str | None]:
    array = _column(batch, name)
    if array is None:
        return [None] * rows
    if not _is_text(array.type):
        raise EncodingError(name, None, f"must be a string column, found {array.type}")
    return array.to_pylist()


def _bytes(array: pa.Array) -> list[bytes | None]:
    return (array.cast(pa.binary()) if _is_text(array.type) else array).to_pylist()


def _partitioning(
    batch: pa.RecordBatch, columns: ColumnNames, encoding: KeyEncoding, rows: int,
    problems: _Problems,
) -> list[Any]:
    if encoding is KeyEncoding.PARTITION_ID:
        used, unused = columns.partition_id, columns.partition_key
    else:
        used, unused = columns.partition_key, columns.partition_id
    if unused in batch.schema.names:
        raise EncodingError(unused, None, f"is not read with partition_key_encoding={encoding}; "
                            "drop the column or change the encoding")
    array = _column(batch, used)
    if array is None:
        return [None] * rows
    if encoding is KeyEncoding.BYTES:
        if not (_is_text(array.type) or _is_binary(array.type)):
            raise EncodingError(used, None, f"must be string or binary with partition_key_"
                                f"encoding=bytes (found {array.type}; key_u32 takes integers)")
        return [
            (key if len(key) <= MAX_KEY_BYTES else xxh3_128_digest(key)) if key else None
            for key in _bytes(array)
        ]
    if not pa.types.is_integer(array.type):
        raise EncodingError(used, None, f"must be an integer column with "
                            f"partition_key_encoding={encoding}, found {array.type}")
    if encoding is KeyEncoding.PARTITION_ID:
        return array.to_pylist()
    bad = _check_range(array, used, 0, _MAX_U32, "key_u32 keys", problems)
    return [None if key is None or i in bad else key.to_bytes(4, "little")
            for i, key in enumerate(array.to_pylist())]


def _check_range(
    array: pa.Array, column: str, low: int, high: int, what: str, problems: _Problems
) -> set[int]:
    """Rows whose value is outside ``low..high`` (each reported to ``problems``)."""
    bounds = pc.min_max(array).as_py()
    if bounds["min"] is None or (low <= bounds["min"] and bounds["max"] <= high):
        return set()
    values = array.to_pylist()
    bad = {i for i, v in enumerate(values) if v is not None and not low <= v <= high}
    for row in sorted(bad):
        problems(EncodingError(column, row, f"{what} must be in {low}..{high}, "
                               f"got {values[row]}"))
    return bad


def _ids(batch: pa.RecordBatch, name: str, rows: int, problems: _Problems) -> list[int]:
    array = _column(batch, name)
    if array is None:
        return [0] * rows
    if pa.types.is_integer(array.type):
        bad = _check_range(array, name, 1, 2**128 - 1, "integer message ids", problems)
        return [0 if v is None or i in bad else v for i, v in enumerate(array.to_pylist())]
    if _is_text(array.type) or _is_binary(array.type):
        return [0 if v is None else xxh3_128_intdigest(v) for v in _bytes(array)]
    raise EncodingError(name, None, f"must be an integer, string or binary column, "
                        f"found {array.type}")


def _payloads(
    batch: pa.RecordBatch, columns: ColumnNames, options: RoutedOptions, rows: int,
    problems: _Problems,
) -> list[bytes]:
    limit = options.max_message_bytes
    value = _column(batch, columns.value)
    if value is None:
        payloads = _json_payloads(batch, columns.routing, options.json_columns, rows)
        for row, payload in enumerate(payloads):
            if len(payload) > limit:
                problems(PayloadTooLarge("(the row as JSON)", row, _too_big(len(payload), limit)))
        return payloads
    if not (_is_text(value.type) or _is_binary(value.type)):
        raise EncodingError(columns.value, None, f"must be string or binary, found "
                            f"{value.type}; use to_json(...) or drop the column to send the "
                            "other columns as JSON")
    lengths = pc.fill_null(pc.binary_length(value), 0)
    bad = pc.or_(pc.equal(lengths, 0), pc.greater(lengths, limit))
    if not pc.any(bad).as_py():
        return cast(list[bytes], _bytes(value))  # no nulls: checked above
    sizes = lengths.to_pylist()
    for row in pc.indices_nonzero(bad).to_pylist():
        problems(PayloadTooLarge(columns.value, row, _too_big(sizes[row], limit)) if sizes[row]
                 else EncodingError(columns.value, row, "is null or empty; Iggy messages need "
                                    "a payload (filter such rows out first)"))
    return [b"" if v is None else v for v in _bytes(value)]


def _too_big(size: int, limit: int) -> str:
    return (f"payload of {size:,} bytes is over the limit of {limit:,} bytes per message "
            "(max_message_bytes); shrink or split such rows, or filter them out")


def _json_payloads(
    batch: pa.RecordBatch, routing: frozenset[str], json_columns: frozenset[str], rows: int
) -> list[bytes]:
    """Every row as the JSON object of its non-routing columns, in column order: byte for byte
    what ``orjson.dumps`` of the row as a dict writes, built column by column.

    Each column becomes an Arrow array of its values' JSON texts (Arrow casts numbers and
    formats dates; strings without anything to escape are quoted as they are; orjson writes the
    rest one value at a time), and one join per row writes the objects. Per row this costs a
    fraction of building a dict and dumping it, and the payloads come out as bytes objects of
    their own size: orjson's own output keeps a block of a few KB per payload, which the writer
    would hold until its flush (200 MiB for 6 MB of small payloads).
    """
    fields = [name for name in batch.schema.names if name not in routing]
    if not fields:
        return [b"{}"] * rows
    has_maps = any(_contains_map(batch.schema.field(name).type) for name in fields)
    option = orjson.OPT_NON_STR_KEYS if has_maps else 0
    parts: list[pa.Array | pa.Scalar] = []
    for number, name in enumerate(fields):
        opening = ("{" if number == 0 else ",") + orjson.dumps(name).decode() + ":"
        parts += [pa.scalar(opening, _JSON), _json_texts(batch.column(name), name,
                                                          name in json_columns, option)]
    objects = pc.binary_join_element_wise(*parts, _CLOSE, _NOTHING)
    return cast(list[bytes], objects.cast(pa.large_binary()).to_pylist())


_JSON = pa.large_string()  # the JSON texts of a batch can outgrow a 2 GB string array
_NULL, _QUOTE, _CLOSE, _NOTHING, _COMMA, _OPEN_LIST, _CLOSE_LIST = (
    pa.scalar(text, _JSON) for text in ("null", '"', "}", "", ",", "[", "]"))
_ESCAPED = re.compile(rb'[\x00-\x1f"\\]')
"""What a JSON string must escape, and all that orjson escapes (it writes UTF-8 as is)."""


def _json_texts(array: pa.Array, name: str, embedded: bool, option: int) -> pa.Array:
    """One payload column as the JSON text of each value (``null`` for nulls).

    ``embedded`` (a ``json_columns`` column): its text is JSON already and goes in as is.
    """
    t = array.type
    if embedded:
        if not _is_text(t):
            raise EncodingError(name, None, f"is listed in json_columns but is {t}, not a "
                                "string column of JSON text")
        return pc.fill_null(array.cast(_JSON), _NULL)
    if pa.types.is_dictionary(t):
        return _json_texts(array.dictionary_decode(), name, False, option)
    if _is_plain_text(t) and not _needs_escapes(array):
        return _quoted(array)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return pc.fill_null(array.cast(_JSON), _NULL)
    text = _formatted(array)
    if text is not None:
        return _quoted(text)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_plain_text(t.value_type):
        items = array.flatten()  # the items of the non-null lists, in order
        if not _needs_escapes(items):
            return _json_lists(array, _quoted(items))
    dumps = orjson.dumps
    return pa.array([dumps(value, option=option).decode() for value in _json_values(array, name)],
                    _JSON)


def _is_plain_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _quoted(text: pa.Array) -> pa.Array:
    """Strings that need no escapes as JSON strings; nulls as ``null``."""
    return pc.fill_null(
        pc.binary_join_element_wise(_QUOTE, text.cast(_JSON), _QUOTE, _NOTHING), _NULL)


def _json_lists(lists: pa.Array, items: pa.Array) -> pa.Array:
    """A list column as JSON arrays, given its items' JSON texts (``lists.flatten()`` order)."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0)
    offsets = pa.concat_arrays([pa.array([0], pa.int64()),
                                pc.cumulative_sum(lengths).cast(pa.int64())])
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
        return pc.binary_join_element_wise(text, "Z", "") if t.tz else text
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_decimal(t):
        return array.cast(pa.string())
    return None


def _json_values(array: pa.Array, name: str) -> list[Any]:
    """A payload column Arrow cannot write as JSON texts (floats, binary, nested values, strings
    with characters to escape...) as JSON-ready Python values, for orjson."""
    t = array.type
    if t in _FLOATS and pc.all(pc.is_finite(array)).as_py() is not False:
        return array.to_pylist()
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
    if pa.types.is_null(t) or pa.types.is_boolean(t) or pa.types.is_integer(t) or _is_text(t):
        return None
    if t in _FLOATS:
        return _finite
    if _is_binary(t):
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


def _headers(
    batch: pa.RecordBatch, name: str, rows: int, problems: _Problems
) -> list[dict[str, str | bytes] | None]:
    array = _column(batch, name)
    if array is None:
        return [None] * rows
    keys, values = _header_entries(array, name)
    offsets = array.offsets.to_pylist()  # absolute positions into the entry arrays
    start = offsets[0]
    keys = keys.slice(start, offsets[-1] - start)
    values = values.slice(start, offsets[-1] - start)
    pairs = list(zip(keys.to_pylist(), values.to_pylist(), strict=True))
    spans = zip(offsets, offsets[1:], array.is_valid().to_pylist(), strict=False)
    if keys.null_count == values.null_count == 0 and _within_limits(keys, values):
        # Fast path: nothing to drop or check cell by cell.
        return [dict(pairs[a - start : b - start]) if ok and b > a else None for a, b, ok in spans]
    result: list[dict[str, str | bytes] | None] = []
    for row, (a, b, ok) in enumerate(spans):
        headers = {k: v for k, v in pairs[a - start : b - start] if v is not None} if ok else {}
        wrong = [p for p in (*headers, *headers.values()) if not _header_part_ok(p)][:1]
        if wrong:
            problems(EncodingError(name, row, f"header keys and values must be 1-"
                                   f"{MAX_KEY_BYTES} bytes long, got {wrong[0]!r:.60}"))
            headers = {}
        result.append(headers or None)
    return result


def _header_entries(array: pa.Array, name: str) -> tuple[pa.Array, pa.Array]:
    """The flat key and value arrays of a headers column, whose type is checked here."""
    t = array.type
    if pa.types.is_map(t):
        keys, values = array.keys, array.items
    elif (
        (pa.types.is_list(t) or pa.types.is_large_list(t))
        and pa.types.is_struct(t.value_type)
        and sorted(f.name for f in t.value_type) == ["key", "value"]
    ):
        entries = array.values
        fields = dict(zip((f.name for f in t.value_type), entries.flatten(), strict=True))
        keys, values = fields["key"], fields["value"]
    else:
        keys = values = None
    if (
        keys is None
        or values is None
        or not _is_text(keys.type)
        or not (_is_text(values.type) or _is_binary(values.type))
    ):
        raise EncodingError(name, None, f"must be map<string, string> (or binary values), "
                            f"found {t}")
    return keys, values


def _within_limits(*arrays: pa.Array) -> bool:
    """Whether every entry of ``arrays`` is 1 to MAX_KEY_BYTES bytes long (nulls skipped)."""
    for array in arrays:
        bounds = pc.min_max(pc.binary_length(array)).as_py()
        if bounds["min"] is not None and not 1 <= bounds["min"] <= bounds["max"] <= MAX_KEY_BYTES:
            return False
    return True


def _header_part_ok(part: object) -> bool:
    if isinstance(part, str):
        part = part.encode()
    return isinstance(part, bytes) and 0 < len(part) <= MAX_KEY_BYTES
