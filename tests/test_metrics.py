"""The metrics collector without Spark: progress events and ledgers (read from the local broker)
in, Prometheus text out; the endpoint's bounds, TLS and basic auth."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import trustme
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.iggy_source_support import seed
from support.sink_state import replace_ledger

from connector_common.lsn import parse_lsn
from connector_common.spark_versions import READ_LIMITS
from iggy_local import LocalIggy
from iggy_spark.errors import ConfigError as IggyConfigError
from iggy_spark.monitoring import LagReader, LedgerReader
from iggy_spark.sink.report import Ledger, TaskReport
from iggy_spark_testing.chaos import wait_until
from iggy_spark_testing.harness import LocalPostgres
from pg_to_iggy import endpoint
from pg_to_iggy.metrics import _Collector, _require_classic, serve_metrics
from postgres_cdc_source.backfill import request_backfill
from postgres_cdc_source.backfill.progress import Backfills, ChunkPlan, Request
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.health import SlotHealth, SourceHealth, TableBackfill
from postgres_cdc_source.monitoring import HealthReader, slot_reader
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.offset import StreamOffset
from postgres_cdc_source.stream.reader import PgCdcStreamReader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def samples(collector: _Collector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def progress(query_id: str, rows: int, latest: str | None = None,
             end: str | None = None) -> SimpleNamespace:
    """A progress event; on Spark 4.0/4.1 a source's ``latestOffset`` is its ``endOffset``."""
    return SimpleNamespace(id=query_id, name="orders", numInputRows=rows, batchDuration=1500,
                           inputRowsPerSecond=10.0, processedRowsPerSecond=20.0,
                           sources=[SimpleNamespace(latestOffset=latest, endOffset=end)])


