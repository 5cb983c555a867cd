"""The control topic's records and what a reader concludes from them (pure, no I/O)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from iggy_spark.sink.control_records import (
    EVERY_TASK,
    Admit,
    Claim,
    LedgerRecord,
    Record,
    Start,
    StateView,
    decode,
    encode,
    fold,
)
from iggy_spark.sink.control_topic import MAX_SIZE, SEGMENT_SIZE
from iggy_spark.sink.options import MAX_MESSAGE_BYTES
from iggy_spark.sink.report import Ledger, TaskReport

small = st.integers(min_value=0, max_value=5)


def _ledger(batch: int, **extra: Any) -> LedgerRecord:
    return LedgerRecord({**Ledger().data, "last_batch": batch, **extra})


records = st.one_of(
    st.builds(Start, small, small, small),
    st.builds(Claim, st.sampled_from(["r1", "r2"]), small, st.sampled_from(["s/a", "s/b"]),
              st.text(alphabet="0123456789abcdef", min_size=1, max_size=8)),
    st.builds(_ledger, small),
    st.builds(Admit, st.sampled_from(["s/a", "s/b", "s/c"])),
)


@given(records)
def test_every_record_round_trips(record: Record) -> None:
    assert decode(encode(record)) == record


@given(st.binary(max_size=64))
def test_anything_else_in_the_topic_is_skipped_not_an_error(payload: bytes) -> None:
    record = decode(payload)
    assert record is None or decode(encode(record)) == record


def test_foreign_and_future_records_are_skipped() -> None:
    for payload in (b"", b"[]", b'{"k": "start"}', b'{"k": "compact", "batch": 1}',
                    b'{"k": "ledger", "data": {"no": "batch"}}', b'{"k": "ledger", "data": 3}',
                    b'{"k": "claim", "run": "r", "batch": "x", "destination": "s/t", '
                    b'"nonce": "n"}'):
        assert decode(payload) is None


@given(st.lists(records, max_size=30))
def test_the_newest_ledger_by_batch_wins_and_the_last_of_a_tie(log: list[Record]) -> None:
    view = fold(enumerate(log))
    ledgers = [(offset, r) for offset, r in enumerate(log) if isinstance(r, LedgerRecord)]
    if not ledgers:
        assert view.ledger is None and view.last_batch == -1
        return
    best = max(r.batch for _, r in ledgers)
    last = max(offset for offset, r in ledgers if r.batch == best)
    assert view.last_batch == best and view.ledger_offset == last
    assert view.end == len(log)


@given(st.lists(records, max_size=30), small, small)
def test_a_start_already_there_marks_a_replay(log: list[Record], batch: int, task: int) -> None:
    view = fold(enumerate(log))
    assert view.started(batch, task) == any(
        isinstance(r, Start) and (r.batch, r.task) == (batch, task) for r in log)
    marked = fold([(len(log), Start(batch, EVERY_TASK, 0))], view)
    assert marked.started(batch, task) and marked.started(batch, task + 1)


@given(st.lists(records, max_size=20), st.permutations(range(4)), st.integers(0, 20))
def test_exactly_the_first_claim_in_partition_order_wins(
    noise: list[Record], order: list[int], cut: int
) -> None:
    """Four tasks claim one probe; whatever else is in the log and whenever each reads, the
    one whose claim the partition holds first wins, and every reader agrees."""
    claims = [Claim("run", 7, "s/t", f"task{i}") for i in range(4)]
    log = [*noise[:cut], *(claims[i] for i in order), *noise[cut:]]
    winner = claims[order[0]]
    for claim in claims:
        view = fold(enumerate(log))
        assert view.won(claim) == (claim == winner)
    # a claim of another run or batch does not count against this one
    view = fold(enumerate([Claim("old-run", 7, "s/t", "x"), Claim("run", 6, "s/t", "y"),
                           *log]))
    assert view.won(winner)


@given(st.lists(st.sampled_from("abcdefgh"), max_size=30), st.integers(0, 8),
       st.sets(st.sampled_from("abcdefgh"), max_size=4))
def test_admits_from_every_task_never_exceed_the_cap_together(
    asked: list[str], cap: int, seeded: set[str]
) -> None:
    """Tasks append an admit for each new destination they meet, in any interleaving: the
    destinations every reader admits are the ledger's plus the first new ones in partition
    order, never more than the cap, and readers agree whatever they read first."""
    seed = frozenset(seeded)
    log = [Admit(d) for d in asked]
    view = fold(enumerate([_ledger(2), *log]))
    admitted = {d for d in set(asked) | seed if view.admitted_within(d, seed, cap)}
    new_in_order = list(dict.fromkeys(d for d in asked if d not in seed))
    assert admitted == seed | set(new_in_order[:max(0, cap - len(seed))])
    assert len(admitted - seed) <= max(0, cap - len(seed))
    # an admit before a newer ledger belongs to a batch that ledger holds: it takes no place
    later = fold(enumerate([*log, _ledger(3)]))
    assert later.admits == {}


def test_a_view_read_on_in_two_steps_equals_one_read() -> None:
    log: list[Record] = [_ledger(3), Start(4, 0, 0), Claim("r", 4, "s/t", "a"),
                         Start(4, 1, 0), _ledger(4), Claim("r", 5, "s/t", "b")]
    whole = fold(enumerate(log))
    view = StateView()
    fold(list(enumerate(log))[:3], view)
    fold(list(enumerate(log))[3:], view)
    assert (view.ledger, view.starts, view.claims, view.end) == (
        whole.ledger, whole.starts, whole.claims, whole.end)
    assert view.last_batch == 4 and view.started(4, 1) and not view.started(5, 0)


def test_the_ledger_carries_the_query_state_through_a_record() -> None:
    ledger = Ledger()
    ledger.apply(0, [TaskReport(admitted=[("s", "a")], state_lost=1)])
    record = decode(encode(LedgerRecord(ledger.data)))
    assert isinstance(record, LedgerRecord)
    again = Ledger(record.data)
    assert again.admitted == {("s", "a")} and again.last_batch == 0
    assert again.data["delivery"]["state_lost"] == 1


def test_the_control_topics_segments_are_a_size_iggy_takes() -> None:
    assert SEGMENT_SIZE % 512 == 0 and 2**20 <= SEGMENT_SIZE <= 2**30
    assert MAX_SIZE >= 2**30  # the servers' default segment size


@given(
    appends=st.lists(st.tuples(st.booleans(), st.integers(1, MAX_MESSAGE_BYTES)), max_size=600),
    sealed_only=st.booleans(),
)
def test_retention_by_the_control_topics_bound_never_drops_the_newest_ledger(
    appends: list[tuple[bool, int]], sealed_only: bool
) -> None:
    """Iggy's retention as the module describes it: a segment seals once it reaches the segment
    size; while the topic is over its bound (the sealed segments, or all of them), the oldest
    sealed segment is deleted. Ledgers of any size up to one message, between them the small
    records of a batch (here up to 600 of up to 5 kB): the newest ledger is always still there."""
    segments: list[list[tuple[bool, int]]] = [[]]
    newest: int | None = None
    for n, (is_ledger, size) in enumerate(appends):
        size = size if is_ledger else size % 5_000 + 1  # a start, claim or admit record
        if sum(s for _, s in segments[-1]) >= SEGMENT_SIZE:
            segments.append([])
        segments[-1].append((is_ledger, size))
        if is_ledger:
            newest = n

        def used() -> int:
            counted = segments[:-1] if sealed_only else segments
            return sum(s for segment in counted for _, s in segment)

        while len(segments) > 1 and used() > MAX_SIZE:
            segments.pop(0)
        kept = sum(len(segment) for segment in segments)
        if newest is not None:
            assert n - newest < kept, "the newest ledger's segment was deleted"
