"""One option machinery for both connectors: names read alike, sizes parsed alike.

Each connector keeps only deliberate differences (its own options, and what its values mean);
reading the user's map (case, Spark's own keys, unknown and duplicated names) is shared.
"""

from __future__ import annotations

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
