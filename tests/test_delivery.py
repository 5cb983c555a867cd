"""Effectively-once delivery, the pure parts: the origin header and what landed."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from iggy_spark.sink.delivery import Landed, Origin, TailScan, landed_count

names = st.text(alphabet="0123456789abcdef", min_size=1, max_size=16)
numbers = st.integers(min_value=0, max_value=2**63)


@given(names, numbers, numbers, numbers, st.data())
def test_origin_header_round_trips(
    query: str, batch: int, task: int, seq: int, data: st.DataObject
) -> None:
    run = data.draw(st.integers(min_value=1, max_value=min(seq + 1, 2**20)))
    origin = Origin(query, batch, task, seq, run)
    assert Origin.decode(origin.encode()) == origin
    assert Origin.decode(origin.encode().encode()) == origin  # as bytes, too
    assert origin.encode() == f"{query}:{batch}:{task}:{seq}:{run}"


def test_a_header_without_its_run_is_read_as_vouching_for_itself() -> None:
    """Headers the sink wrote before it said how long each send was."""
    assert Origin.decode("q:1:2:3") == Origin("q", 1, 2, 3, 0)


def test_foreign_or_mangled_headers_are_not_ours() -> None:
    for value in (None, 7, "", "abc", "q:1:2", "q:1:2:3:4:5", ":1:2:3", "q:-1:2:3", "q:1:x:3",
                  "q:1:2: 3", "q:+1:2:3", b"\xff\xfe", "q:1:2:٣", "q:1:2:3:0", "q:1:2:3:5",
                  "q:1:2:3:"):
        assert Origin.decode(value) is None, value


ME = Origin("q", 5, 1, 0)


def _tail(log: list[Origin | None]) -> list[Origin | None]:
    return list(reversed(log))


@given(
    st.integers(min_value=0, max_value=40),  # how many of my group landed
    st.integers(min_value=1, max_value=30),  # messages of earlier batches before them
    st.randoms(use_true_random=False),
)
def test_landed_is_the_prefix_my_group_put_there(
    landed: int, earlier: int, rnd: random.Random
) -> None:
    """A partition log built the way the sink writes one: earlier batches of this query, then
    this batch's tasks interleaved with each other and with other writers; the answer is the
    number of my group's messages that were put in, whatever else is around them."""
    log: list[Origin | None] = [Origin("q", rnd.randrange(5), rnd.randrange(3), i)
                                for i in range(earlier)]
    mine = [Origin("q", 5, 1, i) for i in range(landed)]
    others = [Origin("q", 5, 2, i) for i in range(rnd.randrange(20))]
    foreign = [rnd.choice([None, Origin("other", 9, 1, 3), Origin("other", 5, 1, 99)])
               for _ in range(rnd.randrange(20))]
    for stream in (mine, others, foreign):  # merge keeping each writer's own order
        low = 0 if stream is foreign else earlier  # this batch only after the earlier ones
        positions = sorted(rnd.randint(low, len(log)) for _ in stream)
        for offset, (position, message) in enumerate(zip(positions, stream, strict=True)):
            log.insert(position + offset, message)
    assert landed_count(_tail(log), ME) == landed


def test_undecided_without_an_earlier_batch_or_my_group() -> None:
    assert landed_count([], ME) is None
    assert landed_count(_tail([None, Origin("other", 1, 1, 1), Origin("q", 5, 2, 0)]),
                          ME) is None


def test_a_later_batch_before_mine_is_not_trusted() -> None:
    """A checkpoint restored from a backup would replay batch 5 after batch 6 was written."""
    assert landed_count(_tail([Origin("q", 5, 1, 0), Origin("q", 6, 1, 0)]), ME) is None


# -- what a replay skips when rows carry ids ---------------------------------------------------

Log = list[tuple[Origin | None, int]]  # a partition: (origin header, message id), oldest first


def _attempt(
    me: Origin, rows: list[int], log: Log, sends: list[int], landing: int, rnd: random.Random,
    *, replay: bool, limit: int | None = None,
) -> Landed | None:
    """One attempt of a task's group, as the writer makes it: in a replay, read what landed and
    skip those rows by id; number the rest on from there, send them in chunks of ``sends``'
    sizes (each chunk contiguous, its last message marked with its seq and length), with other
    writers' messages landing in between; only the first ``landing`` chunks land (the crash)."""
    landed, seq = None, 0
    if replay:
        landed = Landed()
        scan = TailScan(me, landed)
        tail = log[::-1] if limit is None else log[::-1][:limit]
        scan.feed(tail)
        seq = landed.count
    todo = [i for i in rows if landed is None or not landed.take(i)]
    chunks: list[list[int]] = []
    while todo:
        size = sends[len(chunks) % len(sends)]
        chunks.append(todo[:size])
        todo = todo[size:]
    for chunk in chunks[:landing]:
        for _ in range(rnd.randrange(3)):  # another task of the batch, another writer
            log.append(rnd.choice([(Origin("q", 5, 2, rnd.randrange(9), 1), rnd.randrange(99)),
                                   (None, rnd.randrange(99)), (Origin("z", 5, 1, 0, 1), 1)]))
        log.extend((None, i) for i in chunk[:-1])
        log.append((me._replace(seq=seq + len(chunk) - 1, run=len(chunk)), chunk[-1]))
        seq += len(chunk)
    return landed


