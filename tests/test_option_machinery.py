"""One option machinery for both connectors: names read alike, sizes parsed alike.

Each connector keeps only deliberate differences (its own options, and what its values mean);
reading the user's map (case, Spark's own keys, unknown and duplicated names) is shared.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector_common.errors import OptionError
from connector_common.options import SPARK_OPTIONS, OptionDoc, OptionSet, option_pair
from connector_common.units import parse_positive_size
from iggy_spark.errors import ConfigError as SinkConfigError
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.source.options import SourceOptions
from postgres_cdc_source.errors import ConfigError as SourceConfigError
from postgres_cdc_source.options import CdcOptions

SINK: dict[str, str] = {"url": "iggy://u:p@localhost:8090"}
SOURCE: dict[str, str] = {"dsn": "host=localhost", "slot": "s"}
IGGY_SOURCE: dict[str, str] = {"url": "iggy://u:p@localhost:8090", "stream": "s", "topics": "t"}
Parse = Callable[[dict[str, str]], Any]


@pytest.mark.parametrize(("parse", "base", "error", "fmt", "typo", "meant"), [
    (RoutedOptions.from_options, SINK, SinkConfigError, "iggy_routed", "max_batch_byte",
     "max_batch_bytes"),
    (CdcOptions.from_options, SOURCE, SourceConfigError, "pg_cdc", "max_bytes_per_trigr",
     "max_bytes_per_trigger"),
    (SourceOptions.from_options, IGGY_SOURCE, SinkConfigError, "iggy", "poll_message",
     "poll_messages"),
])
def test_both_connectors_read_option_names_alike(
    parse: Parse, base: dict[str, str], error: type[OptionError], fmt: str, typo: str, meant: str,
) -> None:
    assert parse({**base, "checkpointLocation": "/c", "path": "p", "queryName": "q"}) == parse(
        base)
    with pytest.raises(error, match=f"option '{typo}': unknown option for format {fmt}; "
                                    f"did you mean '{meant}'"):
        parse({**base, typo: "1"})
    with pytest.raises(error, match=r"option 'zzzz': unknown option .*; see the options table"):
        parse({**base, "zzzz": "1"})
    name = next(iter(base))
    with pytest.raises(error, match=f"option '{name}': is given twice"):
        parse({**base, name.upper(): base[name]})


@pytest.mark.parametrize(("parse", "base", "error", "fmt"), [
    (RoutedOptions.from_options, SINK, SinkConfigError, "max_batch_bytes"),
    (CdcOptions.from_options, SOURCE, SourceConfigError, "max_bytes_per_trigger"),
])
def test_both_connectors_refuse_the_same_sizes(
    parse: Parse, base: dict[str, str], error: type[OptionError], fmt: str,
) -> None:
    for bad in ("0", "-1", "8 parsecs", "9223372036854775808", "8EB"):
        with pytest.raises(error, match=f"option '{fmt}': bad value"):
            parse({**base, fmt: bad})
    parse({**base, fmt: "8MB"})


@given(st.integers(min_value=1, max_value=2**63 - 1))
def test_positive_sizes_within_a_spark_long_are_taken_as_given(size: int) -> None:
    assert parse_positive_size(str(size)) == size


def test_a_size_above_its_maximum_names_the_maximum() -> None:
    with pytest.raises(ValueError, match="between 1 byte and 1024 bytes, got 2048"):
        parse_positive_size("2KB", maximum=1024)


def test_defaults_are_the_documented_values_only() -> None:
    options = OptionSet("f", [OptionDoc("a", "1", ""), OptionDoc("b", "(none)", "")],
                        SourceConfigError)
    assert options.defaults == {"a": "1"}
    assert options.given({"A": "2", "Path": "x"}) == {"a": "2"}
    assert "queryname" in SPARK_OPTIONS


def test_command_line_options_are_read_once_for_the_job_and_the_abandon_tool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pg_to_iggy.pipeline import _parser
    from postgres_cdc_source.abandon import main as abandon

    assert option_pair(" Include_Tables =a=b") == ("include_tables", "a=b")
    args = _parser().parse_args(["--dsn", "d", "--slot", "s", "--url", "u", "--checkpoint", "c",
                                 "--source", "plugin=test_decoding", "--sink", "X=1"])
    assert (dict(args.source), dict(args.sink)) == ({"plugin": "test_decoding"}, {"x": "1"})
    for parse in (lambda a: _parser().parse_args(["--dsn", "d", "--slot", "s", "--url", "u",
                                                  "--checkpoint", "c", *a]),
                  lambda a: abandon(["--checkpoint", "c", "--dsn", "d", "--slot", "s", *a])):
        with pytest.raises(SystemExit):
            parse(["--source", "no_value"])
        assert "expected OPTION=VALUE, got 'no_value'" in capsys.readouterr().err


# --- integers: ASCII digits, and bounds checked when the options are read --------------------

_SNAPSHOT = {"snapshot": "initial"}
_POLLING = {"mode": "polling", "table": "t", "tracking_column": "c"}
_COUNTS: list[tuple[Parse, dict[str, str], type[OptionError], str, int]] = [
    *((CdcOptions.from_options, SOURCE, SourceConfigError, name, 2**31 - 1)
      for name in ("fetch_rows", "batch_rows", "spill_rows", "min_partitions",
                   "backfill_chunk_rows")),
    *((CdcOptions.from_options, {**SOURCE, **_SNAPSHOT}, SourceConfigError, name, 2**31 - 1)
      for name in ("snapshot_chunk_rows", "snapshot_max_rows_per_trigger")),
    (CdcOptions.from_options, {"dsn": "host=localhost", **_POLLING}, SourceConfigError,
     "max_rows_per_trigger", 2**31 - 1),
    (SourceOptions.from_options, IGGY_SOURCE, SinkConfigError, "poll_messages", 2**32 - 1),
    *((SourceOptions.from_options, IGGY_SOURCE, SinkConfigError, name, 2**63 - 1)
      for name in ("max_messages_per_trigger", "max_messages_per_partition")),
    *((RoutedOptions.from_options, SINK, SinkConfigError, name, 2**63 - 1)
      for name in ("admission.max_destinations", "circuit_breaker.failure_threshold",
                   "max_concurrent_destinations", "delivery_scan_messages")),
    (RoutedOptions.from_options, SINK, SinkConfigError, "topic_defaults.partitions_count", 1000),
]
_COUNT_IDS = [case[3] for case in _COUNTS]

_NON_ASCII_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())
"""Digits ``int()`` reads (fullwidth U+FF11, Arabic-Indic U+0663, ...) that are not 0-9."""


@pytest.mark.parametrize(("parse", "base", "error", "name", "maximum"), _COUNTS, ids=_COUNT_IDS)
@given(digits=st.lists(st.one_of(st.sampled_from("0123456789"), _NON_ASCII_DIGITS),
                       min_size=1, max_size=6).filter(lambda d: not "".join(d).isascii()))
def test_a_count_is_ascii_digits_only(
    parse: Parse, base: dict[str, str], error: type[OptionError], name: str, maximum: int,
    digits: list[str],
) -> None:
    """``int()`` reads fullwidth 1000 as 1000: a count spelt with any digits but 0-9 is refused,
    naming the option and the text."""
    text = "".join(digits)
    with pytest.raises(error, match=f"option '{name}': bad value: expected a whole number, "
                                    f"got {re.escape(repr(text))}"):
        parse({**base, name: text})


@pytest.mark.parametrize(("parse", "base", "error", "name", "maximum"), _COUNTS, ids=_COUNT_IDS)
def test_a_count_is_bounded_by_what_carries_it_when_the_options_are_read(
    parse: Parse, base: dict[str, str], error: type[OptionError], name: str, maximum: int,
) -> None:
    """The largest count a field holds is taken; one more is refused by ``load()`` on the
    driver, naming the option, the value and the bound (not a ``struct.error`` in a task)."""
    parse({**base, name: str(maximum)})
    with pytest.raises(error, match=f"option '{name}': bad value: must be between 1 and "
                                    f"{maximum}, got {maximum + 1}"):
        parse({**base, name: str(maximum + 1)})


def test_the_largest_poll_count_fits_the_poll_request() -> None:
    from iggy_spark.source import wire

    options = SourceOptions.from_options({**IGGY_SOURCE, "poll_messages": str(2**32 - 1)})
    body = wire.poll_request("c", "s", "t", 0, 2**64 - 1, options.poll_messages)
    assert body.endswith((2**32 - 1).to_bytes(4, "little") + b"\x00")


@pytest.mark.parametrize("text", ["\uff11\uff10\uff10\uff10", "1\uff10", "\u0663", "\u06f1",
                                  "1\u3000"])
def test_grammars_read_ascii_only(text: str) -> None:
    """Sizes, durations, booleans and integers: ``Decimal`` and ``re``'s ``\\d`` take any
    Unicode digit, ``str.strip()`` any Unicode space."""
    from connector_common.units import parse_bool, parse_byte_size, parse_duration, parse_int

    for parse in (parse_byte_size, parse_duration, lambda t: parse_int(t, minimum=0, maximum=9),
                  parse_bool):
        with pytest.raises(ValueError, match=re.escape(repr(text))):
            parse(text)
    for parse in (parse_byte_size, parse_duration):
        with pytest.raises(ValueError, match=re.escape(repr(f"{text}s"))):
            parse(f"{text}s")


@pytest.mark.parametrize("unit", ["\u212a", "\u212ab", "m\u017f", "\u017f"])  # Kelvin K, long s
def test_unit_letters_are_ascii_only(unit: str) -> None:
    """Case-insensitive Unicode matching reads the Kelvin sign as ``k``, a long s as ``s``."""
    from connector_common.units import parse_byte_size, parse_duration

    for parse in (parse_byte_size, parse_duration):
        with pytest.raises(ValueError, match="expected a"):
            parse(f"1{unit}")


def test_a_size_option_with_a_unicode_unit_names_the_option() -> None:
    with pytest.raises(SourceConfigError, match="option 'max_bytes_per_trigger': bad value"):
        CdcOptions.from_options({**SOURCE, "max_bytes_per_trigger": "1\u212ab"})


def test_a_topic_expiry_fits_its_wire_field_or_is_refused_when_read() -> None:
    """Created topics' expiry travels in µs as a u64 whose largest value means never: 10^9
    days (a timedelta holds it) is refused by the options, not by ``struct.pack`` in a task."""
    from iggy_spark.sink.topic_request import encode_create_topic

    with pytest.raises(SinkConfigError, match=r"option 'topic_defaults\.message_expiry': "
                                              r"bad value: must be less than 213503982 days"):
        RoutedOptions.from_options({**SINK, "topic_defaults.message_expiry": "999999999d"})
    options = RoutedOptions.from_options({**SINK, "topic_defaults.message_expiry": "213503982d"})
    assert encode_create_topic("s", "t", options.topic_defaults)


@pytest.mark.parametrize("text", ["1969-12-31T23:59:59Z", "18446744073709552",
                                  "\u0662\u0660\u0662\u0666-01-01"])
def test_a_timestamp_option_is_ascii_and_fits_a_poll_by_timestamp(text: str) -> None:
    with pytest.raises(SinkConfigError, match="option 'starting_timestamp': bad value"):
        SourceOptions.from_options({**IGGY_SOURCE, "starting_timestamp": text})
    assert SourceOptions.from_options(
        {**IGGY_SOURCE, "starting_timestamp": "18446744073709551"}).starting_timestamp == (
            18446744073709551000)
