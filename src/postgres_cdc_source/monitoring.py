"""What a monitoring tool reads of a running ``pg_cdc`` query, from outside it.

A query's reader runs in a Python worker process on the driver; a ``StreamingQueryListener``
(:func:`pg_to_iggy.serve_metrics` is one) runs in the user's process, and reads it through this
face only:

* :meth:`SourceHealth.from_progress` on a source's ``latestOffset`` of a progress event: the
  slot's :class:`SlotHealth` and the reader's own figures, as the reader reported them
  (Spark 4.2+; ``None`` for another kind of source);
* :meth:`Backfills.from_progress` on a source's ``endOffset``: the backfills queued and the
  chunk that batch delivered, where the progress carries no report (Spark 4.0, 4.1);
* :func:`slot_reader`: a :class:`HealthReader` of the query's slot, read from
  ``pg_replication_slots`` on one connection kept between reads, for those versions too.

Every other module of the package is internal.
"""

from __future__ import annotations

from collections.abc import Mapping

from postgres_cdc_source.backfill.progress import Backfills
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.health import SlotHealth, SourceHealth
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication.diagnostics import HealthReader

__all__ = ["Backfills", "HealthReader", "SlotHealth", "SourceHealth", "slot_reader"]


def slot_reader(options: Mapping[str, str], purpose: str = "a slot reader") -> HealthReader:
    """A reader of the slot a query with these ``pg_cdc`` options reads (``dsn`` and ``slot``
    at least; the other connection options count too). It connects at its first read;
    :meth:`HealthReader.close` closes the connection.

    Raises :class:`~postgres_cdc_source.ConfigError` for options that are not valid ``pg_cdc``
    options, or ``mode=polling``, which reads no slot (the message names ``purpose``).
    """
    parsed = CdcOptions.from_options(options)
    if parsed.mode != "cdc":
        raise ConfigError("mode", f"{purpose} reads a query's slot; mode=polling has none")
    return HealthReader(parsed)
