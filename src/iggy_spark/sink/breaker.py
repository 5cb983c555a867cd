"""Per-destination circuit breakers: stop hammering a destination that keeps failing.

Pure state machines driven by an injectable clock, so every transition is testable without
waiting. The writer asks :meth:`BreakerBoard.allow` before sending a group and reports the
outcome with :meth:`~BreakerBoard.record_success` or :meth:`~BreakerBoard.record_failure`.

States (per destination)::

    closed --(failure_threshold consecutive counted failures)--> open
    open --(cool_down elapsed, next allow())--> half_open, one probe granted
    half_open --(success)--> closed
    half_open --(counted failure)--> open again, for a full cool_down
    half_open --(uncounted failure)--> half_open, probe slot released

* A success in ``closed`` resets the consecutive-failure count.
* Outcomes reported while ``open`` belong to sends admitted before the breaker opened; they
  are ignored, so the cool-down alone decides when to probe again.
* In ``half_open`` exactly one caller is allowed through. If its outcome is never reported
  (the task died mid-send), the probe lease expires after another ``cool_down`` and a new
  probe is granted, so a destination cannot stay blocked forever.
* ``record_failure(counts=False)`` is for failures that say nothing about the destination:
  a lost connection fails every destination at once and must not trip every breaker. The
  writer classifies errors; this module only honours the verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from iggy_spark.sink.admission import Destination

__all__ = [
    "BreakerBoard",
    "BreakerConfig",
    "BreakerSnapshot",
    "BreakerState",
    "CircuitBreaker",
    "merge_snapshots",
]

Clock = Callable[[], float]
Claim = Callable[[Destination], bool]


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerConfig:
    """``circuit_breaker.failure_threshold`` and ``circuit_breaker.cool_down`` (seconds)."""

    failure_threshold: int = 5
    cool_down: float = 30.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1 or not self.cool_down > 0:
            raise ValueError("failure_threshold must be >= 1 and cool_down > 0")


@dataclass(frozen=True)
class BreakerSnapshot:
    """One breaker, for reports: times are in the board's clock units (seconds)."""

    state: BreakerState
    consecutive_failures: int
    opened_at: float | None
    last_error: str | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in task reports and the ledger."""
        return {"state": str(self.state), "consecutive_failures": self.consecutive_failures,
                "opened_at": self.opened_at, "last_error": self.last_error}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BreakerSnapshot:
        return cls(BreakerState(data.get("state", "closed")),
                   int(data.get("consecutive_failures", 0)), data.get("opened_at"),
                   data.get("last_error"))


def merge_snapshots(snapshots: Iterable[BreakerSnapshot]) -> BreakerSnapshot:
    """One destination's breaker after a micro-batch, from the tasks that sent to it.

    Only tasks that recorded an outcome report a snapshot. Any open one wins (the latest
    opening: its cool-down ends last), a probe left unresolved counts as open; otherwise the
    breaker is closed with the highest consecutive count any task reached.
    """
    given = list(snapshots)
    if not given:
        raise ValueError("nothing to merge")
    opened = [s for s in given if s.state is not BreakerState.CLOSED and s.opened_at is not None]
    if opened:
        latest = max(opened, key=lambda s: s.opened_at or 0.0)
        return BreakerSnapshot(BreakerState.OPEN, latest.consecutive_failures, latest.opened_at,
                               latest.last_error)
    worst = max(given, key=lambda s: s.consecutive_failures)
    return BreakerSnapshot(BreakerState.CLOSED, worst.consecutive_failures, None,
                           worst.last_error or next((s.last_error for s in given
                                                     if s.last_error), None))


class CircuitBreaker:
    """The breaker of one destination; see the module docstring for the transitions."""

    def __init__(
        self, config: BreakerConfig, clock: Clock, claim: Callable[[], bool] | None = None
    ) -> None:
        self._config = config
        self._clock = clock
        self._claim = claim
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at: float | None = None
        self._probe_started_at: float | None = None
        self._last_error: str | None = None

    def restore(self, snapshot: BreakerSnapshot) -> None:
        """Take over a snapshot from an earlier batch; a probe left unresolved counts as open."""
        self._failures = snapshot.consecutive_failures
        self._last_error = snapshot.last_error
        if snapshot.state is not BreakerState.CLOSED and snapshot.opened_at is not None:
            self._state = BreakerState.OPEN
            self._opened_at = snapshot.opened_at

    @property
    def state(self) -> BreakerState:
        return self._state

    def allow(self) -> bool:
        """Whether a send may go now; in ``half_open`` a ``True`` is the (single) probe."""
        if self._state is BreakerState.CLOSED:
            return True
        now = self._clock()
        if self._state is BreakerState.OPEN:
            assert self._opened_at is not None
            if now - self._opened_at < self._config.cool_down:
                return False
            if self._claim is not None and not self._claim():
                return False  # another task of this batch sends the probe
            self._state = BreakerState.HALF_OPEN
        elif self._probe_started_at is not None and (
            now - self._probe_started_at < self._config.cool_down
        ):
            return False
        self._probe_started_at = now
        return True

    def record_success(self) -> None:
        if self._state is BreakerState.OPEN:
            return
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = self._probe_started_at = None

    def record_failure(self, *, counts: bool = True, error: str | None = None) -> None:
        """Report a failed send; ``counts=False`` leaves the failure count untouched."""
        if error is not None:
            self._last_error = error
        if self._state is BreakerState.OPEN:
            return
        if not counts:
            self._probe_started_at = None  # the probe proved nothing: let another one through
            return
        self._failures += 1
        tripped = self._failures >= self._config.failure_threshold
        if tripped or self._state is BreakerState.HALF_OPEN:
            self._state = BreakerState.OPEN
            self._opened_at = self._clock()
            self._probe_started_at = None

    def trip(self, error: str | None = None) -> None:
        """Open now, whatever the count: a send kept failing although other sends to the same
        destination succeeded in between (one bad partition), so the count never got there."""
        if error is not None:
            self._last_error = error
        if self._state is not BreakerState.OPEN:
            self._state = BreakerState.OPEN
            self._opened_at = self._clock()
            self._probe_started_at = None

    def snapshot(self) -> BreakerSnapshot:
        return BreakerSnapshot(self._state, self._failures, self._opened_at, self._last_error)


class BreakerBoard:
    """One :class:`CircuitBreaker` per destination, created on first use.

    Memory is bounded by the admission cap: only admitted destinations are ever sent to.
    The default clock is :func:`time.monotonic`, meaningful within one process only; pass
    ``clock=time.time`` if snapshots must be compared across processes (``seed``).
    """

    def __init__(
        self,
        config: BreakerConfig,
        clock: Clock = time.monotonic,
        seed: Mapping[Destination, BreakerSnapshot] | None = None,
        claim_probe: Claim | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._claim_probe = claim_probe
        self._breakers: dict[Destination, CircuitBreaker] = {}
        self._recorded: set[Destination] = set()
        for destination, snapshot in (seed or {}).items():
            self._breaker(destination).restore(snapshot)

    def _breaker(self, destination: Destination) -> CircuitBreaker:
        breaker = self._breakers.get(destination)
        if breaker is None:
            claim = self._claim_probe
            breaker = self._breakers[destination] = CircuitBreaker(
                self._config, self._clock,
                None if claim is None else (lambda: claim(destination)),
            )
        return breaker

    def allow(self, destination: Destination) -> bool:
        return self._breaker(destination).allow()

    def record_success(self, destination: Destination) -> None:
        self._recorded.add(destination)
        self._breaker(destination).record_success()

    def record_failure(
        self, destination: Destination, *, counts: bool, error: str | None = None
    ) -> None:
        self._recorded.add(destination)
        self._breaker(destination).record_failure(counts=counts, error=error)

    @property
    def recorded(self) -> frozenset[Destination]:
        """Destinations with an outcome recorded on this board: what a task reports back."""
        return frozenset(self._recorded)

    def state(self, destination: Destination) -> BreakerState:
        breaker = self._breakers.get(destination)
        return BreakerState.CLOSED if breaker is None else breaker.state

    def trip(self, destination: Destination, error: str | None = None) -> None:
        self._recorded.add(destination)
        self._breaker(destination).trip(error)

    def record_failed_attempt(self, destination: Destination, error: str, attempt: int) -> bool:
        """Count failure number ``attempt`` in a row of one operation on ``destination``;
        whether its breaker is now open. That many failures open it even when successes
        elsewhere (another partition of the same topic) keep resetting the consecutive count."""
        self.record_failure(destination, counts=True, error=error)
        if attempt >= self._config.failure_threshold:
            self.trip(destination, error)
        return self.state(destination) is BreakerState.OPEN

    def snapshot(self) -> dict[Destination, BreakerSnapshot]:
        return {dest: breaker.snapshot() for dest, breaker in self._breakers.items()}
