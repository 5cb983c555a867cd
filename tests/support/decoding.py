"""Helpers the decoder tests share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from postgres_cdc_source.decoding import Change, Event

__all__ = ["changes", "loads"]


def changes(events: Sequence[Event]) -> list[Change]:
    return [e for e in events if type(e) is Change]


def loads(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)
