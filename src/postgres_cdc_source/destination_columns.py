"""Fill the ``stream``/``topic``/``partition_key`` columns from a change, per the routing options.

So a CDC stream can feed ``iggy_routed`` directly: ``topic_from=table`` sends each table to its
own topic, ``topic_from=<column>`` sends each row by a value it carries (an event type, a tenant).

A column is read from the decoded values the decoder kept (:attr:`Change.values`), never by
parsing the JSON text again: per column, the new row's value, else the old row's (``REPLICA
IDENTITY FULL``), else the key's. A change that carries the column nowhere (a delete under the
default identity routed by a non-key column) gets ``default_stream``/``default_topic``, which
the options require alongside a column route.

A logical message (op ``message``) has no schema or table: ``topic_from=table`` sends it to the
topic named by its prefix, ``stream_from=schema`` to ``default_stream``, ``partition_key_from=
key`` by its key ``{"prefix": ...}``; a column route reads its ``prefix``/``content`` fields.

With ``row_format=struct`` the values and the key are the struct's; each is turned back into
the JSON mode's value first, as the row format says
(:meth:`~postgres_cdc_source.rows.RowFormat.value_json`,
:meth:`~postgres_cdc_source.rows.RowFormat.key_text`), so a row goes where the JSON mode sends
it, whichever format the query reads.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pyarrow as pa

from connector_common.arrow_values import repeated
from postgres_cdc_source.decoding import MESSAGE, Change, message_prefix
from postgres_cdc_source.decoding.blocks import ChangeBlock
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows import RowFormat
from postgres_cdc_source.rows.json.format import JSON_ROWS

__all__ = ["Router"]

Destination = tuple[str | None, str | None, str | None]
_Pick = Callable[[Change], "str | None"]


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _picker(spec: str | None, builtin: str, attr: _Pick, rows: RowFormat) -> _Pick | None:
    if spec is None:
        return None
    if spec == builtin:
        return attr
    as_json = rows.value_json(spec)

    def column(change: Change) -> str | None:
        values = change.values
        if not values:
            return None
        value = values.get(spec)
        return _as_text(value if value is None or as_json is None else as_json(value))

    return column


def _key_text(rows: RowFormat) -> _Pick:
    """A change's key as the JSON mode's text."""
    text = rows.key_text()
    if text is None:
        return lambda c: c.key
    return lambda c: text(c.key)


def _table_or_prefix(change: Change) -> str | None:
    return message_prefix(change) if change.op == MESSAGE else change.table


class Router:
    """Compute a change's destination columns; built once per read from :class:`CdcOptions`."""

    def __init__(self, options: CdcOptions, rows: RowFormat = JSON_ROWS) -> None:
        self._stream = _picker(options.stream_from, "schema", lambda c: c.schema, rows)
        self._topic = _picker(options.topic_from, "table", _table_or_prefix, rows)
        self._key = _picker(options.partition_key_from, "key", _key_text(rows), rows)
        self._default_stream = options.default_stream
        self._default_topic = options.default_topic
        self._specs = (options.stream_from, options.topic_from, options.partition_key_from)
        self.by_column = any(
            spec is not None and spec != builtin
            for spec, builtin in ((options.stream_from, "schema"), (options.topic_from, "table"),
                                  (options.partition_key_from, "key"))
        )
        """Whether a route reads a row column (:attr:`Change.values`), not only names/key."""
        self.active = any(
            x is not None
            for x in (
                options.stream_from,
                options.topic_from,
                options.partition_key_from,
                options.default_stream,
                options.default_topic,
            )
        )

    def route(self, change: Change) -> Destination:
        stream = self._stream(change) if self._stream else None
        topic = self._topic(change) if self._topic else None
        key = self._key(change) if self._key else None
        return (
            stream if stream is not None else self._default_stream,
            topic if topic is not None else self._default_topic,
            key,
        )

    def block_columns(self, block: ChangeBlock) -> tuple[pa.Array, pa.Array, pa.Array]:
        """``stream``, ``topic`` and ``partition_key`` of a block's changes, which
        :meth:`route` would give each of them: a block holds row changes, and is made only when
        no route reads a column (:attr:`by_column`), nor, with ``row_format=struct`` (whose
        block's key is a struct), the key."""
        return self.columns_of(len(block), block.schema, block.table, block.key)

    def columns_of(self, count: int, schema: pa.Array, table: pa.Array, key: pa.Array
                   ) -> tuple[pa.Array, pa.Array, pa.Array]:
        """``stream``, ``topic`` and ``partition_key`` of ``count`` rows of the JSON mode, of
        the tables ``schema.table`` and with keys ``key`` (JSON text), routed by name or key
        only (never :attr:`by_column`), as :meth:`route` routes each."""
        assert not self.by_column
        stream_from, topic_from, key_from = self._specs
        return (
            _filled(schema if stream_from == "schema" else None, self._default_stream, count),
            _filled(table if topic_from == "table" else None, self._default_topic, count),
            key if key_from == "key" else pa.nulls(count, pa.string()),
        )


def _filled(column: pa.Array | None, default: str | None, count: int) -> pa.Array:
    """``column`` (never null), or ``default`` for each of ``count`` changes."""
    if column is not None:
        return column
    if default is None:
        return pa.nulls(count, pa.string())
    return repeated(default, count)
