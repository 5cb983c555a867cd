"""Circuit breakers against a reference state machine, driven by a fake clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iggy_spark.sink.admission import Destination
from iggy_spark.sink.breaker import (
    BreakerBoard,
    BreakerConfig,
    BreakerSnapshot,
    BreakerState,
    CircuitBreaker,
    merge_snapshots,
)

A = Destination("s", "a")
B = Destination("s", "b")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def breaker(threshold: int = 3, cool_down: float = 10.0) -> tuple[CircuitBreaker, FakeClock]:
    clock = FakeClock()
    return CircuitBreaker(BreakerConfig(threshold, cool_down), clock), clock


def trip(b: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        b.record_failure()


def test_opens_after_threshold_consecutive_failures() -> None:
    b, _ = breaker(threshold=3)
    trip(b, 2)
    assert b.state is BreakerState.CLOSED and b.allow()
    trip(b, 1)
    assert b.state is BreakerState.OPEN and not b.allow()


def test_success_resets_the_count() -> None:
    b, _ = breaker(threshold=3)
    for _ in range(5):
        trip(b, 2)
        b.record_success()
    assert b.state is BreakerState.CLOSED
    assert b.snapshot().consecutive_failures == 0


def test_uncounted_failures_never_open() -> None:
    b, _ = breaker(threshold=1)
    for _ in range(100):
        b.record_failure(counts=False, error="disconnected")
    assert b.state is BreakerState.CLOSED and b.allow()
    assert b.snapshot().last_error == "disconnected"


def test_half_open_allows_exactly_one_probe() -> None:
    b, clock = breaker(threshold=1, cool_down=10)
    b.record_failure()
    clock.advance(9.999)
    assert not b.allow()
    clock.advance(0.001)
    assert b.allow()
    assert b.state is BreakerState.HALF_OPEN
    assert not b.allow() and not b.allow()


def test_probe_success_closes() -> None:
    b, clock = breaker(threshold=1)
    b.record_failure()
    clock.advance(10)
    assert b.allow()
    b.record_success()
    assert b.state is BreakerState.CLOSED and b.allow() and b.allow()


def test_probe_failure_reopens_for_a_full_cool_down() -> None:
    b, clock = breaker(threshold=2, cool_down=10)
    trip(b, 2)
    clock.advance(15)
    assert b.allow()
    clock.advance(3)
    b.record_failure(error="boom")
    snap = b.snapshot()
    assert snap.state is BreakerState.OPEN and snap.opened_at == clock.now
    clock.advance(9.5)
    assert not b.allow()
    clock.advance(0.5)
    assert b.allow()


def test_uncounted_probe_failure_releases_the_probe() -> None:
    b, clock = breaker(threshold=1)
    b.record_failure()
    clock.advance(10)
    assert b.allow()
    b.record_failure(counts=False)
    assert b.state is BreakerState.HALF_OPEN
    assert b.allow()  # another probe, at once


def test_lost_probe_expires_after_a_cool_down() -> None:
    b, clock = breaker(threshold=1, cool_down=10)
    b.record_failure()
    clock.advance(10)
    assert b.allow()
    clock.advance(9)
    assert not b.allow()
    clock.advance(1)
    assert b.allow()


def test_outcomes_while_open_are_ignored() -> None:
    b, clock = breaker(threshold=1, cool_down=10)
    b.record_failure()
    opened_at = b.snapshot().opened_at
    clock.advance(5)
    b.record_success()
    b.record_failure()
    assert b.state is BreakerState.OPEN and b.snapshot().opened_at == opened_at


def test_board_keeps_destinations_apart() -> None:
    clock = FakeClock()
    board = BreakerBoard(BreakerConfig(failure_threshold=2, cool_down=5), clock)
    board.record_failure(A, counts=True, error="x")
    board.record_failure(A, counts=True, error="y")
    board.record_failure(B, counts=True)
    assert not board.allow(A) and board.allow(B)
    snapshot = board.snapshot()
    assert snapshot[A] == BreakerSnapshot(BreakerState.OPEN, 2, clock.now, "y")
    assert snapshot[B] == BreakerSnapshot(BreakerState.CLOSED, 1, None, None)
    clock.advance(5)
    assert board.allow(A)
    assert board.state(A) is BreakerState.HALF_OPEN
    board.record_success(A)
    assert board.state(A) is BreakerState.CLOSED


def test_a_seeded_board_refuses_until_the_cool_down_then_one_claimed_probe() -> None:
    clock = FakeClock()
    seed = {A: BreakerSnapshot(BreakerState.OPEN, 3, clock.now - 5, "boom")}
    claims: list[Destination] = []

    def claim(destination: Destination) -> bool:
        claims.append(destination)
        return len(claims) == 1  # the first claimant wins, as with the O_EXCL file

    first = BreakerBoard(BreakerConfig(3, 10.0), clock, seed, claim)
    second = BreakerBoard(BreakerConfig(3, 10.0), clock, seed, claim)
    assert not first.allow(A) and not second.allow(A) and claims == []  # within the cool-down
    assert first.allow(B)  # others unaffected
    clock.advance(5)
    assert first.allow(A) and first.state(A) is BreakerState.HALF_OPEN
    assert not second.allow(A) and second.state(A) is BreakerState.OPEN
    assert first.recorded == frozenset() and claims == [A, A]


def test_trip_opens_whatever_the_count() -> None:
    b, _ = breaker(threshold=5)
    b.record_failure()
    b.trip("stuck")
    assert b.state is BreakerState.OPEN and b.snapshot().last_error == "stuck"


def test_merging_task_snapshots() -> None:
    closed = BreakerSnapshot(BreakerState.CLOSED, 0, None, None)
    failing = BreakerSnapshot(BreakerState.CLOSED, 2, None, "e1")
    early = BreakerSnapshot(BreakerState.OPEN, 3, 100.0, "e2")
    late = BreakerSnapshot(BreakerState.OPEN, 3, 200.0, "e3")
    assert merge_snapshots([closed, failing]) == failing
    assert merge_snapshots([closed, early, late, failing]) == late
    probing = BreakerSnapshot(BreakerState.HALF_OPEN, 3, 150.0, None)
    assert merge_snapshots([probing]).state is BreakerState.OPEN  # unresolved probe: open
    assert BreakerSnapshot.from_dict(late.to_dict()) == late
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_snapshots([])


@pytest.mark.parametrize(("threshold", "cool_down"), [(0, 1.0), (-1, 1.0), (1, 0.0), (1, -1.0)])
def test_config_is_validated(threshold: int, cool_down: float) -> None:
    with pytest.raises(ValueError, match="failure_threshold must be >= 1 and cool_down > 0"):
        BreakerConfig(threshold, cool_down)


# --- reference model -------------------------------------------------------------------------


@dataclass
class Model:
    """The module docstring's transition table, written out naively."""

    threshold: int
    cool_down: float
    state: str = "closed"
    failures: int = 0
    opened_at: float | None = None
    probe_at: float | None = None

    def allow(self, now: float) -> bool:
        if self.state == "closed":
            return True
        if self.state == "open":
            assert self.opened_at is not None
            if now - self.opened_at >= self.cool_down:
                self.state, self.probe_at = "half_open", now
                return True
            return False
        if self.probe_at is None or now - self.probe_at >= self.cool_down:
            self.probe_at = now
            return True
        return False

    def success(self) -> None:
        if self.state != "open":
            self.state, self.failures, self.opened_at, self.probe_at = "closed", 0, None, None

    def failure(self, now: float, counts: bool) -> None:
        if self.state == "open":
            return
        if not counts:
            self.probe_at = None
            return
        self.failures += 1
        if self.state == "half_open" or self.failures >= self.threshold:
            self.state, self.opened_at, self.probe_at = "open", now, None


