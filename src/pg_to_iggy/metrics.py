"""Prometheus metrics for streaming queries, served over HTTP from the Spark driver.

``serve_metrics(spark, port=9108, url=...)`` registers a :class:`StreamingQueryListener` and
serves the Prometheus text format at ``http://127.0.0.1:9108/metrics`` (``addr`` opens it to
other hosts; see :func:`serve_metrics` for TLS and basic auth). Where each figure comes from:

* **Spark's progress events** (the listener, in this process): batches, batch duration, input
  rows and rows per second, per query.
* **The ``iggy_routed`` ledger** (the newest ``ledger`` record of the query's control topic in
  Iggy, read by :class:`~iggy_spark.monitoring.LedgerReader`): the sink's commit runs in a
  Python worker process, not here, and appends every committed batch's ledger there; it is
  read at scrape time (with the ``url`` given to :func:`serve_metrics`), so the figures are
  always the committed ones and survive restarts (counters are the query's totals, not this
  process's), wherever the checkpoint lives.
* **``pg_cdc``'s progress** (``sources[].latestOffset``): the reader runs in another Python
  worker process; it reports the slot's lag, retained WAL, whether it is active, whether it is
  about to be lost (``wal_status``, ``safe_wal_size``), its consecutive failed commits and its
  backfills' progress per table through ``reportLatestOffset``, which Spark shows only in
  progress events (the :class:`~postgres_cdc_source.monitoring.SourceHealth` contract). No extra
  connection to Postgres, no file.
* **Where Spark never asks for that report** (4.0, 4.1: the progress carries none), the slot's
  figures are read from ``pg_replication_slots`` at scrape time, on one connection per query
  kept by the collector, for each query whose ``pg_cdc`` options :func:`serve_metrics` was given
  (:class:`~postgres_cdc_source.monitoring.HealthReader`); the backfills' requests
  pending and chunks delivered come from each batch's ``endOffset``
  (:meth:`~postgres_cdc_source.monitoring.Backfills.from_progress`). The reader's own
  figures (consecutive failed commits, degraded, backfill rows and rate) are not served there.
* **The ``iggy`` source's progress** likewise: each partition's lag, the messages past the
  batch's end (:func:`~iggy_spark.monitoring.lag_from_progress`). On 4.0/4.1, for each query
  whose ``iggy`` options :func:`serve_metrics` was given, the last batch's ``endOffset`` is
  compared at scrape time with the partitions' latest offsets, asked of the source's server.

It spans both connectors, so it lives with the job that joins them, and reads each through its
monitoring face (:mod:`iggy_spark.monitoring`, :mod:`postgres_cdc_source.monitoring`).

The endpoint is prometheus_client's WSGI app on a bounded server of the job's own
(:mod:`pg_to_iggy.endpoint`), and a scrape reads each query's slot on the one connection its
:class:`~postgres_cdc_source.monitoring.HealthReader` keeps.

Labels stay low-cardinality: the query's name (or id when unnamed), a rejection ``reason``,
a missing-destination ``action``, a ``component``; never a stream or topic of the sink, whose
destinations come from the data (per-destination detail is in :func:`iggy_spark.destinations`).
The ``iggy`` source's lag alone is per ``topic`` and ``partition``: those are its subscription,
fixed by its options, and lag is watched per partition; a ``pg_cdc`` backfill's figures are per
``table``, the few tables an operator asked to backfill.

Only classic Spark works: a Python listener under Spark Connect runs on the server, not in
this process.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from iggy_spark.monitoring import (
    STATE_STREAM,
    LagReader,
    LedgerReader,
    Position,
    SinkFigures,
    end_from_progress,
    lag_from_progress,
)
from pg_to_iggy.endpoint import BoundedServer, tls_context, with_basic_auth
from postgres_cdc_source.monitoring import (
    Backfills,
    HealthReader,
    SlotHealth,
    SourceHealth,
    slot_reader,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import StreamingQueryListener

__all__ = ["MetricsServer", "serve_metrics"]

log = logging.getLogger(__name__)

_SINK_DEGRADED, _SOURCE_DEGRADED = "iggy_routed", "pg_cdc"
_READ_TIMEOUT = 10.0
_QUERY = ("query",)
_FAMILIES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # (kind, name, help, labels), served in this order
    ("counter", "iggy_spark_batches", "micro-batches completed", _QUERY),
    ("counter", "iggy_spark_input_rows", "rows read by the query's sources", _QUERY),
    ("gauge", "iggy_spark_batch_duration_seconds", "duration of the last micro-batch", _QUERY),
    ("gauge", "iggy_spark_input_rows_per_second", "input rate of the last batch", _QUERY),
    ("gauge", "iggy_spark_processed_rows_per_second", "processing rate of the last batch",
     _QUERY),
    ("counter", "iggy_routed_messages_routed", "messages acknowledged by Iggy", _QUERY),
    ("counter", "iggy_routed_rejections", "rows refused a destination", ("query", "reason")),
    ("counter", "iggy_routed_missing_destination",
     "rows with a null stream or topic, by on_missing_destination action", ("query", "action")),
    ("counter", "iggy_routed_dead_lettered", "rows sent to the dead-letter destination", _QUERY),
    ("counter", "iggy_routed_dropped", "rows dropped by policy", _QUERY),
    ("counter", "iggy_routed_replay_skipped", "messages a replayed batch found already in Iggy "
     "and did not send again", _QUERY),
    ("counter", "iggy_routed_at_least_once_fallbacks", "groups a replay could not decide on "
     "within delivery_scan_messages, sent again in full", _QUERY),
    ("counter", "iggy_routed_state_lost", "tasks that found the query's control topic deleted "
     "or without a ledger (the cap and breakers started again)", _QUERY),
    ("gauge", "iggy_routed_destinations_active", "destinations admitted by the query", _QUERY),
    ("gauge", "iggy_routed_breakers_open", "destinations with an open breaker", _QUERY),
    ("histogram", "iggy_routed_destination_create_seconds",
     "time to create a missing stream/topic", _QUERY),
    ("gauge", "iggy_spark_degraded", "1 while a component is degraded: the sink has open "
     "breakers, or pg_cdc could not advance its slot for several commits in a row",
     ("query", "component")),
    ("gauge", "pg_cdc_slot_lag_bytes", "WAL between the flush position and the slot's "
     "confirmed position", _QUERY),
    ("gauge", "pg_cdc_retained_wal_bytes", "WAL the slot keeps on the server", _QUERY),
    ("gauge", "pg_cdc_slot_active", "1 while a session is using the slot", _QUERY),
    ("gauge", "pg_cdc_slot_at_risk", "1 while the slot's wal_status is unreserved (the next "
     "checkpoint loses it unless it catches up) or lost", _QUERY),
    ("gauge", "pg_cdc_slot_safe_wal_bytes", "WAL that may still be written before the slot is "
     "lost (absent while max_slot_wal_keep_size is unlimited)", _QUERY),
    ("gauge", "pg_cdc_slot_reread_wal_bytes", "WAL every read decodes again before its first "
     "change (confirmed minus restart position): held back by long-open transactions", _QUERY),
    ("gauge", "pg_cdc_commit_failures", "consecutive commits that could not advance the slot",
     _QUERY),
    ("gauge", "pg_cdc_backfill_requests", "backfill requests queued or running", _QUERY),
    ("counter", "pg_cdc_backfill_requests_skipped", "backfill request messages skipped since "
     "the driver's process started: no row of public.pg_cdc_requests placed them (forged), or "
     "a row the query cannot take", _QUERY),
    ("gauge", "pg_cdc_compiled_core", "1 while the driver's process decodes pgoutput with the "
     "compiled core (iggy-spark-core), 0 on the pure-Python path", _QUERY),
    ("counter", "pg_cdc_backfill_rows", "rows in the key ranges of the backfill chunks "
     "planned, per table (before a request's where)", ("query", "table")),
    ("counter", "pg_cdc_backfill_chunks", "backfill chunks planned, per table",
     ("query", "table")),
    ("gauge", "pg_cdc_backfill_rows_per_second", "a table's backfill rate, from its first "
     "chunk to its last", ("query", "table")),
    ("gauge", "iggy_source_lag_messages", "messages an iggy source's partition holds past the "
     "end of the query's last planned batch", ("query", "topic", "partition")),
)


@dataclass
class _Query:
    """What the listener has learnt about one query (by id)."""

    label: str
    batches: int = 0
    input_rows: int = 0
    batch_seconds: float = 0.0
    input_rate: float = 0.0
    processed_rate: float = 0.0
    source: SourceHealth | None = None
    """The ``pg_cdc`` reader's own report, from the last progress event that carried one."""
    backfill: Backfills | None = None
    """A ``pg_cdc`` source's backfills as the last batch's ``endOffset`` left them, where the
    progress carries no report (Spark 4.0, 4.1)."""
    chunks: Counter[str] = field(default_factory=Counter)
    """Backfill chunks delivered per table, counted from the batches' ``endOffset``."""
    iggy_lag: dict[str, dict[str, int]] = field(default_factory=dict)
    """The ``iggy`` sources' lag per topic and partition, from the last progress event."""
    ends: dict[Position, int] = field(default_factory=dict)
    """The sources' end offsets in the last progress event that carried no lag (4.0, 4.1)."""