def _group(log: Log, me: Origin) -> list[int]:
    """The ids the group put in the log (the test knows: every message of ``me``'s runs)."""
    ours: list[int] = []
    left = 0
    for origin, message_id in reversed(log):
        if left:
            ours.append(message_id)
            left -= 1
        elif origin is not None and (origin.query, origin.batch, origin.task) == (
                me.query, me.batch, me.task):
            ours.append(message_id)
            left = origin.run - 1
    return ours


ids = st.lists(st.integers(min_value=1, max_value=60), max_size=40)


@given(ids, st.lists(ids, min_size=1, max_size=3), st.lists(
    st.integers(min_value=1, max_value=7), min_size=1, max_size=3), st.randoms(
    use_true_random=False))
def test_a_replay_that_reads_other_rows_never_skips_one_that_did_not_land(
    first: list[int], replays: list[list[int]], sends: list[int], rnd: random.Random
) -> None:
    """A snapshot chunk or polled range read again after a crash holds other rows (deleted,
    inserted, reordered, ids repeated): after any number of interrupted attempts and a final
    complete one, every row of the final attempt landed, as often as it appears in it."""
    me = Origin("q", 5, 1, 0)
    log: Log = [(Origin("q", 4, rnd.randrange(3), 0, 1), 0)]  # the batch before
    _attempt(me, first, log, sends, rnd.randrange(len(first) + 1), rnd, replay=False)
    for rows in replays[:-1]:
        _attempt(me, rows, log, sends, rnd.randrange(len(rows) + 1), rnd, replay=True)
    final = replays[-1]
    _attempt(me, final, log, sends, len(final) + 1, rnd, replay=True)
    landed = _group(log, me)
    for i in set(final):
        assert landed.count(i) >= final.count(i), (i, landed, final)


@given(ids, st.integers(min_value=0, max_value=10), st.lists(
    st.integers(min_value=1, max_value=7), min_size=1, max_size=3), st.randoms(
    use_true_random=False))
def test_a_replay_of_the_same_rows_sends_each_once(
    rows: list[int], crashes: int, sends: list[int], rnd: random.Random
) -> None:
    """Replays that give the same rows (the stream's, a deterministic source's): however often
    interrupted, each row lands exactly once, and the group's numbering stays one sequence."""
    me = Origin("q", 5, 1, 0)
    log: Log = [(Origin("q", 4, 0, 0, 1), 0)]
    for attempt in range(crashes + 1):
        last = attempt == crashes
        landing = len(rows) + 1 if last else rnd.randrange(len(rows) + 1)
        landed = _attempt(me, rows, log, sends, landing, rnd, replay=attempt > 0)
        assert landed is None or landed.complete
    assert sorted(_group(log, me)) == sorted(rows)
    marks = [o.seq for o, _ in log if o is not None and (o.query, o.task) == ("q", 1)
             and o.batch == 5]
    assert marks == sorted(marks) and len(set(marks)) == len(marks)


def test_a_scan_cut_short_knows_only_what_it_read_and_says_so() -> None:
    me = Origin("q", 5, 1, 0)
    log: Log = [(Origin("q", 4, 0, 0, 1), 0)]
    rnd = random.Random(1)
    _attempt(me, list(range(1, 31)), log, [5], 6, rnd, replay=False)
    landed = Landed()
    TailScan(me, landed).feed([(o, i) for o, i in log[::-1] if o is None or o.query == "q"][:12])
    assert landed.count == 30 and not landed.complete
    assert sorted(landed.ids.elements()) == list(range(19, 31))[-12:]
    assert not landed.take(1) and landed.take(30) and not landed.take(30)


def test_a_mark_without_its_run_vouches_for_itself_only() -> None:
    me = Origin("q", 5, 1, 0)
    log: Log = [(Origin("q", 4, 0, 0, 1), 0), (None, 1), (None, 2), (Origin("q", 5, 1, 2, 0), 3)]
    landed = Landed()
    assert TailScan(me, landed).feed(log[::-1])  # read to the earlier batch
    assert (landed.count, dict(landed.ids), landed.complete) == (3, {3: 1}, False)


def test_a_later_batch_before_mine_makes_the_tail_untrusted() -> None:
    landed = Landed()
    log: Log = [(Origin("q", 5, 1, 0, 1), 7), (Origin("q", 6, 1, 0, 1), 8)]
    assert TailScan(Origin("q", 5, 1, 0), landed).feed(log[::-1])
    assert not landed.trusted and not landed.complete
