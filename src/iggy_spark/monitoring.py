"""What a monitoring tool reads of running ``iggy_routed`` and ``iggy`` queries, from outside them.

A query's sink commits, and its source plans, in Python worker processes; a
``StreamingQueryListener`` (:func:`pg_to_iggy.serve_metrics` is one) runs in the user's process
and reads them through this face only:

* **the sink**: :class:`LedgerReader` reads a query's newest ledger from its control topic in
  Iggy (where the sink's commit appends it after every batch) as :class:`SinkFigures`, the
  query's totals since it first ran;
* **the source**: :func:`lag_from_progress` finds each partition's lag in a source's
  ``latestOffset`` of a progress event (Spark 4.2+), :func:`end_from_progress` the offsets a
  batch ended at in its ``endOffset`` (Spark 4.0, 4.1), which a :class:`LagReader` compares
  with the partitions' latest offsets, asked of the source's server.

Every module below :mod:`iggy_spark.sink` and :mod:`iggy_spark.source` is internal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from iggy_spark.connection import IggyConnection
from iggy_spark.iggy_url import IggyUrl
from iggy_spark.sink.control_topic import ControlTopic
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.sink.report import CREATE_BUCKETS
from iggy_spark.source import catalog
from iggy_spark.source.offsets import Position, behind, to_json
from iggy_spark.source.options import SourceOptions
from iggy_spark.source.progress import end_from_progress, lag_from_progress

__all__ = [
    "STATE_STREAM",
    "LagReader",
    "LedgerReader",
    "Position",
    "SinkFigures",
    "end_from_progress",
    "lag_from_progress",
]

STATE_STREAM = RoutedOptions.state_stream
"""The sink's ``state_stream`` by default: the stream of every query's control topic."""


@dataclass(frozen=True)
class SinkFigures:
    """A query's sink, as its newest ledger says: totals over every committed batch."""

    messages_routed: int
    """Messages Iggy acknowledged, over every destination (the dead letters included)."""
    rejected: dict[str, int]
    """Rows refused a destination, by reason (the ``iggy_spark.reason`` of a dead letter)."""
    missing: dict[str, int]
    """Rows with a null stream or topic, by ``on_missing_destination`` action."""
    dead_lettered: int
    dropped: int
    replay_skipped: int
    """Messages a replayed batch found already in Iggy and did not send again."""
    at_least_once_fallbacks: int
    """Groups a replay could not decide on within ``delivery_scan_messages``, sent in full."""
    state_lost: int
    """Tasks that found the control topic deleted or without a ledger."""
    destinations_active: int
    """Destinations admitted (counted against ``admission.max_destinations``)."""
    breakers_open: int
    """Destinations whose circuit breaker is not closed: the sink is degraded while above 0."""
    create_buckets: tuple[tuple[float, int], ...]
    """The destination-creation latency histogram: (upper bound in seconds, creations that took
    at most that long), cumulative."""
    create_count: int
    create_seconds: float
    """The destinations created, and the seconds they took in all."""

    @classmethod
    def from_ledger(cls, data: Mapping[str, Any]) -> SinkFigures:
        """The figures of a ledger's JSON data (:attr:`iggy_spark.read_ledger`'s ``data``)."""
        entries = data["destinations"].values()
        delivery = data["delivery"]
        latency = data["create_latency"]
        return cls(
            messages_routed=sum(e["messages"] for e in entries),
            rejected=dict(data["rejected"]),
            missing=dict(data["missing"]),
            dead_lettered=data["dead_lettered"],
            dropped=data["dropped"],
            replay_skipped=delivery["resumed"],
            at_least_once_fallbacks=delivery["at_least_once"],
            state_lost=delivery.get("state_lost", 0),
            destinations_active=sum(1 for e in entries if e.get("admitted")),
            breakers_open=sum(1 for e in entries if e["breaker"] != "closed"),
            create_buckets=tuple(zip(CREATE_BUCKETS, latency["buckets"], strict=True)),
            create_count=latency["count"],
            create_seconds=latency["sum"],
        )


class LedgerReader:
    """Reads queries' ledgers from their control topics on the server of ``url`` (the sink's
    ``url`` option; its user needs to poll ``state_stream``), on the process's shared connection
    to it. Raises :class:`~iggy_spark.ConfigError` for a ``url`` that is not one."""

    def __init__(self, url: str, state_stream: str = STATE_STREAM, *,
                 timeout: float = 10.0) -> None:
        self.url = IggyUrl.parse(url)
        self.state_stream = state_stream
        self.timeout = timeout
        """Seconds a read may retry for before it fails."""

    def read(self, query_id: str) -> SinkFigures | None:
        """The figures of the query ``query_id`` (Spark's id); ``None`` for a query that has no
        control topic there (it writes to another sink) or whose topic holds no ledger yet.
        Raises :class:`~iggy_spark.StateError` or :class:`~iggy_spark.ServerError` when the
        server cannot be read within :attr:`timeout`."""
        view = ControlTopic.of_query(IggyConnection.shared(self.url), self.state_stream,
                                     query_id, timeout=self.timeout).read()
        return None if view is None or view.ledger is None else SinkFigures.from_ledger(
            view.ledger)


class LagReader:
    """Reads the latest offsets of the partitions an ``iggy`` source with these ``options``
    subscribes to (``url``, ``stream``, ``topics`` or ``topic_pattern``), to compare a batch's
    end with. Raises :class:`~iggy_spark.ConfigError` for options the source would refuse."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = SourceOptions.from_options(dict(options))

    @property
    def stream(self) -> str:
        return str(self.options.stream)

    def lag(self, end: Mapping[Position, int]) -> dict[str, dict[str, int]]:
        """Per topic and partition, the messages past ``end`` (from :func:`end_from_progress`),
        asked of the server now; a partition ``end`` does not hold counts from 0. Raises
        :class:`~iggy_spark.ConfigError` when the stream or a listed topic does not exist, and
        the errors of a connection that fails."""
        return to_json(behind(end, catalog.latest(self.options)))
