"""Admission rules: name grammar, list grammar, allow/deny semantics against a brute-force
reference model, the cap in every mode, the sink's own destinations (by name and by id) and
missing-destination policies."""

from __future__ import annotations

import pickle
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iggy_spark.errors import AdmissionError
from iggy_spark.sink.admission import (
    WILDCARD,
    Admission,
    AdmissionMode,
    AdmissionReason,
    AdmissionRules,
    Destination,
    Entry,
    MissingDestination,
    MissingPolicy,
    ReservedIds,
    is_valid_name,
    parse_entries,
)
from iggy_spark.sink.refusals import (
    REASONS,
    DeliveryReason,
    Reason,
    check_partition_id,
    rejection,
)

NAME_CHARS = string.ascii_letters + string.digits + "._-"


def reference_valid(name: str) -> bool:
    return 1 <= len(name) <= 255 and all(ch in NAME_CHARS for ch in name)


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "orders", "Orders.v2", "x_y-z", "0", ".", "..", "a" * 255])
def test_valid_names(name: str) -> None:
    assert is_valid_name(name)


@pytest.mark.parametrize(
    "name",
    ["", "a" * 256, "a/b", "é", "naïve", " a", "a ", "a\n", "a\tb", "*", "a*", "a;DROP TABLE x",
     "'; --", "a\x00", "ｏｒｄｅｒｓ", "a,b", "a:b", "\u200b"],  # noqa: RUF001 - a look-alike
)
def test_invalid_names(name: str) -> None:
    assert not is_valid_name(name)


@given(st.text(max_size=300) | st.text(alphabet=NAME_CHARS + "/* é\n", max_size=260))
def test_name_rule_matches_reference(name: str) -> None:
    assert is_valid_name(name) == reference_valid(name)


# --- list grammar ----------------------------------------------------------------------------


def test_parse_entries_keeps_order_and_drops_duplicates() -> None:
    assert parse_entries(" commerce/orders, commerce/*,*/audit , commerce/orders") == (
        Entry("commerce", "orders"),
        Entry("commerce", WILDCARD),
        Entry(WILDCARD, "audit"),
    )


def test_match_all_entry_is_parsed_for_options_to_refuse() -> None:
    (entry,) = parse_entries("*/*")
    assert entry.matches_everything


@pytest.mark.parametrize(
    "text",
    ["", " ", "a/b,", ",a/b", "a/b,,c/d", "a", "a/b/c", "/b", "a/", "a*/b", "a/b*", "**/b",
     "a/?", "a b/c", "é/x", "a/" + "b" * 256, "a/b;c/d", "re:.*/x"],
)
def test_bad_entries_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="entry"):
        parse_entries(text)


_segment = st.text(alphabet=NAME_CHARS + "*/ ,é", min_size=0, max_size=6)


def reference_entries(text: str) -> tuple[Entry, ...] | None:
    """The grammar spelled out: comma-separated, trimmed, exactly two parts, each part a name
    or a lone ``*``; ``None`` when the text must be refused."""
    entries = []
    for item in (part.strip() for part in text.split(",")):
        parts = item.split("/")
        if len(parts) != 2 or not all(p == WILDCARD or reference_valid(p) for p in parts):
            return None
        entries.append(Entry(*parts))
    return tuple(dict.fromkeys(entries))


@given(st.lists(st.tuples(_segment, _segment), min_size=1, max_size=5))
def test_entry_grammar_matches_reference(pairs: list[tuple[str, str]]) -> None:
    text = ",".join(f"{s}/{t}" for s, t in pairs)
    expected = reference_entries(text)
    if expected is None:
        with pytest.raises(ValueError, match="entry"):
            parse_entries(text)
    else:
        assert parse_entries(text) == expected


# --- allow / deny / cap against a reference model --------------------------------------------


def reference_admission(
    rules: AdmissionRules, seed: set[Destination], sequence: list[Destination]
) -> tuple[list[AdmissionReason | None], set[Destination]]:
    admitted = set(seed) - rules.exempt
    verdicts: list[AdmissionReason | None] = []
    for dest in sequence:
        matched = any(
            e.stream in (WILDCARD, dest.stream) and e.topic in (WILDCARD, dest.topic)
            for e in rules.entries
        )
        if not (reference_valid(dest.stream) and reference_valid(dest.topic)):
            verdicts.append(AdmissionReason.INVALID_NAME)
        elif dest in rules.exempt or dest.stream == rules.reserved:
            verdicts.append(AdmissionReason.RESERVED)  # whatever the lists say
        elif rules.mode is AdmissionMode.DENYLIST and matched:
            verdicts.append(AdmissionReason.DENYLIST)
        elif rules.mode is AdmissionMode.ALLOWLIST and not matched:
            verdicts.append(AdmissionReason.NOT_ALLOWLISTED)
        elif dest in admitted:
            verdicts.append(None)
        elif len(admitted) >= rules.max_destinations:
            verdicts.append(AdmissionReason.CAP)
        else:
            admitted.add(dest)
            verdicts.append(None)
    return verdicts, admitted