def scrape(url: str, query: str) -> dict[str, float]:
    """The endpoint's samples of one query over HTTP, as ``{"name{other labels}": value}``."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.pop("query", None) == query:
                extra = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
                found[sample.name + (f"{{{extra}}}" if extra else "")] = sample.value
    return found


def end_offset(lsn: str, state: Backfills = Backfills()) -> str:
    return json.dumps(StreamOffset(parse_lsn(lsn), backfill=state).to_json())


def test_progress_and_slot_health_become_per_query_metrics() -> None:
    collector = _Collector(None)
    collector.started("id-1", "orders")
    health = {"lsn": "0/10", "slot_lag_bytes": 4096, "retained_wal_bytes": 8192,
              "slot_active": False, "wal_status": "unreserved", "safe_wal_bytes": -512,
              "reread_wal_bytes": 1024,
              "commit_failures": 3, "degraded": True}
    collector.progress(progress("id-1", 7, json.dumps(health)))
    collector.progress(progress("id-1", 5, '{"logOffset": 3}'))  # another source kind: ignored
    got = samples(collector)
    q = (("query", "orders"),)
    assert got[("iggy_spark_batches_total", q)] == 2
    assert got[("iggy_spark_input_rows_total", q)] == 12
    assert got[("iggy_spark_batch_duration_seconds", q)] == 1.5
    assert got[("pg_cdc_slot_lag_bytes", q)] == 4096
    assert got[("pg_cdc_retained_wal_bytes", q)] == 8192
    assert got[("pg_cdc_slot_active", q)] == 0
    assert got[("pg_cdc_slot_at_risk", q)] == 1
    assert got[("pg_cdc_slot_safe_wal_bytes", q)] == -512
    assert got[("pg_cdc_slot_reread_wal_bytes", q)] == 1024
    assert got[("iggy_spark_degraded", (("component", "pg_cdc"), ("query", "orders")))] == 1


def test_a_backfills_progress_is_per_table() -> None:
    collector = _Collector(None)
    collector.started("id-5", "orders")
    health = SourceHealth(None, 0, False, 1, {"public.a": TableBackfill(20000, 4, 950.5),
                                              "s.b": TableBackfill(70, 1, 0.0)}, 2, True)
    collector.progress(progress("id-5", 1, json.dumps(health.as_progress())))
    got = samples(collector)
    assert got[("pg_cdc_compiled_core", (("query", "orders"),))] == 1
    a = (("query", "orders"), ("table", "public.a"))
    b = (("query", "orders"), ("table", "s.b"))
    assert got[("pg_cdc_backfill_requests", (("query", "orders"),))] == 1
    assert got[("pg_cdc_backfill_requests_skipped_total", (("query", "orders"),))] == 2
    assert got[("pg_cdc_backfill_rows_total", a)] == 20000
    assert got[("pg_cdc_backfill_chunks_total", a)] == 4
    assert got[("pg_cdc_backfill_rows_per_second", a)] == 950.5
    assert got[("pg_cdc_backfill_rows_total", b)] == 70
    assert got[("pg_cdc_backfill_chunks_total", b)] == 1


def test_an_iggy_sources_lag_is_a_gauge_per_partition() -> None:
    from iggy_spark.source.offsets import Position
    from iggy_spark.source.progress import report

    collector = _Collector(None)
    collector.started("id-4", "orders")
    latest = {Position("eu", 0): 120, Position("eu", 1): 7, Position("us", 0): 5}
    planned = {Position("eu", 0): 100, Position("eu", 1): 7}  # us/0 is new: lag from 0
    collector.progress(progress("id-4", 1, json.dumps(report(latest, planned))))
    got = samples(collector)
    lag = {labels: value for (name, labels), value in got.items()
           if name == "iggy_source_lag_messages"}
    assert lag == {
        (("partition", "0"), ("query", "orders"), ("topic", "eu")): 20,
        (("partition", "1"), ("query", "orders"), ("topic", "eu")): 0,
        (("partition", "0"), ("query", "orders"), ("topic", "us")): 5,
    }
    collector.progress(progress("id-4", 1, '{"eu": {"0": 3}}'))  # not an iggy source's report
    assert not any(name == "iggy_source_lag_messages" for name, _ in samples(collector))


def test_a_slot_safe_from_loss_is_not_at_risk_and_unlimited_has_no_safe_size() -> None:
    collector = _Collector(None)
    collector.started("id-3", "orders")
    health = SourceHealth(SlotHealth(True, 1, 2, "extended", None), 0, False)
    collector.progress(progress("id-3", 1, json.dumps(health.as_progress())))
    got = samples(collector)
    q = (("query", "orders"),)
    assert got[("pg_cdc_slot_at_risk", q)] == 0
    assert ("pg_cdc_slot_safe_wal_bytes", q) not in got


def test_without_the_readers_report_backfills_come_from_the_batches_end_offsets() -> None:
    """Spark 4.0/4.1: the progress shows each batch's end offset where 4.2 shows the report;
    each batch carrying a chunk delivered it, the queue left pending is the requests'."""
    collector = _Collector(None)
    collector.started("id-6", "orders")
    a, b = ("public", "a"), ("s", "b")
    queue = (Request("r1", (a, b)), Request("r2", (b,)))
    chunk = ChunkPlan("r1", "n1", a, None, ("41",), None)
    ends = [end_offset("0/10", Backfills(queue)),
            end_offset("0/20", Backfills(queue, chunk)),
            end_offset("0/30", Backfills(queue, ChunkPlan("r1", "n2", a, ("41",), None, None))),
            end_offset("0/40", Backfills((Request("r1", (b,)), queue[1]),
                                         ChunkPlan("r1", "n3", b, None, None, None)))]
    for end in ends:
        collector.progress(progress("id-6", 1, end, end))
    got = samples(collector)
    q = (("query", "orders"),)
    assert got[("pg_cdc_backfill_requests", q)] == 1  # r1 done with the last batch's chunk
    assert got[("pg_cdc_backfill_chunks_total", (("query", "orders"), ("table", "public.a")))] == 2
    assert got[("pg_cdc_backfill_chunks_total", (("query", "orders"), ("table", "s.b")))] == 1
    # what only the reader knows is left out, not served as zero
    assert not {name for name, _ in got} & {
        "pg_cdc_commit_failures", "iggy_spark_degraded", "pg_cdc_backfill_rows_total",
        "pg_cdc_backfill_rows_per_second", "pg_cdc_slot_lag_bytes", "pg_cdc_slot_active"}
    collector.progress(progress("id-6", 1, end_offset("0/50"), end_offset("0/50")))
    assert samples(collector)[("pg_cdc_backfill_requests", q)] == 0


