"""Which destinations a row may be sent to: pure rules, no I/O, no Spark.

Rows name their own destination, so a bug or a hostile value upstream could otherwise create
streams and topics without bound. Every row's destination goes through the same sequence
(the writer runs the steps in this order; each step is a function or class here or in
:mod:`iggy_spark.sink.breaker`):

1. stream or topic is null → :class:`MissingDestination` applies ``on_missing_destination``
   (fill in the defaults, drop the row, or fail);
2. :func:`is_valid_name` on both parts → ``invalid_name``;
3. the sink's own destinations, whatever the lists say: the state stream (every query's
   control topic is in it) and the dead-letter topic → ``reserved``;
4. ``admission.mode``: a denylist match → ``denylist``; no allowlist match → ``not_allowlisted``;
5. ``admission.max_destinations``: a destination not yet admitted by the query when the cap is
   reached → ``cap`` (the cap holds in every mode: ``open`` means "no list", not "unbounded");
6. the destination's circuit breaker is open → ``circuit_open`` (:mod:`iggy_spark.sink.breaker`);
7. the topic, found (or created) by name: at the id of the state stream or of the dead-letter
   topic → ``reserved`` (:class:`ReservedIds`).

Steps 2-5 are :meth:`Admission.check`. The rules' verdicts (steps 2-5 and 7) are an
:class:`AdmissionReason`; the breaker's (step 6) and what the sink finds once a row passed them
(a topic missing, a row that cannot become a message, a partition id past the topic's) are not
rules of admission but a :class:`~iggy_spark.sink.refusals.DeliveryReason`. Any reason
(:data:`~iggy_spark.sink.refusals.Reason`) then follows ``on_admission_failure``
(:func:`~iggy_spark.sink.refusals.rejection`).

The sink writes to the dead-letter topic itself, without these steps and without counting it
against the cap, so failures can always be parked somewhere; rows may not name it (a row would
pass for a dead letter), except that defaults naming it take rows without a destination.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from iggy_spark.errors import AdmissionError, show

__all__ = [
    "NAME_RULE",
    "WILDCARD",
    "Admission",
    "AdmissionMode",
    "AdmissionReason",
    "AdmissionRules",
    "Destination",
    "Entry",
    "MissingDestination",
    "MissingPolicy",
    "ReservedIds",
    "is_valid_name",
    "parse_entries",
]

WILDCARD = "*"
NAME_RULE = "1 to 255 characters from A-Z a-z 0-9 . _ -"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")


class Destination(NamedTuple):
    """A (stream, topic) pair; a tuple so that it hashes fast and pickles small."""

    stream: str
    topic: str

    def __str__(self) -> str:
        return f"{self.stream}/{self.topic}"


class AdmissionReason(StrEnum):
    """Why the admission rules refused a row's destination; the values are the ``reason`` label
    of the rejection counter and the ``iggy_spark.reason`` header of a dead letter."""

    CAP = "cap"
    DENYLIST = "denylist"
    NOT_ALLOWLISTED = "not_allowlisted"
    INVALID_NAME = "invalid_name"
    RESERVED = "reserved"

    @property
    def advice(self) -> str:
        """What the user can do about it, for the error under ``on_admission_failure=error``."""
        return _ADVICE[self]


_ADVICE = {
    AdmissionReason.CAP: "the query already writes to admission.max_destinations destinations; "
    "raise the cap if this destination is expected",
    AdmissionReason.DENYLIST: "the destination matches admission.denylist",
    AdmissionReason.NOT_ALLOWLISTED: "the destination matches no entry of admission.allowlist",
    AdmissionReason.INVALID_NAME: f"stream and topic names must be {NAME_RULE}",
    AdmissionReason.RESERVED: "the destination is the sink's own: its state_stream (the "
    "queries' control topics) or its dlq.stream/dlq.topic, which rows may never name",
}


def is_valid_name(name: str) -> bool:
    """Whether ``name`` may name a stream or topic created by this sink."""
    return _NAME.fullmatch(name) is not None


class AdmissionMode(StrEnum):
    OPEN = "open"
    ALLOWLIST = "allowlist"
    DENYLIST = "denylist"


@dataclass(frozen=True)
class Entry:
    """One ``stream/topic`` list entry; each segment is a literal name or ``*`` on its own."""

    stream: str
    topic: str

    @property
    def matches_everything(self) -> bool:
        return self.stream == WILDCARD and self.topic == WILDCARD

    def matches(self, destination: Destination) -> bool:
        return self.stream in (WILDCARD, destination.stream) and self.topic in (
            WILDCARD,
            destination.topic,
        )

    def __str__(self) -> str:
        return f"{self.stream}/{self.topic}"


def parse_entries(text: str) -> tuple[Entry, ...]:
    """Parse a comma-separated ``stream/topic`` list, duplicates removed, order kept.

    Deliberately narrow: no partial globs (``orders-*``), no regular expressions, so an entry
    means exactly what it says. Raises :class:`ValueError` describing the first bad entry.
    """
    entries: dict[Entry, None] = {}
    for position, raw in enumerate(text.split(","), start=1):
        item = raw.strip()
        segments = item.split("/")
        if not item:
            raise ValueError(f"entry {position} is empty; entries are comma-separated stream/topic")
        if len(segments) != 2:
            raise ValueError(f"entry {position} ({show(item)}) must be exactly stream/topic")
        for segment in segments:
            if segment != WILDCARD and not is_valid_name(segment):
                raise ValueError(
                    f"entry {position} ({show(item)}): each part must be a name of {NAME_RULE}, "
                    f"or * alone (partial wildcards such as orders-* are not supported)"
                )
        entries[Entry(*segments)] = None
    return tuple(entries)


class _Matcher:
    """Set lookups equivalent to ``any(entry.matches(d) for entry in entries)``."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self._exact: set[Destination] = set()
        self._streams: set[str] = set()
        self._topics: set[str] = set()
        self._everything = False
        for entry in entries:
            if entry.matches_everything:
                self._everything = True
            elif entry.topic == WILDCARD:
                self._streams.add(entry.stream)
            elif entry.stream == WILDCARD:
                self._topics.add(entry.topic)
            else:
                self._exact.add(Destination(entry.stream, entry.topic))

    def __call__(self, destination: Destination) -> bool:
        return (
            self._everything
            or destination in self._exact
            or destination.stream in self._streams
            or destination.topic in self._topics
        )