_names = st.sampled_from(["a", "b", "c", "orders", "", "bad/name", "é"])
_destinations = st.builds(Destination, _names, _names)
_entry_part = st.sampled_from(["a", "b", "c", "orders", WILDCARD])
_entries = st.lists(st.builds(Entry, _entry_part, _entry_part), max_size=4).map(tuple)


@given(
    mode=st.sampled_from(AdmissionMode),
    entries=_entries,
    cap=st.integers(1, 6),
    seed=st.sets(_destinations, max_size=4),
    dlq=st.none() | _destinations,
    state_stream=st.none() | _names,
    sequence=st.lists(_destinations, max_size=30),
)
def test_admission_equals_reference_model(
    mode: AdmissionMode,
    entries: tuple[Entry, ...],
    cap: int,
    seed: set[Destination],
    dlq: Destination | None,
    state_stream: str | None,
    sequence: list[Destination],
) -> None:
    rules = AdmissionRules(
        mode=mode,
        entries=entries if mode is not AdmissionMode.OPEN else (),
        max_destinations=cap,
        exempt=frozenset([dlq] if dlq else []),
        reserved=state_stream,
    )
    admission = Admission(rules, admitted=seed)
    verdicts = [admission.check(d.stream, d.topic) for d in sequence]
    expected, admitted = reference_admission(rules, seed, sequence)
    assert verdicts == expected
    assert admission.admitted == admitted
    assert admission.newly_admitted == admitted - seed
    # The cap holds for whatever this instance added, whatever the mode.
    assert len(admission.admitted) <= max(cap, len(seed - rules.exempt))
    # Verdicts are stable: asking again changes nothing.
    assert [admission.check(d.stream, d.topic) for d in sequence] == expected


@pytest.mark.parametrize(
    ("mode", "entries"),
    [
        (AdmissionMode.OPEN, ()),
        (AdmissionMode.ALLOWLIST, (Entry("s", WILDCARD),)),
        (AdmissionMode.DENYLIST, (Entry("other", WILDCARD),)),
    ],
)
def test_cap_holds_in_every_mode(mode: AdmissionMode, entries: tuple[Entry, ...]) -> None:
    admission = Admission(AdmissionRules(mode=mode, entries=entries, max_destinations=2))
    assert admission.check("s", "t1") is None
    assert admission.check("s", "t2") is None
    assert admission.check("s", "t3") is AdmissionReason.CAP
    assert admission.check("s", "t1") is None  # already admitted: never capped
    assert admission.newly_admitted == {Destination("s", "t1"), Destination("s", "t2")}


def test_seeded_destinations_count_against_the_cap_once() -> None:
    rules = AdmissionRules(max_destinations=2)
    admission = Admission(rules, admitted=[("s", "old")])
    assert admission.check("s", "old") is None
    assert admission.check("s", "new") is None
    assert admission.check("s", "newer") is AdmissionReason.CAP
    assert admission.newly_admitted == {Destination("s", "new")}
    assert admission.admitted == {Destination("s", "old"), Destination("s", "new")}


def test_seeded_destinations_are_still_checked_against_the_lists() -> None:
    rules = AdmissionRules(mode=AdmissionMode.DENYLIST, entries=(Entry("s", "old"),))
    admission = Admission(rules, admitted=[Destination("s", "old")])
    assert admission.check("s", "old") is AdmissionReason.DENYLIST


def test_the_dlq_is_refused_to_rows_and_never_counted() -> None:
    dlq = Destination("ops", "dead-letters")
    rules = AdmissionRules(
        mode=AdmissionMode.DENYLIST,
        entries=(Entry("ops", WILDCARD),),
        max_destinations=1,
        exempt=frozenset([dlq]),
    )
    admission = Admission(rules, admitted=[dlq])
    assert admission.check("app", "events") is None
    assert admission.check(*dlq) is AdmissionReason.RESERVED  # a row would pass for a dead letter
    assert admission.check("app", "more") is AdmissionReason.CAP
    assert admission.check("ops", "other") is AdmissionReason.DENYLIST
    assert dlq not in admission.admitted


