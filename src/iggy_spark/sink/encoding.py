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
    topic's real partition count with :func:`iggy_spark.sink.refusals.check_partition_id`.
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
above, in column order, byte for byte as orjson writes it (built column-wise by
:mod:`iggy_spark.sink.json_payloads`). Timestamps are ISO-8601: with a time zone, the UTC
instant with a ``Z`` suffix; without (``TIMESTAMP_NTZ``) no suffix; the fraction has the
column's precision (``.ffffff`` for Spark). Dates and times are ISO-8601, decimals exact
strings (``"12.50"``), binary base64, structs objects, arrays arrays, maps objects (non-string
keys written as strings). Non-finite floats become the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"``, as Spark's ``to_json`` writes them: silently writing ``null`` would lose them
and bare ``NaN`` is not JSON. Any other type (intervals...) fails with an error naming the
column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from xxhash import xxh3_128_digest, xxh3_128_intdigest

from iggy_spark.errors import EncodingError, PayloadTooLarge
from iggy_spark.sink.arrow_types import is_binary, is_text
from iggy_spark.sink.json_payloads import json_payloads
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
    text: bool = False
    """The payloads are UTF-8 text (the rows as JSON, or a string ``value`` column)."""
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
        text=columns.value not in names or is_text(batch.schema.field(columns.value).type),
        invalid=problems.rows,
    )


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """The column called ``name``, dictionary-decoded, or ``None`` if the batch has none."""
    if name not in batch.schema.names:
        return None
    array = batch.column(name)
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def _names(batch: pa.RecordBatch, name: str, rows: int) -> list[str | None]:
    array = _column(batch, name)
    if array is None:
        return [None] * rows
    if not is_text(array.type):
        raise EncodingError(name, None, f"must be a string column, found {array.type}")
    return cast("list[str | None]", array.to_pylist())


def _bytes(array: pa.Array) -> list[bytes | None]:
    return cast("list[bytes | None]",
                (array.cast(pa.binary()) if is_text(array.type) else array).to_pylist())


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
        if not (is_text(array.type) or is_binary(array.type)):
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
        return cast("list[Any]", array.to_pylist())
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
    if is_text(array.type) or is_binary(array.type):
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
        payloads = json_payloads(batch, columns.routing, options.json_columns, rows)
        if payloads and max(map(len, payloads)) > limit:
            for row, payload in enumerate(payloads):
                if len(payload) > limit:
                    problems(PayloadTooLarge("(the row as JSON)", row,
                                             _too_big(len(payload), limit)))
        return payloads
    if not (is_text(value.type) or is_binary(value.type)):
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
        or not is_text(keys.type)
        or not (is_text(values.type) or is_binary(values.type))
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
