"""``route()``: give each row a destination from a field inside its JSON payload.

For sources that carry their destination inside the data (webhooks, bridges from other
brokers): a dotted path walks nested JSON objects to a leaf, the leaf's value is looked up in a
static mapping, and the result fills the ``topic`` (and optionally ``stream``) columns that
``iggy_routed`` reads. Unmatched rows get the defaults, or null (then ``on_missing_destination``
decides). The mapping is frozen when the query is defined.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["route"]

_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")


def _load_mapping(mapping: Mapping[str, str] | str | Path) -> dict[str, str]:
    if isinstance(mapping, str | Path):
        try:
            loaded = json.loads(Path(mapping).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"route(): cannot read mapping file {str(mapping)!r}: {exc}") from None
    else:
        loaded = dict(mapping)
    if not isinstance(loaded, dict) or not loaded:
        raise ValueError("route(): the mapping must be a non-empty JSON object of value -> "
                         "'topic' or 'stream/topic'")
    for key, value in loaded.items():
        if not isinstance(value, str) or not value or value.count("/") > 1:
            raise ValueError(f"route(): mapping value for {key!r} must be 'topic' or "
                             f"'stream/topic', got {value!r}")
    return {str(k): v for k, v in loaded.items()}


def route(
    df: DataFrame,
    field: str,
    mapping: Mapping[str, str] | str | Path,
    *,
    json_column: str = "value",
    default_topic: str | None = None,
    default_stream: str | None = None,
) -> DataFrame:
    """Add ``stream``/``topic`` columns by looking ``field`` of ``json_column`` up in ``mapping``.

    ``field`` is a dotted path over JSON objects (``event.type``); arrays and keys containing
    dots are not supported. A mapping value ``"stream/topic"`` sets both columns; ``"topic"``
    sets the topic and leaves the stream to ``default_stream``. ``mapping`` may be a dict or the
    path of a JSON file holding one.
    """
    from pyspark.sql import functions as F

    segments = field.split(".")
    if not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ValueError(f"route(): bad field path {field!r}: use dot-separated names of "
                         "letters, digits, _ and -")
    if json_column not in df.columns:
        raise ValueError(f"route(): the DataFrame has no column {json_column!r}")
    table = _load_mapping(mapping)
    leaf = F.get_json_object(F.col(json_column).cast("string"), "$." + field)

    def lookup(part: int) -> Column:
        pairs = []
        for key, value in table.items():
            pieces = value.split("/")
            target = pieces[part] if len(pieces) == 2 else (pieces[0] if part == 1 else None)
            pairs += [F.lit(key), F.lit(target)]
        return F.create_map(*pairs)[leaf]

    return df.withColumns({
        "stream": F.coalesce(lookup(0), F.lit(default_stream)),
        "topic": F.coalesce(lookup(1), F.lit(default_topic)),
    })