_events = st.lists(
    st.one_of(
        st.just(("allow",)),
        st.just(("success",)),
        st.tuples(st.just("failure"), st.booleans()),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 1.0, 3.0, 5.0, 7.5])),
    ),
    max_size=60,
)


@given(threshold=st.integers(1, 4), cool_down=st.sampled_from([1.0, 5.0, 7.5]), events=_events)
def test_breaker_equals_reference_model(
    threshold: int, cool_down: float, events: list[Any]
) -> None:
    b, clock = breaker(threshold, cool_down)
    model = Model(threshold, cool_down)
    for event in events:
        match event:
            case ("allow",):
                assert b.allow() == model.allow(clock.now)
            case ("success",):
                b.record_success()
                model.success()
            case ("failure", counts):
                b.record_failure(counts=counts)
                model.failure(clock.now, counts)
            case ("advance", seconds):
                clock.advance(seconds)
        snap = b.snapshot()
        assert (snap.state.value, snap.consecutive_failures) == (model.state, model.failures)
        assert snap.opened_at == model.opened_at


@given(events=_events)
def test_never_two_probes_within_a_cool_down(events: list[Any]) -> None:
    """Without an outcome in between, probes are at least one cool-down apart."""
    b, clock = breaker(threshold=1, cool_down=5.0)
    outstanding_probe: float | None = None
    for event in events:
        match event:
            case ("allow",):
                probing = b.state is not BreakerState.CLOSED
                if b.allow() and probing:
                    assert outstanding_probe is None or clock.now - outstanding_probe >= 5.0
                    outstanding_probe = clock.now
            case ("success",):
                b.record_success()
                outstanding_probe = None
            case ("failure", counts):
                b.record_failure(counts=counts)
                outstanding_probe = None
            case ("advance", seconds):
                clock.advance(seconds)