@pytest.mark.parametrize("entries", [
    (Entry("iggy_spark_state", WILDCARD), Entry("ops", "dead")),
    (Entry(WILDCARD, WILDCARD),),  # as parse_entries refuses it, but as the rule would read it
])
def test_the_state_stream_and_the_dlq_are_reserved_whatever_the_allowlist_says(
    entries: tuple[Entry, ...],
) -> None:
    rules = AdmissionRules(mode=AdmissionMode.ALLOWLIST, entries=entries,
                           exempt=frozenset([Destination("ops", "dead")]),
                           reserved="iggy_spark_state")
    admission = Admission(rules)
    for stream, topic in (("iggy_spark_state", "query-0b6f"), ("iggy_spark_state", "1"),
                          ("ops", "dead")):
        assert admission.check(stream, topic) is AdmissionReason.RESERVED
        assert rules.list_reason(Destination(stream, topic)) is AdmissionReason.RESERVED
    assert not admission.admitted


def test_reserved_ids_refuse_the_state_streams_topics_and_the_dlq_topic_only() -> None:
    ids = ReservedIds(state_stream=3, dead_letters=(1, 7))
    assert ids.check(3, 0) is ids.check(3, 9) is ids.check(1, 7) is AdmissionReason.RESERVED
    assert ids.check(1, 6) is ids.check(2, 7) is ids.check(0, 0) is None
    assert ReservedIds().check(0, 0) is None  # nothing of the sink's exists yet
    assert ReservedIds(0).check(0, 1) is AdmissionReason.RESERVED  # id 0 is an id like any other


def test_list_reason_ignores_names_and_cap() -> None:
    rules = AdmissionRules(
        mode=AdmissionMode.ALLOWLIST, entries=(Entry("a", "b"),), max_destinations=1
    )
    assert rules.list_reason(Destination("a", "b")) is None
    assert rules.list_reason(Destination("a", "c")) is AdmissionReason.NOT_ALLOWLISTED


def test_admission_state_pickles() -> None:
    admission = Admission(AdmissionRules(max_destinations=3))
    admission.check("a", "b")
    copy = pickle.loads(pickle.dumps(admission))
    assert copy.newly_admitted == {Destination("a", "b")}


# --- reasons, errors, partitions -------------------------------------------------------------


def test_reason_labels() -> None:
    """The admission rules' reasons and the others, apart; the labels users see as before."""
    assert {r.value for r in AdmissionReason} == {
        "cap", "denylist", "not_allowlisted", "invalid_name", "reserved"}
    assert {r.value for r in DeliveryReason} == {
        "circuit_open", "unknown", "too_large", "invalid_row", "partition_id_out_of_range"}
    assert len({r.value for r in REASONS}) == len(REASONS) == 10


@pytest.mark.parametrize("reason", REASONS)
def test_rejection_errors_explain_and_pickle(reason: Reason) -> None:
    error = rejection("s", "t", reason)
    assert error.reason == reason.value and (error.stream, error.topic) == ("s", "t")
    assert "on_admission_failure" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.reason == error.reason


def test_hostile_names_are_quoted_and_truncated_in_errors() -> None:
    hostile = "x\nERROR fake log line " + "y" * 500
    message = str(rejection(hostile, "t", AdmissionReason.INVALID_NAME))
    assert "\n" not in message and len(message) < 400


@pytest.mark.parametrize(
    ("partition", "count", "ok"),
    [(0, 1, True), (3, 4, True), (4, 4, False), (-1, 4, False), (99, 4, False)],
)
def test_partition_ids_count_from_zero(partition: int, count: int, ok: bool) -> None:
    expected = None if ok else DeliveryReason.PARTITION_ID_OUT_OF_RANGE
    assert check_partition_id(partition, count) is expected


# --- missing destinations --------------------------------------------------------------------


def test_default_policy_fills_only_the_null_part() -> None:
    missing = MissingDestination(MissingPolicy.DEFAULT, Destination("ds", "dt"))
    assert missing.resolve(None, None) == Destination("ds", "dt")
    assert missing.resolve("s", None) == Destination("s", "dt")
    assert missing.resolve(None, "t") == Destination("ds", "t")


def test_drop_policy_drops() -> None:
    assert MissingDestination(MissingPolicy.DROP).resolve(None, "t") is None


def test_error_policy_raises_a_picklable_admission_error() -> None:
    with pytest.raises(AdmissionError, match="on_missing_destination") as caught:
        MissingDestination(MissingPolicy.ERROR).resolve("s", None)
    assert caught.value.reason == "missing_destination"
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)


@pytest.mark.parametrize(
    ("policy", "default"),
    [
        (MissingPolicy.DEFAULT, None),
        (MissingPolicy.DROP, Destination("a", "b")),
        (MissingPolicy.ERROR, Destination("a", "b")),
    ],
)
def test_default_destination_goes_with_default_policy_only(
    policy: MissingPolicy, default: Destination | None
) -> None:
    with pytest.raises(ValueError, match="a default destination goes with policy 'default'"):
        MissingDestination(policy, default)