def test_without_the_readers_report_the_slot_is_read_at_scrape_time(
    pg: LocalPostgres, name: str
) -> None:
    options = CdcOptions.from_options({"dsn": pg.dsn, "slot": name})
    PgCdcStreamReader(options).initialOffset()  # the slot
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, pad text)")
        conn.execute(f"INSERT INTO {name} SELECT g, repeat('x', 100)"
                     " FROM generate_series(1, 500) g")
    collector = _Collector(None, slots={"orders": HealthReader(options)})
    collector.started("id-7", "orders")  # no batch yet: read all the same
    got = samples(collector)
    q = (("query", "orders"),)
    assert got[("pg_cdc_slot_lag_bytes", q)] > 500 * 100
    assert got[("pg_cdc_retained_wal_bytes", q)] >= got[("pg_cdc_slot_lag_bytes", q)]
    assert got[("pg_cdc_slot_active", q)] == 0 and got[("pg_cdc_slot_at_risk", q)] == 0
    assert ("pg_cdc_commit_failures", q) not in got
    # the reader's report wins where the progress carries one (Spark 4.2+)
    reported = SourceHealth(SlotHealth(True, 7, 8), 0, False)
    collector.progress(progress("id-7", 1, json.dumps(reported.as_progress())))
    assert samples(collector)[("pg_cdc_slot_lag_bytes", q)] == 7


def test_a_slot_that_cannot_be_read_leaves_its_figures_out_and_no_password_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dsn = "host=127.0.0.1 port=1 dbname=app user=cdc password=hunter2"
    collector = _Collector(None, slots={"orders": slot_reader(
        {"dsn": dsn, "slot": "orders_slot"})})
    collector.started("id-8", "orders")
    got = samples(collector)
    assert got[("iggy_spark_batches_total", (("query", "orders"),))] == 0
    assert not any(name.startswith("pg_cdc_") for name, _ in got)
    assert "cannot read slot orders_slot of query orders" in caplog.text
    assert "hunter2" not in caplog.text and "hunter2" not in repr(collector.slots)


def _health_backends(pg: LocalPostgres) -> set[int]:
    """Backends whose last query is the slot's health (the collector's, this test's or not)."""
    with pg.connect() as conn:
        return {pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE %s",
            ("SELECT active, (% - confirmed_flush_lsn)::int8,%",))}


def test_scrapes_read_a_slot_on_one_connection_kept_between_them(
    pg: LocalPostgres, name: str
) -> None:
    """However often it is scraped, a query's slot takes one connection (so scrapes cannot use
    up max_connections); one that broke is opened anew, and stop closes it."""
    options = CdcOptions.from_options({"dsn": pg.dsn, "slot": name})
    PgCdcStreamReader(options).initialOffset()  # the slot
    before = _health_backends(pg)
    collector = _Collector(None, slots={"orders": HealthReader(options)})
    collector.started("id-10", "orders")
    lag = ("pg_cdc_slot_lag_bytes", (("query", "orders"),))
    for _ in range(5):
        assert lag in samples(collector)
    [kept] = _health_backends(pg) - before
    assert lag in samples(collector) and _health_backends(pg) - before == {kept}
    with pg.connect() as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (kept,))
    samples(collector)  # finds it gone: left out of this scrape
    assert lag in samples(collector)
    [again] = _health_backends(pg) - before
    assert again != kept
    collector.close()
    wait_until(lambda: again not in _health_backends(pg), 10, "the kept connection to close")


def _no_spark() -> Any:
    """What serve_metrics uses of a classic session: its listeners."""
    listeners: list[object] = []
    return SimpleNamespace(streams=SimpleNamespace(addListener=listeners.append,
                                                   removeListener=listeners.remove))


