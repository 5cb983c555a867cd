"""``payload_format``: JSON payloads parsed into rows of a given schema, in the executor.

Each column of the schema is the payload's top-level field of that name; a field the payload
lacks takes the message's own column of that name when there is one (``topic``, ``offset``,
...), else null. As in Spark's JSON reader, a string column receives a nested object or array
as its JSON text. ``pg_cdc`` is the change row of :mod:`connector_common.change_rows`: what an
``iggy_routed`` sink wrote from a ``pg_cdc`` query comes back as the row ``pg_cdc`` produced;
the sink sent ``id`` and ``partition_key`` as the message's id and partition, not in the
payload, so ``id`` is rebuilt (``<commit_lsn>:<seq>``) and ``partition_key`` stays null;
``position``, which the pipeline leaves out of the payload, is rebuilt from ``commit_lsn``,
``seq`` and ``op``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector_common.change_rows import position
from iggy_spark.source.errors import SourceError

__all__ = ["parsed_batch"]


def _cell(value: Any, text: bool) -> Any:
    if text and value is not None and not isinstance(value, str):
        return orjson.dumps(value).decode()  # a nested value, kept as its JSON text
    return value


def _change_ids(documents: Sequence[dict[str, Any]]) -> list[str | None]:
    """pg_cdc's id of each change, ``<commit_lsn>:<seq>`` (null for snapshot rows, whose id
    holds key values the payload does not keep apart)."""
    return [doc.get("id") or (f"{doc['commit_lsn']}:{doc['seq']}"
                              if doc.get("seq") is not None and doc.get("commit_lsn") else None)
            for doc in documents]


def _positions(
    topic: str, partition: int, documents: Sequence[dict[str, Any]]
) -> list[dict[str, int] | None]:
    """pg_cdc's position of each change, from its ``commit_lsn``, ``seq`` and ``op``."""
    try:
        return [position(doc.get("commit_lsn"), doc.get("seq"), doc.get("op"))
                for doc in documents]
    except (ValueError, TypeError, AttributeError) as exc:
        raise SourceError(topic, f"partition {partition}: a payload's commit_lsn and seq give "
                          f"no position: {exc}") from exc


def parsed_batch(schema: pa.Schema, change_rows: bool, own: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of ``schema`` that the JSON payloads of ``own`` (polled messages of one
    partition, their message columns) hold.

    Raises :class:`SourceError` naming the offset for a payload that is not a JSON object and
    the column for a value that does not fit its type: skipping them would lose data quietly.
    """
    topic, partition = own["topic"][0].as_py(), own["partition"][0].as_py()
    documents: list[dict[str, Any]] = []
    for offset, payload in zip(own["offset"].to_pylist(), own["payload"].to_pylist(),
                               strict=True):
        try:
            document = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            document = exc
        if not isinstance(document, dict):
            raise SourceError(topic, f"partition {partition} offset {offset}: the payload is "
                              "not a JSON object; read it with payload_format=binary")
        documents.append(document)
    columns = []
    for field in schema:
        name, text = field.name, pa.types.is_string(field.type)
        fallback = (own.column(name).to_pylist() if name in own.schema.names
                    else [None] * len(documents))
        if change_rows and name == "id":
            fallback = _change_ids(documents)
        elif change_rows and name == "position":
            fallback = _positions(topic, partition, documents)
        values = [_cell(doc[name], text) if name in doc else default
                  for doc, default in zip(documents, fallback, strict=True)]
        columns.append(_column(topic, partition, field, values))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _column(topic: str, partition: int, field: pa.Field, values: list[Any]) -> pa.Array:
    # Arrow would truncate 1.7 into an integer column and read true as 1.0: refused instead
    if pa.types.is_integer(field.type):
        odd = [v for v in values if isinstance(v, float) and not v.is_integer()]
    elif pa.types.is_floating(field.type):
        odd = [v for v in values if isinstance(v, bool)]
    else:
        odd = []
    if odd:
        raise SourceError(topic, f"partition {partition}: payload field {field.name!r} does "
                          f"not fit the column's type {field.type}: {odd[0]!r}")
    try:
        if pa.types.is_timestamp(field.type) and any(isinstance(v, str) for v in values):
            return pc.cast(pa.array(values, pa.string()), field.type)  # ISO-8601 text
        return pa.array(values, field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise SourceError(topic, f"partition {partition}: payload field {field.name!r} does "
                          f"not fit the column's type {field.type}: {exc}") from exc