class _Collector:
    """Turns the listener's state and the ledgers into metric families at scrape time."""

    def __init__(
        self, ledgers: LedgerReader | None = None,
        slots: Mapping[str, HealthReader] | None = None,
        iggy: Mapping[str, LagReader] | None = None,
    ) -> None:
        self.ledgers = ledgers
        """The sink's ledgers; ``None``: no sink figures."""
        self.slots = dict(slots or {})
        """The reader of a query's slot (from its ``pg_cdc`` options), by its label: the slot is
        read where the progress carries no report, on the one connection the reader keeps."""
        self.iggy = dict(iggy or {})
        """The reader of a query's ``iggy`` source partitions, by its label: their latest
        offsets are read where the progress carries no lag."""
        self.lock = threading.Lock()
        self.queries: dict[str, _Query] = {}

    def close(self) -> None:
        """Close the slots' connections."""
        for reader in self.slots.values():
            reader.close()

    def started(self, query_id: str, name: str | None) -> None:
        """A query started (called before ``start()`` returns): known from now on."""
        with self.lock:
            self.queries.setdefault(query_id, _Query(name or query_id))

    def collect(self) -> Iterator[Any]:
        families = _families()
        with self.lock:
            queries = list(self.queries.items())
        for query_id, q in queries:
            _add_spark(families, q)
            ledger = self._ledger(query_id)
            if ledger is not None:
                _add_sink(families, q.label, ledger)
            if q.source is not None:
                _add_pg_cdc(families, q.label, q.source)
            else:
                self._add_pg_cdc_alone(families, q)
            _add_iggy_lag(families, q.label, q.iggy_lag or self._iggy_lag(q))
        yield from families.values()

    def _ledger(self, query_id: str) -> SinkFigures | None:
        """The sink's figures from the query's newest ledger; ``None`` without a sink url, or
        for a query that has no control topic (it writes to another sink)."""
        return None if self.ledgers is None else self.ledgers.read(query_id)

    def _add_pg_cdc_alone(self, families: dict[str, Any], q: _Query) -> None:
        """``pg_cdc``'s figures where its reader reports none: the slot read here, the
        backfills from the batches' end offsets."""
        reader = self.slots.get(q.label)
        if reader is not None:
            try:
                slot = reader.read()
            except Exception as exc:  # a scrape goes on without the slot; the message is safe
                log.warning("serve_metrics: cannot read slot %s of query %s: %s",
                            reader.options.slot, q.label, exc)
            else:
                _add_slot(families, q.label, slot)
        if q.backfill is not None:
            families["pg_cdc_backfill_requests"].add_metric([q.label], len(q.backfill.queue))
        for table, chunks in sorted(q.chunks.items()):
            families["pg_cdc_backfill_chunks"].add_metric([q.label, table], chunks)

    def _iggy_lag(self, q: _Query) -> dict[str, dict[str, int]]:
        """The ``iggy`` source's lag where its reader reports none: the last batch's end
        offsets against the partitions' latest, asked now (empty before the first batch)."""
        reader = self.iggy.get(q.label)
        if reader is None or not q.ends:
            return {}
        try:
            return reader.lag(q.ends)
        except Exception as exc:  # a scrape goes on without the lag; the message is safe
            log.warning("serve_metrics: cannot read the offsets of stream %s for query %s: %s",
                        reader.stream, q.label, exc)
            return {}

    def progress(self, progress: Any) -> None:
        """Fold one ``StreamingQueryProgress`` in (listener thread)."""
        query_id = str(progress.id)
        with self.lock:
            q = self.queries.setdefault(query_id, _Query(progress.name or query_id))
        q.batches += 1
        q.input_rows += int(progress.numInputRows or 0)
        q.batch_seconds = float(progress.batchDuration or 0) / 1000
        q.input_rate = float(progress.inputRowsPerSecond or 0.0)
        q.processed_rate = float(progress.processedRowsPerSecond or 0.0)
        iggy_lag: dict[str, dict[str, int]] = {}
        ends: dict[Position, int] = {}
        for source in progress.sources or ():
            health = SourceHealth.from_progress(source.latestOffset)
            lag = lag_from_progress(source.latestOffset)
            if health is not None:
                q.source = health
            elif lag is not None:
                for topic, partitions in lag.items():
                    iggy_lag.setdefault(topic, {}).update(partitions)
            else:  # Spark 4.0/4.1: the batch's end offset alone
                _fold_backfill(q, Backfills.from_progress(source.endOffset))
                ends.update(end_from_progress(source.endOffset) or {})
        q.iggy_lag, q.ends = iggy_lag, ends


