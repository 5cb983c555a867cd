"""A write task routes a batch a stretch of rows at a time exactly as it would row by row.

:meth:`RoutingTask.route` hands the outbox stretches of consecutive rows, each row in its group,
while every row is a valid message of an admitted destination
(:meth:`RoutingTask._route_admitted`), and goes on row by row otherwise. Random batches
(destinations interleaved, partition keys or ids or none, any payload sizes against a small
``max_batch_bytes``, effectively-once numbering or not, a breaker opening during a flush, a
refused destination) are routed both ways by tasks whose outbox records each flush instead of
sending: the same flushes, each of the same groups holding the same messages in the same order
with the same first numbers, and the same report.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from iggy_spark.sink import sending
from iggy_spark.sink.admission import Destination
from iggy_spark.sink.breaker import BreakerBoard
from iggy_spark.sink.delivery import Origin
from iggy_spark.sink.encoding import encode_batch
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.sink.refusals import DeliveryReason
from iggy_spark.sink.task import RoutingTask

URL = "iggy://u:p@h:1"
STREAMS, TOPICS = ("s1", "s2"), ("a", "b", "c")
DLQ = Destination("s1", "dead")


class Recorded(RoutingTask):
    """A task whose outbox records what each flush would send; ``opens``: after the flush of
    that number, the breaker of ``s1/a`` opens (as a send's failures open it)."""

    def __init__(self, options: dict[str, str], origin: Origin | None, opens: int | None,
                 refused: frozenset[Destination] = frozenset()) -> None:
        parsed = RoutedOptions.from_options({"url": URL, **options})
        super().__init__(parsed, frozenset(), BreakerBoard(parsed.breaker), origin)
        self.flushes: list[list[tuple[Any, ...]]] = []
        self.opens = opens
        for i, (stream, topic) in enumerate([(s, t) for s in STREAMS for t in TOPICS]):
            destination = Destination(stream, topic)
            self.touched[destination] = sending.Topic(1, i + 1, 1 + i % 3, False)
            self.verdicts[destination] = (DeliveryReason.UNKNOWN if destination in refused
                                          else None)
        self.touched[DLQ] = sending.Topic(1, 99, 1, False)
        self.verdicts[DLQ] = None
        self.outbox.flush = self._record  # type: ignore[method-assign]

    def _record(self) -> None:
        box = self.outbox
        self.flushes.append([(group, [raw for raw in box.raw[group]], box.first_seq.get(group))
                             for group in box.groups])
        box.groups.clear()
        box.raw.clear()
        box.first_seq.clear()
        box.buffered = 0
        if self.opens is not None and len(self.flushes) == self.opens:
            self._refused_by_breaker(Destination("s1", "a"), [])


@st.composite
def batches(draw: st.DrawFn) -> pa.RecordBatch:
    rows = draw(st.integers(1, 60))
    names = st.sampled_from(STREAMS), st.sampled_from(TOPICS)
    run = draw(st.integers(1, 8))  # rows of one destination in a row
    pairs = [draw(st.tuples(*names)) for _ in range(-(-rows // run))]
    columns: dict[str, Any] = {
        "stream": [pairs[i // run][0] for i in range(rows)],
        "topic": [pairs[i // run][1] for i in range(rows)],
        "value": [draw(st.binary(min_size=1, max_size=40)) for _ in range(rows)],
    }
    if draw(st.booleans()):
        columns["id"] = [f"row-{i}" for i in range(rows)]
    keys = draw(st.sampled_from(["none", "key", "id"]))
    if keys == "key":
        columns["partition_key"] = pa.array(
            [draw(st.sampled_from([None, "k1", "k2", "k3"])) for _ in range(rows)], pa.string())
    elif keys == "id":
        columns["partition_id"] = pa.array(
            [draw(st.sampled_from([None, 0, 1, 2, 3])) for _ in range(rows)], pa.int64())
    return pa.RecordBatch.from_pydict(columns)


def _routed(batch: pa.RecordBatch, options: dict[str, str], origin: Origin | None,
            opens: int | None, refused: frozenset[Destination], by_rows: bool) -> Any:
    task = Recorded(options, origin, opens, refused)
    if by_rows:
        enc = encode_batch(batch, task.options)
        task.outbox.keyed = enc.keyed
        task._route_rows(enc, 0)
    else:
        task.route(batch)
    task.outbox.flush()
    report = task.report
    return task.flushes, dict(report.rejected), report.dead_lettered, report.dropped


@settings(max_examples=400, deadline=None)
@given(batches(), st.integers(1, 200), st.booleans(), st.one_of(st.none(), st.integers(1, 4)),
       st.sampled_from([frozenset(), frozenset({Destination("s2", "b")})]),
       st.sampled_from(["dlq", "drop"]))
def test_stretches_route_a_batch_as_rows_do(
    batch: pa.RecordBatch, max_bytes: int, numbered: bool, opens: int | None,
    refused: frozenset[Destination], policy: str,
) -> None:
    encoding = "partition_id" if "partition_id" in batch.schema.names else "bytes"
    options = {"max_batch_bytes": str(max_bytes), "partition_key_encoding": encoding,
               "topic_defaults.partitions_count": "2",
               "on_admission_failure": policy,
               **({"dlq.stream": DLQ.stream, "dlq.topic": DLQ.topic} if policy == "dlq" else {})}
    origin = Origin("q", 3, 0, 0) if numbered else None
    runs = _routed(batch, options, origin, opens, refused, by_rows=False)
    rows = _routed(batch, options, origin, opens, refused, by_rows=True)
    assert runs == rows
    flushes, rejected, dead_lettered, _dropped = rows
    sent = [(group[0], len(raw)) for flush in flushes for group, raw, _ in flush]
    assert sum(n for d, n in sent if d != DLQ) + sum(rejected.values()) == batch.num_rows
    assert sum(n for d, n in sent if d == DLQ) == dead_lettered


def test_a_batch_goes_in_stretches_split_where_the_outbox_fills() -> None:
    batch = pa.RecordBatch.from_pydict({"stream": ["s1"] * 10, "topic": ["a", "b"] * 5,
                                        "value": [b"x" * 10] * 10})
    task = Recorded({"max_batch_bytes": "35"}, Origin("q", 1, 0, 0), None)
    calls: list[int] = []
    add_rows = task.outbox.add_rows
    task.outbox.add_rows = lambda groups, *rest: (  # type: ignore[method-assign]
        calls.append(len(groups)), add_rows(groups, *rest))[1]
    task.route(batch)
    task.outbox.flush()
    assert calls == [4, 4, 2]  # the fourth row fills 35 bytes: flushed after it
    assert [[(group[0].topic, len(raw), first) for group, raw, first in flush]
            for flush in task.flushes] == [[("a", 2, 0), ("b", 2, 0)], [("a", 2, 2), ("b", 2, 2)],
                                           [("a", 1, 4), ("b", 1, 4)]]
