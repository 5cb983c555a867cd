"""What the ``iggy`` source reports in Spark's progress events: its partitions' latest offsets
and lag, the channel from the driver-side reader to monitoring.

``reportLatestOffset`` runs in a Python worker process next to the driver; Spark shows what it
returns only in progress events (``sources[].latestOffset``), never compares or stores it, so it
carries a small document, recognised by ``"source": "iggy"``::

    {"source": "iggy", "latest": {"orders": {"0": 120}}, "lag": {"orders": {"0": 20}}}

``lag`` is, per partition, the messages past the end of the batch being planned (latest offset
minus the offset the batch reads to, which is the committed offset once it commits).

Spark 4.0 and 4.1 never ask for this report; their progress shows the batch's ``endOffset``
(:func:`end_from_progress`), which a listener that knows the source's options compares with the
partitions' latest offsets itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from iggy_spark.source.offsets import Position, behind, from_json, to_json

__all__ = ["end_from_progress", "lag_from_progress", "report"]

_KIND = "iggy"


def report(latest: Mapping[Position, int], end: Mapping[Position, int]) -> dict[str, Any]:
    """The progress document for a batch planned to ``end`` while partitions ended at
    ``latest``."""
    return {"source": _KIND, "latest": to_json(latest), "lag": to_json(behind(end, latest))}


def lag_from_progress(latest: str | Mapping[str, Any] | None) -> dict[str, dict[str, int]] | None:
    """The lag per topic and partition in a source's ``latestOffset`` from a progress event,
    or ``None`` when another kind of source wrote it."""
    try:
        data = json.loads(latest) if isinstance(latest, str) else latest
    except ValueError:
        return None
    if not isinstance(data, Mapping) or data.get("source") != _KIND:
        return None
    try:
        return to_json(from_json(data.get("lag")))
    except ValueError:
        return None


def end_from_progress(end: str | None) -> dict[Position, int] | None:
    """The offsets in a source's ``endOffset`` from a progress event, or ``None`` when it is not
    an offset map (a ``pg_cdc`` offset, say)."""
    try:
        return from_json(json.loads(end)) if end else None
    except ValueError:
        return None