@dataclass(frozen=True)
class AdmissionRules:
    """The admission settings of a query, as parsed from its options (picklable).

    ``entries`` is the allowlist in ``allowlist`` mode, the denylist in ``denylist`` mode and
    empty in ``open`` mode. ``exempt`` holds the dead-letter destination, if any: never
    counted against the cap, and refused to rows as ``reserved``.
    """

    mode: AdmissionMode = AdmissionMode.OPEN
    entries: tuple[Entry, ...] = ()
    max_destinations: int = 256
    exempt: frozenset[Destination] = field(default_factory=frozenset)
    reserved: str | None = None
    """The sink's own state stream (``state_stream``): every topic of it refused to rows."""

    def list_reason(self, destination: Destination) -> AdmissionReason | None:
        """The reserved and allow/deny verdicts alone (no name check, no cap): used to vet
        defaults."""
        return _list_verdict(self, _Matcher(self.entries), destination)


def _list_verdict(
    rules: AdmissionRules, matcher: _Matcher, destination: Destination
) -> AdmissionReason | None:
    if destination.stream == rules.reserved or destination in rules.exempt:
        return AdmissionReason.RESERVED
    mode = rules.mode
    if mode is AdmissionMode.DENYLIST and matcher(destination):
        return AdmissionReason.DENYLIST
    if mode is AdmissionMode.ALLOWLIST and not matcher(destination):
        return AdmissionReason.NOT_ALLOWLISTED
    return None