def _fold_backfill(q: _Query, end: Backfills | None) -> None:
    """A ``pg_cdc`` batch's end offset, where its reader reports nothing: the chunk it
    delivered counts, what is left pending replaces what was."""
    if end is None:
        return
    if end.chunk is not None:
        q.chunks[".".join(end.chunk.table)] += 1
    q.backfill = end.delivered()


def _families() -> dict[str, Any]:
    """An empty family of every metric, by name, in the order they are served."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily,
             "histogram": HistogramMetricFamily}
    return {name: kinds[kind](name, doc, labels=list(labels))
            for kind, name, doc, labels in _FAMILIES}


def _add_spark(families: dict[str, Any], q: _Query) -> None:
    """Spark's figures, from the query's progress events."""
    label = [q.label]
    families["iggy_spark_batches"].add_metric(label, q.batches)
    families["iggy_spark_input_rows"].add_metric(label, q.input_rows)
    families["iggy_spark_batch_duration_seconds"].add_metric(label, q.batch_seconds)
    families["iggy_spark_input_rows_per_second"].add_metric(label, q.input_rate)
    families["iggy_spark_processed_rows_per_second"].add_metric(label, q.processed_rate)


def _add_sink(families: dict[str, Any], query: str, sink: SinkFigures) -> None:
    """The ``iggy_routed`` sink's figures, from the query's ledger."""
    label = [query]
    families["iggy_routed_messages_routed"].add_metric(label, sink.messages_routed)
    for reason, count in sorted(sink.rejected.items()):
        families["iggy_routed_rejections"].add_metric([query, reason], count)
    for action, count in sorted(sink.missing.items()):
        families["iggy_routed_missing_destination"].add_metric([query, action], count)
    families["iggy_routed_dead_lettered"].add_metric(label, sink.dead_lettered)
    families["iggy_routed_dropped"].add_metric(label, sink.dropped)
    families["iggy_routed_replay_skipped"].add_metric(label, sink.replay_skipped)
    families["iggy_routed_at_least_once_fallbacks"].add_metric(label,
                                                               sink.at_least_once_fallbacks)
    families["iggy_routed_state_lost"].add_metric(label, sink.state_lost)
    families["iggy_routed_destinations_active"].add_metric(label, sink.destinations_active)
    opened = sink.breakers_open
    families["iggy_routed_breakers_open"].add_metric(label, opened)
    families["iggy_spark_degraded"].add_metric([query, _SINK_DEGRADED], float(opened > 0))
    buckets = [(str(b), c) for b, c in sink.create_buckets]
    families["iggy_routed_destination_create_seconds"].add_metric(
        label, [*buckets, ("+Inf", sink.create_count)], sink.create_seconds)


def _add_pg_cdc(families: dict[str, Any], query: str, source: SourceHealth) -> None:
    """``pg_cdc``'s figures, from the health its reader reports in the progress."""
    label = [query]
    _add_slot(families, query, source.slot)
    families["pg_cdc_commit_failures"].add_metric(label, source.commit_failures)
    families["iggy_spark_degraded"].add_metric([query, _SOURCE_DEGRADED], float(source.degraded))
    families["pg_cdc_backfill_requests"].add_metric(label, source.backfill_requests)
    families["pg_cdc_backfill_requests_skipped"].add_metric(label, source.skipped_requests)
    families["pg_cdc_compiled_core"].add_metric(label, float(source.compiled_core))
    for table, backfill in sorted(source.backfills.items()):
        families["pg_cdc_backfill_rows"].add_metric([query, table], backfill.rows)
        families["pg_cdc_backfill_chunks"].add_metric([query, table], backfill.chunks)
        families["pg_cdc_backfill_rows_per_second"].add_metric([query, table],
                                                               backfill.rows_per_second)


