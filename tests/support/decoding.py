"""Helpers the decoder tests share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson

from postgres_cdc_source.decoding import Change, Event, PeekRow
from postgres_cdc_source.decoding.blocks import ChangeBlock

__all__ = ["BlockCount", "changes", "fetched", "loads"]


def changes(events: Sequence[Event]) -> list[Change]:
    return [e for e in events if type(e) is Change]


def loads(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def fetched(rows: Sequence[PeekRow], size: int) -> list[list[PeekRow]]:
    """``rows`` as the peek's fetches of ``size`` rows, which the compiled core reads."""
    return [list(rows[i:i + size]) for i in range(0, len(rows), size)]


class BlockCount:
    """Passes a compiled read's events on (``count(events)``), counting in :attr:`taken` the
    changes the core took in blocks."""

    def __init__(self) -> None:
        self.taken = 0

    def __call__(self, events: Iterable[Any]) -> Iterator[Any]:
        for event in events:
            if isinstance(event, ChangeBlock):
                self.taken += len(event)
            yield event
