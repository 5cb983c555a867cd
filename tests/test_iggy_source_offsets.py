"""The ``iggy`` source's pure planning: offset maps, their resolution, admission control, range
splitting, and option parsing. No services."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iggy_spark.errors import ConfigError
from iggy_spark.source.errors import DataLoss
from iggy_spark.source.offsets import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    Position,
    admit,
    behind,
    from_json,
    parse_ending_spec,
    parse_offset_spec,
    resolve,
    split,
    to_json,
)
from iggy_spark.source.options import SourceOptions, parse_timestamp

SECRET = "pa55-w0rd"
URL = f"iggy://iggy:{SECRET}@localhost:8090"

POSITIONS = st.builds(Position, st.text(min_size=1, max_size=8), st.integers(0, 1000))
OFFSET_MAPS = st.dictionaries(POSITIONS, st.integers(0, 2**62), max_size=12)


def options(**extra: str) -> SourceOptions:
    return SourceOptions.from_options({"url": URL, "stream": "s", "topics": "a", **extra})


# -- offset maps ---------------------------------------------------------------------------------

@given(OFFSET_MAPS)
def test_json_round_trip_is_canonical(offsets: dict[Position, int]) -> None:
    document = to_json(offsets)
    assert from_json(json.loads(json.dumps(document))) == offsets
    # Spark compares offsets as JSON text: the same map always serialises the same way
    shuffled = dict(reversed(list(offsets.items())))
    assert json.dumps(to_json(shuffled)) == json.dumps(document)


def test_partitions_are_in_numeric_order() -> None:
    document = to_json({Position("t", 10): 1, Position("t", 2): 1, Position("a", 0): 5})
    assert json.dumps(document) == '{"a": {"0": 5}, "t": {"2": 1, "10": 1}}'


@pytest.mark.parametrize(("text", "problem"), [
    ("nonsense", "expected earliest, latest or a JSON map"),
    ("[1, 2]", "must be a JSON object"),
    ('{"t": 5}', "expected an object of partition: offset"),
    ('{"t": {"x": 5}}', "partition 'x' is not a number"),
    ('{"t": {"0": -3}}', "is not an integer >= -2"),
    ('{"t": {"0": 1.5}}', "is not an integer"),
    ('{"t": {"0": true}}', "is not an integer"),
])
def test_malformed_offset_maps_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_offset_spec(text)


def test_ending_offsets_refuse_earliest() -> None:
    assert parse_ending_spec("latest") == OffsetSpec(LATEST)
    assert parse_ending_spec('{"t": {"0": 4}}') == OffsetSpec(None, {Position("t", 0): 4})
    for text in ("earliest", '{"t": {"0": 4, "1": -2}}'):
        with pytest.raises(ValueError, match="earliest cannot end a read"):
            parse_ending_spec(text)


def test_offset_words() -> None:
    assert parse_offset_spec(" Earliest ") == OffsetSpec(EARLIEST)
    assert parse_offset_spec("latest") == OffsetSpec(LATEST)
    assert parse_offset_spec('{"t": {"1": -1}}') == OffsetSpec(None, {Position("t", 1): LATEST})


def test_resolve_words_explicit_and_fallback() -> None:
    latest = {Position("t", 0): 10, Position("t", 1): 7, Position("u", 0): 3}
    earliest = {Position("t", 0): 2}
    spec = OffsetSpec(None, {Position("t", 1): 5, Position("u", 0): LATEST})
    assert resolve(spec, earliest, latest, EARLIEST) == {
        Position("t", 0): 2, Position("t", 1): 5, Position("u", 0): 3}
    assert resolve(OffsetSpec(LATEST), earliest, latest, EARLIEST) == latest
    # partitions holding nothing (retention emptied them) begin at their end, not at 0, where
    # every offset is gone
    assert resolve(OffsetSpec(EARLIEST), {}, latest, LATEST) == latest


def test_resolve_refuses_an_offset_past_the_end_and_unknown_partitions() -> None:
    latest = {Position("t", 0): 10}
    with pytest.raises(ValueError, match="offset 11 of topic 't' partition 0 is past its end"):
        resolve(OffsetSpec(None, {Position("t", 0): 11}), {}, latest, EARLIEST)
    with pytest.raises(ValueError, match="topic 't' partition 3 is not subscribed"):
        resolve(OffsetSpec(None, {Position("t", 3): 1}), {}, latest, EARLIEST)


# -- admission control ----------------------------------------------------------------------------

@st.composite
def backlogs(draw: st.DrawFn) -> tuple[dict[Position, int], dict[Position, int]]:
    latest = draw(st.dictionaries(POSITIONS, st.integers(0, 10_000), max_size=10))
    start = {p: draw(st.integers(0, end)) for p, end in latest.items() if draw(st.booleans())}
    return start, latest


@given(backlogs(), st.one_of(st.none(), st.integers(1, 20_000)))
def test_admission_stays_within_the_budget_and_makes_progress(
    plan: tuple[dict[Position, int], dict[Position, int]], budget: int | None
) -> None:
    start, latest = plan
    end = admit(start, latest, budget)
    assert end.keys() == latest.keys()
    for p in latest:
        assert start.get(p, 0) <= end[p] <= latest[p]
    admitted = sum(end[p] - start.get(p, 0) for p in latest)
    waiting = sum(latest[p] - start.get(p, 0) for p in latest)
    if budget is None or waiting <= budget:
        assert end == latest
    else:
        assert admitted == budget  # all of the budget is used: no trigger reads less than it may


@given(backlogs(), st.integers(1, 5_000))
def test_admission_is_fair(
    plan: tuple[dict[Position, int], dict[Position, int]], budget: int
) -> None:
    """No partition with more waiting gets less than an even share of what was given out."""
    start, latest = plan
    end = admit(start, latest, budget)
    got = {p: end[p] - start.get(p, 0) for p in latest}
    short = [got[p] for p in latest if got[p] < latest[p] - start.get(p, 0)]
    if short:
        assert max(got.values()) <= min(short) + 1


@st.composite
def weighed(draw: st.DrawFn) -> tuple[dict[Position, int], dict[Position, int],
                                      dict[Position, int]]:
    start, latest = draw(backlogs())
    return start, latest, {p: draw(st.integers(0, 3_000)) for p in latest}


@given(weighed(), st.integers(1, 200_000))
def test_admission_by_bytes_stays_within_the_budget_or_admits_one_message(
    plan: tuple[dict[Position, int], dict[Position, int], dict[Position, int]], budget: int
) -> None:
    start, latest, cost = plan
    end = admit(start, latest, budget, cost)
    got = {p: end[p] - start.get(p, 0) for p in latest}
    assert all(0 <= got[p] <= latest[p] - start.get(p, 0) for p in latest)
    spent = sum(got[p] * max(1, cost[p]) for p in latest)
    waiting = {p: latest[p] - start.get(p, 0) for p in latest}
    if sum(waiting[p] * max(1, cost[p]) for p in latest) <= budget:
        assert end == latest
    elif any(waiting.values()):
        assert spent <= budget or sum(got.values()) == 1  # a message larger than the budget
        assert sum(got.values()) >= 1  # every batch makes progress
        # the budget is used up to what fairness allows: the partition held back the most has
        # a next message larger than what is left
        short = [p for p in latest if got[p] < waiting[p]]
        if short and spent <= budget:
            least = min(short, key=lambda p: (got[p] * max(1, cost[p]), p))
            assert max(1, cost[least]) > budget - spent


@given(weighed(), st.integers(1, 200_000))
def test_admission_by_bytes_is_fair_in_bytes(
    plan: tuple[dict[Position, int], dict[Position, int], dict[Position, int]], budget: int
) -> None:
    """A partition held back got, in bytes, no less than any other minus one message of the
    larger of the two."""
    start, latest, cost = plan
    end = admit(start, latest, budget, cost)
    spent = {p: (end[p] - start.get(p, 0)) * max(1, cost[p]) for p in latest}
    short = [p for p in latest if end[p] < latest[p]]
    for held in short:
        for other in latest:
            assert spent[other] <= spent[held] + max(1, cost[held], cost[other])


def test_admission_with_unit_costs_is_admission_by_messages() -> None:
    start = {Position("t", 0): 3}
    latest = {Position("t", 0): 50, Position("t", 1): 7, Position("u", 0): 90}
    for budget in (1, 10, 33, 100, 1000):
        assert admit(start, latest, budget, dict.fromkeys(latest, 1)) == admit(
            start, latest, budget)


def test_lag_counts_unread_messages_and_new_partitions_from_zero() -> None:
    end = {Position("t", 0): 5, Position("t", 1): 9}
    latest = {Position("t", 0): 8, Position("t", 1): 9, Position("u", 0): 4}
    assert behind(end, latest) == {Position("t", 0): 3, Position("t", 1): 0, Position("u", 0): 4}


# -- range splitting ------------------------------------------------------------------------------

@given(backlogs(), st.integers(1, 3_000))
def test_split_covers_each_range_once_in_bounded_pieces(
    plan: tuple[dict[Position, int], dict[Position, int]], size: int
) -> None:
    start, end = plan
    ranges = split(start, end, size)
    covered: dict[Position, list[int]] = {}
    for r in ranges:
        assert 0 < r.end - r.start <= size
        covered.setdefault(Position(r.topic, r.partition), []).extend(range(r.start, r.end))
    for p, stop in end.items():
        assert covered.get(p, []) == list(range(start.get(p, 0), stop))


# -- options --------------------------------------------------------------------------------------

def test_defaults() -> None:
    parsed = options()
    assert parsed.topics == ("a",)
    assert parsed.starting == OffsetSpec(EARLIEST)
    assert parsed.ending == OffsetSpec(LATEST)
    assert parsed.max_messages_per_trigger is None
    assert parsed.max_bytes_per_trigger is None
    assert options(max_bytes_per_trigger="8MB").max_bytes_per_trigger == 8 << 20
    assert parsed.fail_on_data_loss is True
    assert pickle.loads(pickle.dumps(parsed)) == parsed


@pytest.mark.parametrize(("given_options", "option", "problem"), [
    ({"stream": ""}, "stream", "is required"),
    ({"url": "http://x"}, "url", "must look like"),
    ({"topics": " , "}, "topics", "lists no topic"),
    ({"topic_pattern": "a.*"}, "topics", "exactly one of"),
    ({"starting_offsets": '{"t": {"0": "x"}}'}, "starting_offsets", "not an integer"),
    ({"ending_offsets": "soon"}, "ending_offsets", "expected earliest, latest"),
    ({"max_messages_per_trigger": "0"}, "max_messages_per_trigger", "bad value"),
    ({"max_bytes_per_trigger": "0"}, "max_bytes_per_trigger", "must be between 1 byte"),
    ({"max_bytes_per_trigger": "lots"}, "max_bytes_per_trigger", "expected a size"),
    ({"starting_timestamp": "yesterday"}, "starting_timestamp", "expected an ISO-8601 time"),
    ({"starting_timestamp": "1", "starting_offsets": "latest"}, "starting_timestamp",
     "not both"),
    ({"ending_timestamp": "tomorrow"}, "ending_timestamp", "expected an ISO-8601 time"),
    ({"ending_timestamp": "1", "ending_offsets": "latest"}, "ending_timestamp", "not both"),
    ({"fail_on_data_loss": "maybe"}, "fail_on_data_loss", "bad value"),
    ({"max_mesages_per_trigger": "5"}, "max_mesages_per_trigger",
     "did you mean 'max_messages_per_trigger'"),
])
def test_bad_options_are_refused_naming_the_option(
    given_options: dict[str, str], option: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=f"option '{option}'.*{problem}") as raised:
        options(**given_options)
    assert raised.value.option == option
    assert SECRET not in str(raised.value)


def test_starting_timestamps_are_microseconds_since_the_epoch() -> None:
    assert parse_timestamp("1764064800000") == 1_764_064_800_000_000
    assert parse_timestamp("2025-11-25T10:00:00Z") == 1_764_064_800_000_000
    assert parse_timestamp("2025-11-25T10:00:00") == 1_764_064_800_000_000  # UTC when unnamed
    assert parse_timestamp("2025-11-25T11:00:00.5+01:00") == 1_764_064_800_500_000
    assert options(starting_timestamp="1").starting_timestamp == 1000
    assert options(ending_timestamp="2").ending_timestamp == 2000


def test_topic_pattern_is_a_full_match() -> None:
    parsed = SourceOptions.from_options(
        {"url": URL, "stream": "s", "topic_pattern": "orders_.*"})
    assert parsed.wants("orders_eu") and not parsed.wants("old_orders_eu")
    for bad in ("(", "a{99999999999}"):
        with pytest.raises(ConfigError, match="option 'topic_pattern': is not a regular"):
            SourceOptions.from_options({"url": URL, "stream": "s", "topic_pattern": bad})


def test_the_password_never_shows() -> None:
    assert SECRET not in repr(options())


def test_data_loss_survives_pickling_and_says_what_to_do() -> None:
    error = pickle.loads(pickle.dumps(DataLoss("t", 1, 5, 9, "expired")))
    assert str(error) == ("offsets [5, 9) of topic 't' partition 1 are lost (expired); "
                          "set fail_on_data_loss=false to skip them")