def _add_slot(families: dict[str, Any], query: str, slot: SlotHealth | None) -> None:
    """The slot's figures (``None``: the slot cannot be found, only ``pg_cdc_slot_active``)."""
    label = [query]
    if slot is not None:
        families["pg_cdc_slot_lag_bytes"].add_metric(label, slot.slot_lag_bytes)
        families["pg_cdc_retained_wal_bytes"].add_metric(label, slot.retained_wal_bytes)
        families["pg_cdc_slot_at_risk"].add_metric(label, float(slot.at_risk))
        families["pg_cdc_slot_reread_wal_bytes"].add_metric(label, slot.reread_wal_bytes)
        if slot.safe_wal_bytes is not None:
            families["pg_cdc_slot_safe_wal_bytes"].add_metric(label, slot.safe_wal_bytes)
    families["pg_cdc_slot_active"].add_metric(label, float(slot is not None
                                                           and slot.slot_active))


def _add_iggy_lag(families: dict[str, Any], query: str, lag: dict[str, dict[str, int]]) -> None:
    """The ``iggy`` sources' lag per topic and partition."""
    for topic, partitions in sorted(lag.items()):
        for partition, messages in partitions.items():
            families["iggy_source_lag_messages"].add_metric([query, topic, partition], messages)


@dataclass
class MetricsServer:
    """A running metrics endpoint; :meth:`stop` removes the listener, closes the port and the
    collector's connections to Postgres."""

    port: int
    _spark: Any = field(repr=False)
    _listener: StreamingQueryListener = field(repr=False)
    _server: Any = field(repr=False)
    _collector: _Collector = field(repr=False)
    host: str = "127.0.0.1"
    """Where this process reaches the endpoint (loopback for a wildcard address)."""
    scheme: str = "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._spark.streams.removeListener(self._listener)
        self._server.shutdown()
        self._server.server_close()
        self._collector.close()


