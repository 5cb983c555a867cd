"""Fault isolation end to end: one destination fails for good while 49 others flow.

A running Spark query (not ``availableNow``: it must keep running) writes Parquet-fed batches
to 50 pre-created topics on the local broker, whose test-only fault switch refuses every send
to one of them. Everything is read back over TCP, and the metrics endpoint is scraped over
HTTP between batches.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from support.broker_fixtures import connect, create_topic, poll_all, run
from support.sink_state import ledger_of, replace_ledger

from iggy_local import LocalIggy
from pg_to_iggy import serve_metrics

pytestmark = pytest.mark.e2e

SCHEMA = "stream string, topic string, n int, pad string"
ARROW_SCHEMA = pa.schema([("stream", pa.string()), ("topic", pa.string()), ("n", pa.int32()),
                          ("pad", pa.string())])
TOPICS = [f"t{i:02d}" for i in range(50)]
BAD = "t07"


def _create_topics(broker: LocalIggy, stream: str, topics: list[str]) -> None:
    async def main() -> None:
        client = await connect(broker.address)
        await client.create_stream(stream)
        for topic in topics:
            await create_topic(client, stream, topic, 1)

    run(main())


def scrape(url: str, query: str) -> dict[str, float]:
    """The endpoint's samples of one query, as ``{"name{other labels}": value}``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.pop("query", None) != query:
                continue
            extra = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            samples[sample.name + (f"{{{extra}}}" if extra else "")] = sample.value
    return samples


def test_one_destination_failing_for_good_while_49_others_flow(
    spark: SparkSession, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    _create_topics(broker, name, [*TOPICS, "dlq"])
    feed, checkpoint = tmp_path / "feed", tmp_path / "checkpoint"
    batch = 0

    def add(extra: list[tuple[str, str, int, str]] = ()) -> None:  # type: ignore[assignment]
        nonlocal batch
        rows = [(name, t, batch * 1000 + i * 10 + k, "") for i, t in enumerate(TOPICS)
                for k in range(4)]
        columns = list(zip(*(rows + list(extra)), strict=True))
        feed.mkdir(exist_ok=True)
        pq.write_table(pa.table(dict(zip(["stream", "topic", "n", "pad"], columns, strict=True)),
                                schema=ARROW_SCHEMA), feed / f"part-{batch}.parquet")
        batch += 1

    def dead_letters() -> Counter[tuple[str, str]]:
        return Counter((m.headers["iggy_spark.reason"], m.headers.get("iggy_spark.topic", ""))
                       for m in poll_all(broker.address, name, "dlq"))

    add([(name, "missing", -1, ""), (name, "t00", -2, "x" * 2000)])
    broker.refuse_sends(name, BAD)  # before the query: a server without the switch stops here
    metrics = serve_metrics(spark, port=0, url=broker.url)
    query = (
        spark.readStream.schema(SCHEMA).parquet(str(feed)).writeStream.format("iggy_routed")
        .queryName(name)
        .option("url", broker.url).option("checkpointLocation", str(checkpoint))
        .options(**{
            "on_admission_failure": "dlq", "dlq.stream": name, "dlq.topic": "dlq",
            "circuit_breaker.failure_threshold": "3", "circuit_breaker.cool_down": "10m",
            "create_destinations": "false", "max_message_bytes": "1000",
        })
        .start()
    )
    try:
        query.processAllAvailable()
        assert query.isActive and query.exception() is None
        for topic in TOPICS:
            expected = [] if topic == BAD else [0 * 1000 + TOPICS.index(topic) * 10 + k
                                                for k in range(4)]
            got = [json.loads(m.payload)["n"] for m in poll_all(broker.address, name, topic)]
            assert got == expected, topic
        assert dead_letters() == {("circuit_open", BAD): 4, ("unknown", "missing"): 1,
                                  ("too_large", "t00"): 1}
        entry = ledger_of(broker, str(query.id)).data["destinations"][f"{name}/{BAD}"]
        assert (entry["breaker"], entry["consecutive_failures"]) == ("open", 3)
        first = scrape(metrics.url, name)
        assert first["iggy_routed_rejections_total{reason=circuit_open}"] == 4
        assert first["iggy_routed_rejections_total{reason=unknown}"] == 1
        assert first["iggy_routed_rejections_total{reason=too_large}"] == 1
        assert first["iggy_routed_messages_routed_total"] == 196 + 6  # 49 x 4, 6 dead letters
        assert first["iggy_routed_dead_lettered_total"] == 6
        assert first["iggy_routed_breakers_open"] == 1
        assert first["iggy_spark_degraded{component=iggy_routed}"] == 1
        assert first["iggy_routed_destinations_active"] == 51

        add()  # the next batch: refused at once, no send (the count stays at 3)
        query.processAllAvailable()
        assert dead_letters()[("circuit_open", BAD)] == 8
        assert ledger_of(broker, str(query.id)).data["destinations"][f"{name}/{BAD}"][
            "consecutive_failures"] == 3
        assert len(poll_all(broker.address, name, "t00")) == 8  # not the oversize row
    finally:
        broker.refuse_sends(name, BAD, refuse=False)
    # the fault clears; the cool-down is over (the ledger's opening time moved 10 minutes back,
    # as a clock would): the probe goes out, succeeds and closes the breaker
    data = ledger_of(broker, str(query.id)).data
    data["destinations"][f"{name}/{BAD}"]["opened_at"] -= 600
    replace_ledger(broker, str(query.id), data)
    add()
    query.processAllAvailable()
    assert query.isActive and query.exception() is None
    got = [json.loads(m.payload)["n"] for m in poll_all(broker.address, name, BAD)]
    assert got == [2000 + 70 + k for k in range(4)]
    assert ledger_of(broker, str(query.id)).data["destinations"][f"{name}/{BAD}"][
        "breaker"] == "closed"
    last = scrape(metrics.url, name)
    routed = last["iggy_routed_messages_routed_total"] - first["iggy_routed_messages_routed_total"]
    assert routed == (196 + 4) + 200  # batch 1: 49 x 4 and 4 dead letters; batch 2: all 50 x 4
    assert last["iggy_routed_rejections_total{reason=circuit_open}"] == 8
    assert last["iggy_routed_breakers_open"] == 0
    assert last["iggy_spark_degraded{component=iggy_routed}"] == 0
    query.stop()
    metrics.stop()
