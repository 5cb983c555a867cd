"""Effectively-once delivery, the pure parts: the origin header, the landed prefix, the plan."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from iggy_spark.delivery import STARTED_DIR, Origin, landed_in_tail, plan_batch

names = st.text(alphabet="0123456789abcdef", min_size=1, max_size=16)
numbers = st.integers(min_value=0, max_value=2**63)


@given(names, numbers, numbers, numbers)
def test_origin_header_round_trips(query: str, batch: int, task: int, seq: int) -> None:
    origin = Origin(query, batch, task, seq)
    assert Origin.decode(origin.encode()) == origin
    assert Origin.decode(origin.encode().encode()) == origin  # as bytes, too
    assert origin.encode() == f"{query}:{batch}:{task}:{seq}"


def test_foreign_or_mangled_headers_are_not_ours() -> None:
    for value in (None, 7, "", "abc", "q:1:2", "q:1:2:3:4", ":1:2:3", "q:-1:2:3", "q:1:x:3",
                  "q:1:2: 3", "q:+1:2:3", b"\xff\xfe", "q:1:2:٣"):
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
    assert landed_in_tail(_tail(log), ME) == landed


def test_undecided_without_an_earlier_batch_or_my_group() -> None:
    assert landed_in_tail([], ME) is None
    assert landed_in_tail(_tail([None, Origin("other", 1, 1, 1), Origin("q", 5, 2, 0)]),
                          ME) is None


def test_a_later_batch_before_mine_is_not_trusted() -> None:
    """A checkpoint restored from a backup would replay batch 5 after batch 6 was written."""
    assert landed_in_tail(_tail([Origin("q", 5, 1, 0), Origin("q", 6, 1, 0)]), ME) is None


def _checkpoint(tmp_path: Path, batches: list[int]) -> Path:
    root = tmp_path / "checkpoint"
    (root / "offsets").mkdir(parents=True)
    (root / "metadata").write_text(json.dumps({"id": "0f5e6d7c-1111-2222-3333-444455556666"}))
    for n in batches:
        (root / "offsets" / str(n)).write_text("v1\n{}\n{}\n")
    (root / "offsets" / ".3.crc").write_text("")
    return root


def test_a_new_batch_is_marked_started_and_its_replay_is_recognised(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path, [0, 1, 2])
    ledger = root / "iggy_routed"
    plan = plan_batch(root, ledger, 1, 100)
    assert plan is not None
    assert (plan.query, plan.batch, plan.last_delivered, plan.replay, plan.scan_limit) == (
        "0f5e6d7c11112222", 2, 1, False, 100)
    assert (ledger / STARTED_DIR / "2").exists()
    again = plan_batch(root, ledger, 1, 100)
    assert again is not None and again.replay and again.batch == 2
    (root / "offsets" / "3").write_text("v1\n{}\n{}\n")
    after = plan_batch(root, ledger, 2, 100)
    assert after is not None and (after.batch, after.replay) == (3, False)
    assert sorted(p.name for p in (ledger / STARTED_DIR).iterdir()) == ["3"]


def test_no_plan_without_a_local_checkpoint_or_its_metadata(tmp_path: Path) -> None:
    assert plan_batch(None, None, -1, 100) is None
    root = _checkpoint(tmp_path, [])
    assert plan_batch(root, root / "iggy_routed", -1, 100) is None  # no batch planned yet
    (root / "offsets" / "0").write_text("v1\n{}\n{}\n")
    (root / "metadata").unlink()
    assert plan_batch(root, root / "iggy_routed", -1, 100) is None