def test_the_endpoint_listens_on_loopback_and_serves_a_few_clients_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client past the workers is closed at accept, a silent one after the client timeout;
    neither holds a thread for longer, and the endpoint serves the next scrape."""
    monkeypatch.setattr(endpoint, "CLIENT_TIMEOUT", 2.0)
    served = serve_metrics(_no_spark(), port=0)
    try:
        assert served._server.server_address[0] == "127.0.0.1"
        assert served.url == f"http://127.0.0.1:{served.port}/metrics"
        silent = [socket.create_connection(("127.0.0.1", served.port), timeout=10)
                  for _ in range(endpoint.WORKERS)]
        extra = socket.create_connection(("127.0.0.1", served.port), timeout=10)
        assert extra.recv(1) == b""  # closed at accept (a timeout here: served, unbounded)
        for client in silent:  # still held: the extra one was closed before any timed out
            client.setblocking(False)
            with pytest.raises(BlockingIOError):
                client.recv(1)
            client.settimeout(10)
        for client in silent:
            assert client.recv(1) == b""  # closed after the client timeout
            client.close()
        extra.close()
        with urllib.request.urlopen(served.url, timeout=10) as response:
            assert b"# HELP iggy_spark_batches_total" in response.read()
    finally:
        served.stop()


def test_the_endpoint_serves_tls_mutual_tls_and_basic_auth(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "server.pem"))
    client_pem = tmp_path / "client.pem"
    ca.issue_cert("prometheus").private_key_and_cert_chain_pem.write_to_path(str(client_pem))
    trusting = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    token = base64.b64encode(b"prom:s3cret").decode()

    def get(url: str, context: ssl.SSLContext | None, auth: str | None = None) -> int:
        request = urllib.request.Request(url, headers={} if auth is None else {
            "Authorization": f"Basic {auth}"})
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                assert b"# HELP iggy_spark_batches_total" in response.read()
                return int(response.status)
        except urllib.error.HTTPError as refused:
            return refused.code

    served = serve_metrics(_no_spark(), port=0, certfile=str(tmp_path / "server.pem"),
                           basic_auth=("prom", "s3cret"))
    try:
        assert served.url.startswith("https://127.0.0.1:")
        assert get(served.url, trusting, token) == 200
        assert get(served.url, trusting) == 401
        assert get(served.url, trusting, base64.b64encode(b"prom:wrong").decode()) == 401
        assert get(served.url, trusting, "not base64!") == 401
        with pytest.raises((ConnectionError, http.client.HTTPException)):  # plain HTTP: no metrics
            get(served.url.replace("https:", "http:"), None, token)
    finally:
        served.stop()
    served = serve_metrics(_no_spark(), port=0, certfile=str(tmp_path / "server.pem"),
                           client_cafile=str(tmp_path / "ca.pem"))
    try:
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            # no client certificate: the handshake fails (TLS 1.3 tells it at the first read)
            get(served.url, trusting)
        trusting.load_cert_chain(str(client_pem))
        assert get(served.url, trusting) == 200
    finally:
        served.stop()
    with pytest.raises(ValueError, match="keyfile and client_cafile need certfile"):
        serve_metrics(_no_spark(), port=0, client_cafile=str(tmp_path / "ca.pem"))
    with pytest.raises(ValueError, match="basic_auth needs a user and a password"):
        serve_metrics(_no_spark(), port=0, basic_auth=("prom", ""))


def test_serve_metrics_refuses_source_options_it_cannot_use() -> None:
    spark = SimpleNamespace()  # refused before the session is used
    with pytest.raises(ConfigError, match="option 'slot'"):
        serve_metrics(spark, port=0, pg_cdc={"orders": {"dsn": "host=db"}})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"option 'mode'.*polling has none"):
        serve_metrics(spark, port=0, pg_cdc={"orders": {  # type: ignore[arg-type]
            "dsn": "host=db", "mode": "polling", "table": "public.t", "tracking_column": "id"}})
    with pytest.raises(IggyConfigError, match="option 'stream'"):
        serve_metrics(spark, port=0, iggy={"orders": {  # type: ignore[arg-type]
            "url": "iggy://u:p@localhost:8090", "topics": "eu"}})


def test_without_the_readers_report_an_iggy_sources_lag_is_its_end_against_the_server(
    broker: LocalIggy, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Spark 4.0/4.1: the progress shows the batch's end offsets; the collector asks the
    source's server for the partitions' latest at scrape time."""
    seed(broker.address, name, ["eu"], partitions=2, per_partition=50)
    options = {"url": broker.url, "stream": name, "topics": "eu"}
    collector = _Collector(None, iggy={"orders": LagReader(options)})
    collector.started("id-9", "orders")
    lag = {labels: value for (metric, labels), value in samples(collector).items()
           if metric == "iggy_source_lag_messages"}
    assert lag == {}  # no batch yet: no end to count from
    end = '{"eu": {"0": 30, "1": 50}}'
    collector.progress(progress("id-9", 1, end, end))
    lag = {labels: value for (metric, labels), value in samples(collector).items()
           if metric == "iggy_source_lag_messages"}
    assert lag == {(("partition", "0"), ("query", "orders"), ("topic", "eu")): 20,
                   (("partition", "1"), ("query", "orders"), ("topic", "eu")): 0}
    gone = {"url": broker.url, "stream": name + "_gone", "topics": "eu"}
    collector = _Collector(None, iggy={"orders": LagReader(gone)})
    collector.progress(progress("id-9", 1, end, end))
    assert not any(metric == "iggy_source_lag_messages" for metric, _ in samples(collector))
    assert f"cannot read the offsets of stream {name}_gone for query orders" in caplog.text


