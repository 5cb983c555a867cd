"""Fill the ``stream``/``topic``/``partition_key`` columns from a change, per the routing options.

So a CDC stream can feed ``iggy_routed`` directly: ``topic_from=table`` sends each table to its
own topic, ``topic_from=<column>`` sends each row by a value it carries (an event type, a tenant).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from postgres_cdc_source.decoding import Change
from postgres_cdc_source.options import CdcOptions

__all__ = ["Router"]

Destination = tuple[str | None, str | None, str | None]
_Pick = Callable[[Change, "dict[str, object] | None"], "str | None"]


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _row_of(change: Change) -> dict[str, object] | None:
    """The row a column is read from: the new row, else the old one, else the key."""
    text = change.after or change.before or change.key
    row = orjson.loads(text) if text else None
    return row if isinstance(row, dict) else None


class Router:
    """Compute a change's destination columns; built once per read from :class:`CdcOptions`."""

    def __init__(self, options: CdcOptions) -> None:
        self._stream = self._picker(options.stream_from, "schema", lambda c: c.schema)
        self._topic = self._picker(options.topic_from, "table", lambda c: c.table)
        self._key = self._picker(options.partition_key_from, "key", lambda c: c.key)
        self._default_stream = options.default_stream
        self._default_topic = options.default_topic
        self._needs_row = any(
            spec not in (None, builtin)
            for spec, builtin in (
                (options.stream_from, "schema"),
                (options.topic_from, "table"),
                (options.partition_key_from, "key"),
            )
        )
        self.active = self._needs_row or any(
            x is not None
            for x in (
                options.stream_from,
                options.topic_from,
                options.partition_key_from,
                options.default_stream,
                options.default_topic,
            )
        )

    @staticmethod
    def _picker(
        spec: str | None, builtin: str, attr: Callable[[Change], str | None]
    ) -> _Pick | None:
        if spec is None:
            return None
        if spec == builtin:
            return lambda change, row: attr(change)
        return lambda change, row: _as_text(row.get(spec)) if row is not None else None

    def route(self, change: Change) -> Destination:
        row = _row_of(change) if self._needs_row else None
        stream = self._stream(change, row) if self._stream else None
        topic = self._topic(change, row) if self._topic else None
        key = self._key(change, row) if self._key else None
        return (
            stream if stream is not None else self._default_stream,
            topic if topic is not None else self._default_topic,
            key,
        )
