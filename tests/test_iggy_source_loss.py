"""Data loss as the ``iggy`` source sees it, with the server's answers stubbed: partitions that
vanish or shrink under a running query (driver), and ranges whose messages are gone (executor).
``fail_on_data_loss`` decides between a clear error and going on."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from support.broker_fixtures import poll_reply

from connector_common.spark_versions import ReadAllAvailable
from iggy_spark.source import catalog, polling
from iggy_spark.source.errors import DataLoss, SourceError
from iggy_spark.source.offsets import Position, Range
from iggy_spark.source.options import SourceOptions
from iggy_spark.source.reader import IggyStreamReader

pytestmark = pytest.mark.iggy_line

URL = "iggy://iggy:secret@localhost:8090"


def options(fail: bool) -> SourceOptions:
    return SourceOptions.from_options({"url": URL, "stream": "s", "topic_pattern": ".*",
                                       "fail_on_data_loss": str(fail).lower()})


def stub_server(monkeypatch: pytest.MonkeyPatch, latest: dict[Position, int]) -> None:
    monkeypatch.setattr(catalog, "latest", lambda _options: dict(latest))
    monkeypatch.setattr(catalog, "tails",
                        lambda _options, _known=(): {p: catalog.Tail(n, 1)
                                                     for p, n in latest.items()})
    monkeypatch.setattr(catalog, "earliest", lambda _options, positions: {})


@pytest.mark.parametrize(("now", "problem"), [
    ({}, "partition 0 no longer exists"),
    ({Position("gone", 0): 3}, "partition 0 ends at 3, before the checkpoint's offset 10"),
])
@pytest.mark.parametrize("available_now", [False, True])
def test_a_partition_that_vanished_or_shrank_fails_the_query_or_is_passed_over(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    now: dict[Position, int], problem: str, available_now: bool
) -> None:
    stub_server(monkeypatch, now)
    start = {"gone": {"0": 10}}

    def reader(fail: bool) -> IggyStreamReader:
        made = IggyStreamReader(options(fail), None)
        if available_now:
            made.prepareForTriggerAvailableNow()
        return made

    with pytest.raises(SourceError, match=f"reading topic 'gone': {problem}.*"
                                          "fail_on_data_loss=false"):
        reader(fail=True).latestOffset(start, ReadAllAvailable())
    end = reader(fail=False).latestOffset(start, ReadAllAvailable())
    assert end == ({"gone": {"0": 3}} if now else {})  # dropped, or read on from where it is
    assert f"topic 'gone' {problem}" in caplog.text  # passed over, not quietly


def test_available_now_started_from_latest_reads_nothing_older_than_its_start(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spark takes the ceiling before a new query's initialOffset: messages that arrive in
    # between put `latest` past the ceiling; the query must read nothing, not the history.
    position = Position("t", 0)
    stub_server(monkeypatch, {position: 990})
    reader = IggyStreamReader(SourceOptions.from_options(
        {"url": URL, "stream": "s", "topics": "t", "starting_offsets": "latest"}), None)
    reader.prepareForTriggerAvailableNow()
    stub_server(monkeypatch, {position: 1000})
    start = reader.initialOffset()
    assert start == {"t": {"0": 1000}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == start
    assert not any(p.value for p in reader.partitions(start, end))


@pytest.mark.parametrize("fail", [True, False])
def test_a_partition_retention_emptied_begins_at_its_end(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fail: bool
) -> None:
    # retention removed every message: the partition still ends at 10 and holds nothing
    position = Position("t", 0)
    stub_server(monkeypatch, {position: 10})
    reader = IggyStreamReader(options(fail), None)
    assert reader.initialOffset() == {"t": {"0": 10}}  # not 0, where every offset is lost
    # the same partition appearing while the query runs: its ten messages were never read
    end = reader.latestOffset({}, ReadAllAvailable())
    assert end == {"t": {"0": 10}}
    if fail:
        with pytest.raises(DataLoss, match=r"offsets \[0, 10\) of topic 't' partition 0 are "
                                           "lost .*appeared while the query ran"):
            reader.partitions({}, end)
    else:
        assert not any(p.value for p in reader.partitions({}, end))
        assert "skipped offsets [0, 10) of topic 't' partition 0" in caplog.text


def stub_polls(monkeypatch: pytest.MonkeyPatch, kept_from: int, kept_to: int) -> None:
    """Polls answer as a partition that only keeps offsets ``[kept_from, kept_to)``."""

    def poll(_options: SourceOptions, _topic: str, _partition: int, start: int, _end: int,
             _count: int) -> Future[bytes]:
        first = max(start, kept_from)
        answer: Future[bytes] = Future()
        kept = range(first, min(first + 4, kept_to))
        answer.set_result(poll_reply(first, [(b"p", b"")] * len(kept)))
        return answer

    monkeypatch.setattr(polling, "_poll", poll)


def test_messages_removed_by_retention_are_refused_or_skipped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stub_polls(monkeypatch, kept_from=5, kept_to=12)
    with pytest.raises(DataLoss, match=r"offsets \[2, 5\) of topic 't' partition 0 are lost "
                                       r"\(older than the oldest message kept\)"):
        list(polling.read_range(options(fail=True), Range("t", 0, 2, 10)))
    batches = polling.read_range(options(fail=False), Range("t", 0, 2, 10))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(5, 10))
    assert "skipped offsets [2, 5) of topic 't' partition 0, lost (older than" in caplog.text


def test_a_range_the_partition_no_longer_has_is_lost_too(monkeypatch: pytest.MonkeyPatch) -> None:
    stub_polls(monkeypatch, kept_from=0, kept_to=6)  # the partition was recreated, shorter
    with pytest.raises(DataLoss, match=r"offsets \[6, 10\).*\(no longer in the topic\)"):
        list(polling.read_range(options(fail=True), Range("t", 0, 0, 10)))
    batches = polling.read_range(options(fail=False), Range("t", 0, 0, 10))
    assert sum(b.num_rows for b in batches) == 6


def test_an_unreachable_server_fails_the_poll_without_asking_it_again(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from iggy_spark.failures import Disconnected

    def poll(*_args: object) -> Future[bytes]:
        answer: Future[bytes] = Future()
        answer.set_exception(Disconnected("Iggy at localhost:8090 unreachable for 30s"))
        return answer

    def holds(*_args: object) -> bool:
        raise AssertionError("asked whether the topic exists after 30 s of no server")

    monkeypatch.setattr(polling, "_poll", poll)
    monkeypatch.setattr(catalog, "holds", holds)
    with pytest.raises(Disconnected, match="unreachable for 30s"):
        list(polling.read_range(options(fail=False), Range("t", 0, 0, 10)))