@pytest.mark.oldest_spark
def test_the_endpoint_serves_a_pg_cdc_querys_slot_lag_and_backfill_on_every_spark(
    spark: SparkSession, pg: LocalPostgres, name: str, checkpoint: str
) -> None:
    """On 4.2+ from the reader's report, on 4.0/4.1 read by the collector itself (the slot) and
    from the batches' end offsets (the backfill): the same metrics either way."""
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, pad text)")
        conn.execute(f"INSERT INTO {name} SELECT g, 'old' FROM generate_series(1, 250) g")
    options = {"dsn": pg.dsn, "slot": name, "include_tables": rf"public\.{name}",
               "backfill_chunk_rows": "100"}
    PgCdcStreamReader(CdcOptions.from_options(options)).initialOffset()  # after the 250 rows
    metrics = serve_metrics(spark, port=0, pg_cdc={name: options})
    query = (spark.readStream.format("pg_cdc").options(**options).load()
             .writeStream.format("noop").queryName(name)
             .option("checkpointLocation", checkpoint).start())
    try:
        request_backfill(pg.dsn, name, [name])
        with pg.connect() as conn:
            conn.execute(f"INSERT INTO {name} SELECT g, 'new' FROM generate_series(251, 300) g")
        query.processAllAvailable()  # to the backfill's end
        with pg.connect() as conn:  # one batch more: 4.2's report of its planning has it done
            conn.execute(f"INSERT INTO {name} VALUES (301, 'new')")
        query.processAllAvailable()
        chunks = f"pg_cdc_backfill_chunks_total{{table=public.{name}}}"
        seen: list[dict[str, float]] = []

        def done() -> bool:  # a progress event reaches the listener after its batch returned
            seen.append(scrape(metrics.url, name))
            return seen[-1].get("pg_cdc_backfill_requests") == 0 and seen[-1].get(chunks, 0) >= 3

        wait_until(done, 60, "the metrics of the backfill's end")
        got = seen[-1]
        assert got["pg_cdc_slot_lag_bytes"] >= 0
        assert got["pg_cdc_retained_wal_bytes"] >= got["pg_cdc_slot_lag_bytes"]
        assert got["pg_cdc_slot_at_risk"] == 0 and "pg_cdc_slot_active" in got
        assert ("pg_cdc_commit_failures" in got) == READ_LIMITS  # only the reader knows
        query.stop()
        with pg.connect() as conn:
            conn.execute(f"UPDATE {name} SET pad = repeat('x', 200)")
        if not READ_LIMITS:  # read at each scrape: a stopped query's lag grows
            lag = scrape(metrics.url, name)["pg_cdc_slot_lag_bytes"]
            assert lag > got["pg_cdc_slot_lag_bytes"] + 300 * 200
    finally:
        query.stop()
        metrics.stop()