class Admission:
    """Decides steps 2-4 for one writer task and remembers what it admitted.

    The cap is per query, but Spark runs the writer as many tasks over many micro-batches. The
    driver therefore keeps the query's set of admitted destinations and seeds each task with
    it (``admitted=``); the task reads back :attr:`newly_admitted` and returns it in its commit
    message for the driver to merge. Seeded destinations still pass the name and list checks
    (options may have changed since they were admitted) but never count against the cap twice.
    Tasks of one batch admit new destinations through ``admit`` (the query's control topic,
    :meth:`iggy_spark.sink.control_topic.ControlTopic.admit`): it says whether a destination
    has a place within the cap among every task's admissions, in the order the topic received
    them, so tasks running at the same time never admit more than the cap between them.
    Without it (no query state: the task cannot read Spark's ids) the cap holds per task.

    Verdicts are memoised per destination: the admitted set only grows and the cap never
    shrinks, so a destination's verdict cannot change during the task's lifetime. Admission is
    not revoked when creating or sending to the destination later fails: the cap bounds the
    destinations the query tried to use, and the circuit breaker handles the failures.
    """

    def __init__(
        self,
        rules: AdmissionRules,
        admitted: Iterable[Destination] = (),
        admit: Callable[[Destination], bool] | None = None,
    ) -> None:
        self._rules = rules
        self._admit = admit
        self._matcher = _Matcher(rules.entries)
        self._seeded = frozenset(Destination(*d) for d in admitted) - rules.exempt
        self._admitted = set(self._seeded)
        self._verdicts: dict[Destination, AdmissionReason | None] = {}

    @property
    def rules(self) -> AdmissionRules:
        return self._rules

    @property
    def admitted(self) -> frozenset[Destination]:
        """Every destination counted against the cap: seeded plus newly admitted."""
        return frozenset(self._admitted)

    @property
    def newly_admitted(self) -> frozenset[Destination]:
        """Destinations this instance admitted that were not in the seed."""
        return frozenset(self._admitted - self._seeded)

    def check(self, stream: str, topic: str) -> AdmissionReason | None:
        """``None`` if the destination is admitted (recording it), else why not."""
        destination = Destination(stream, topic)
        try:
            return self._verdicts[destination]
        except KeyError:
            verdict = self._decide(destination)
            self._verdicts[destination] = verdict
            return verdict

    def _decide(self, destination: Destination) -> AdmissionReason | None:
        if not (is_valid_name(destination.stream) and is_valid_name(destination.topic)):
            return AdmissionReason.INVALID_NAME
        reason = _list_verdict(self._rules, self._matcher, destination)
        if reason is not None:
            return reason
        if destination not in self._admitted:
            if len(self._admitted) >= self._rules.max_destinations:
                return AdmissionReason.CAP
            if self._admit is not None and not self._admit(destination):
                return AdmissionReason.CAP  # other tasks of the query took the places left
            self._admitted.add(destination)
        return None


@dataclass(frozen=True)
class ReservedIds:
    """The ids the server gave the sink's own names: its state stream (``None`` while it does
    not exist) and its dead-letter topic (stream id, topic id).

    Names are compared by :meth:`Admission.check`; these ids are compared once a destination's
    topic was found by name, so that no way of reaching an id (an SDK reading a name as an id,
    an id kept from before a topic was deleted) puts a row in a control topic or among the
    dead letters.
    """

    state_stream: int | None = None
    dead_letters: tuple[int, int] | None = None

    def check(self, stream_id: int, topic_id: int) -> AdmissionReason | None:
        """``reserved`` for a topic of the state stream or the dead-letter topic, else ``None``."""
        if stream_id == self.state_stream or (stream_id, topic_id) == self.dead_letters:
            return AdmissionReason.RESERVED
        return None


class MissingPolicy(StrEnum):
    """``on_missing_destination``; the values are also the ``action`` label of its counter."""

    DEFAULT = "default"
    DROP = "drop"
    ERROR = "error"


@dataclass(frozen=True)
class MissingDestination:
    """Step 1: what a row whose stream or topic is null gets.

    The defaults stand in for null parts only; they are not a fallback for rejected or
    failing destinations, and the filled-in destination still goes through steps 2-5.
    """

    policy: MissingPolicy
    default: Destination | None = None

    def __post_init__(self) -> None:
        if (self.policy is MissingPolicy.DEFAULT) != (self.default is not None):
            raise ValueError("a default destination goes with policy 'default', and only with it")

    def resolve(self, stream: str | None, topic: str | None) -> Destination | None:
        """The destination to use, or ``None`` to drop the row; raises under policy ``error``.

        Only call it for rows with a null part: complete destinations need no resolving.
        """
        if self.default is not None:
            return Destination(
                self.default.stream if stream is None else stream,
                self.default.topic if topic is None else topic,
            )
        if self.policy is MissingPolicy.DROP:
            return None
        raise AdmissionError(
            stream,
            topic,
            "missing_destination",
            "the row's stream or topic is null and on_missing_destination=error; set "
            "default_stream and default_topic, or on_missing_destination=drop",
        )