def serve_metrics(
    spark: SparkSession, port: int = 9108, addr: str = "127.0.0.1", *, url: str | None = None,
    state_stream: str = STATE_STREAM,
    pg_cdc: Mapping[str, Mapping[str, str]] | None = None,
    iggy: Mapping[str, Mapping[str, str]] | None = None,
    certfile: str | None = None, keyfile: str | None = None,
    client_cafile: str | None = None, basic_auth: tuple[str, str] | None = None,
) -> MetricsServer:
    """Serve Prometheus metrics of every streaming query of ``spark`` on ``addr:port``.

    ``addr`` defaults to loopback: the figures (query names, slot lag, rows, rejection counts)
    are for the operator, not for the network. ``addr="0.0.0.0"`` (or the driver's address)
    lets a Prometheus on another host scrape it; then restrict it: ``certfile`` (and
    ``keyfile``, unless the certificate file holds the key) serve HTTPS, ``client_cafile``
    requires clients to present a certificate that CA signed (mutual TLS), ``basic_auth`` a
    ``(user, password)`` (send it over TLS only), or a firewall. At most 4 requests are served
    at once (more are closed at accept) and a client gets 10 s per read or write.

    ``url`` (the ``iggy_routed`` sink's ``url`` option; its user needs to poll the
    ``state_stream``) adds the sink's figures, read from each query's control topic at scrape
    time; without it only Spark's and ``pg_cdc``'s figures are served.

    ``pg_cdc`` maps a query's name to its ``pg_cdc`` options (``dsn`` and ``slot`` at least;
    the other connection options count too): on Spark 4.0 and 4.1, where the reader's report
    never reaches a progress event, that query's slot is read from ``pg_replication_slots``
    at each scrape, on one connection per query kept open until :meth:`MetricsServer.stop`
    (the DSN's role needs to see the view; it is never logged unredacted).
    Elsewhere the reader's report replaces it from the query's first batch on, so it is only
    needed on 4.0/4.1. Options that are not valid ``pg_cdc`` options (or ``mode=polling``,
    which has no slot) raise :class:`postgres_cdc_source.ConfigError` here.
    ``iggy`` likewise maps a query's name to its ``iggy`` source options (``url``, ``stream``,
    ``topics`` or ``topic_pattern``): on 4.0/4.1 its lag is the last batch's end offsets against
    the partitions' latest, asked of that server at each scrape (invalid options raise
    :class:`iggy_spark.ConfigError`).

    Call it once on the driver, before starting the queries to watch (a query shows up when
    it starts; one started earlier, with its first completed batch). ``port=0`` picks a free
    port (see :attr:`MetricsServer.port`).
    Raises :class:`RuntimeError` under Spark Connect, where it cannot work; :class:`ValueError`
    for ``keyfile`` or ``client_cafile`` without ``certfile``, or an empty ``basic_auth`` user
    or password; :class:`OSError` (:class:`ssl.SSLError`) for a certificate that cannot be
    loaded.
    """
    _require_classic(spark)
    from prometheus_client import CollectorRegistry, make_wsgi_app
    from pyspark.sql.streaming.listener import StreamingQueryListener

    if certfile is None and (keyfile is not None or client_cafile is not None):
        raise ValueError("serve_metrics: keyfile and client_cafile need certfile (TLS)")
    if basic_auth is not None and not all(basic_auth):
        raise ValueError("serve_metrics: basic_auth needs a user and a password")
    slots = {query: slot_reader(options, "serve_metrics")
             for query, options in (pg_cdc or {}).items()}
    sources = {query: LagReader(options) for query, options in (iggy or {}).items()}
    tls = None if certfile is None else tls_context(certfile, keyfile, client_cafile)
    ledgers = None if url is None else LedgerReader(url, state_stream, timeout=_READ_TIMEOUT)
    collector = _Collector(ledgers, slots, sources)

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            collector.started(str(event.id), event.name)

        def onQueryProgress(self, event: Any) -> None:
            collector.progress(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    app = make_wsgi_app(registry)
    server = BoundedServer(addr, port, tls)
    server.set_app(app if basic_auth is None else with_basic_auth(app, *basic_auth))
    threading.Thread(target=server.serve_forever, name="serve_metrics", daemon=True).start()
    listener = Listener()
    spark.streams.addListener(listener)
    wildcard = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}
    return MetricsServer(server.server_port, spark, listener, server, collector,
                         wildcard.get(addr, addr), "http" if tls is None else "https")


def _require_classic(spark: object) -> None:
    """Refuse Spark Connect clearly: its listeners run on the server, not in this process.

    Decided by the session's class (``pyspark.sql.connect...``), so no Connect extras need to
    be importable to tell.
    """
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        raise RuntimeError(
            "serve_metrics needs a classic SparkSession (it listens to query progress in "
            "this process); under Spark Connect, scrape the Spark server's own metrics and "
            "read iggy_spark.destinations(<checkpoint>, url=...)"
        )