@pytest.mark.iggy_line
def test_sink_figures_come_from_the_ledger_in_the_control_topic(broker: LocalIggy) -> None:
    ledger = Ledger()
    ledger.apply(0, [TaskReport(routed=Counter({"s/a": 3, "s/dlq": 1}),
                                rejected=Counter({"circuit_open": 1}), dead_lettered=1,
                                resumed=5, at_least_once=2, created=["s/a"], state_lost=2,
                                create_seconds=[0.02], admitted=[("s", "a")],
                                breakers={"s/a": {"state": "open", "consecutive_failures": 5,
                                                  "opened_at": 1.0, "last_error": "x"}})])
    query_id = str(uuid.uuid4())
    replace_ledger(broker, query_id, ledger.data)
    collector = _Collector(LedgerReader(broker.url))
    collector.started(query_id, None)
    collector.started("another-query", "other")  # no control topic: no sink figures
    got = samples(collector)
    q = (("query", query_id),)  # unnamed: labelled by id
    assert ("iggy_routed_messages_routed_total", (("query", "other"),)) not in got
    assert got[("iggy_routed_messages_routed_total", q)] == 4
    circuit_open = (("query", query_id), ("reason", "circuit_open"))
    assert got[("iggy_routed_rejections_total", circuit_open)] == 1
    assert got[("iggy_routed_breakers_open", q)] == 1
    assert got[("iggy_routed_destinations_active", q)] == 1
    assert got[("iggy_routed_replay_skipped_total", q)] == 5
    assert got[("iggy_routed_at_least_once_fallbacks_total", q)] == 2
    assert got[("iggy_routed_destination_create_seconds_bucket",
                (("le", "0.01"), ("query", query_id)))] == 0
    assert got[("iggy_routed_destination_create_seconds_bucket",
                (("le", "0.025"), ("query", query_id)))] == 1
    assert got[("iggy_routed_destination_create_seconds_count", q)] == 1
    assert got[("iggy_routed_state_lost_total", q)] == 2
    assert got[("iggy_spark_degraded", (("component", "iggy_routed"), ("query", query_id)))] == 1


def test_spark_connect_is_refused_with_a_clear_message() -> None:
    remote = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    with pytest.raises(RuntimeError, match="classic SparkSession"):
        _require_classic(remote)
    _require_classic(type("SparkSession", (), {"__module__": "pyspark.sql.session"})())


def test_the_source_health_contract_round_trips_with_the_keys_dashboards_read() -> None:
    """The reader writes :class:`SourceHealth` into its progress, the listener reads it back;
    the keys are the ones earlier releases wrote (a progress event from one still reads)."""
    for health in (SourceHealth(SlotHealth(True, 10, 20), 2, False),
                   SourceHealth(SlotHealth(True, 10, 20, "unreserved", 4096, 30), 0, False),
                   SourceHealth(None, 5, True),
                   SourceHealth(None, 0, False, 2, {"public.t": TableBackfill(30, 3, 12.5)}),
                   SourceHealth(None, 0, False, skipped_requests=3),
                   SourceHealth(None, 0, False, compiled_core=True)):
        report = {"lsn": "0/10", **health.as_progress()}
        assert SourceHealth.from_progress(json.dumps(report)) == health
    assert set(SourceHealth(SlotHealth(True, 1, 2), 0, False).as_progress()) == {
        "slot_active", "slot_lag_bytes", "retained_wal_bytes", "wal_status", "safe_wal_bytes",
        "reread_wal_bytes", "commit_failures", "degraded", "backfill_requests", "backfills",
        "skipped_requests", "compiled_core"}
    for other in (None, "", "not json", "[1]", '{"logOffset": 3}'):
        assert SourceHealth.from_progress(other) is None
