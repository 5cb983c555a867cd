"""Carry a ledger kept next to a local checkpoint (versions before the control topic) into
the query's control topic, once, so a query restarted on the new version keeps its admitted
destinations, breakers and counters, and a batch those versions started but never committed
is still replayed as one (its tasks read what landed)."""

from __future__ import annotations

import threading
from pathlib import Path

from iggy_spark.connection import IggyConnection
from iggy_spark.sink.control_records import EVERY_TASK, LedgerRecord, Start
from iggy_spark.sink.control_topic import ControlTopic, checkpoint_query_id
from iggy_spark.sink.logs import log_batch
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.sink.report import Ledger, ledger_path

__all__ = ["migrate_once"]

_checked: set[tuple[str, str]] = set()
_lock = threading.Lock()


def migrate_once(options: RoutedOptions, checkpoint: str | None) -> None:
    """Driver side: if ``checkpoint`` (the ``checkpointLocation`` option) is a local folder
    holding an old ledger and the query's control topic holds none, append it there.

    Checked once per driver process and checkpoint: Spark builds a writer for every batch.
    """
    path = ledger_path(checkpoint)
    if path is None or checkpoint is None:
        return
    with _lock:
        if (checkpoint, options.state_stream) in _checked:
            return
        _checked.add((checkpoint, options.state_stream))
    query = checkpoint_query_id(str(path.parent.parent))
    if query is None or not path.exists():
        return
    control = ControlTopic.of_query(IggyConnection.shared(options.url), options.state_stream,
                                    query, timeout=options.send_timeout)
    view = control.read()
    if view is not None and view.ledger is not None:
        return
    if view is None:
        control.create()
    ledger = Ledger.from_file(Path(path))
    control.append(LedgerRecord(ledger.data))
    for batch in _started(path.parent / "started"):
        if batch > ledger.last_batch:
            control.append(Start(batch, EVERY_TASK, 0))
    log_batch(f"iggy_routed: the ledger at {path} (through batch {ledger.last_batch}) now "
              f"lives in the control topic {control}; the file is no longer read or written")


def _started(markers: Path) -> list[int]:
    """The batches whose "started" marker those versions wrote (one file per batch id)."""
    try:
        return sorted(int(p.name) for p in markers.iterdir() if p.name.isdigit())
    except OSError:
        return []
