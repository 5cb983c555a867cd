"""``iggy_routed`` options: documented defaults, every valid configuration accepted, every
invalid value or combination refused with a ConfigError naming the option, no password leaks.
Also the shared scalar grammars (:mod:`connector_common.units`) and the error hierarchy."""

from __future__ import annotations

import pickle
import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector_common.units import parse_bool, parse_byte_size, parse_duration, parse_int
from iggy_spark.errors import (
    AdmissionError,
    ConfigError,
    DestinationError,
    EncodingError,
    IggySparkError,
    SendError,
)
from iggy_spark.sink.admission import AdmissionMode, Destination, Entry, MissingPolicy
from iggy_spark.sink.breaker import BreakerConfig
from iggy_spark.sink.options import (
    OPTION_DOCS,
    ColumnNames,
    FailurePolicy,
    KeyEncoding,
    RoutedOptions,
    TopicDefaults,
)

SECRET = "pa55-w0rd"
URL = f"iggy://iggy:{SECRET}@localhost:8090"


def parse(**extra: str) -> RoutedOptions:
    return RoutedOptions.from_options({"url": URL, **extra})


def refused(options: dict[str, str], option: str) -> ConfigError:
    with pytest.raises(ConfigError, match=f"option '{option}'") as caught:
        RoutedOptions.from_options({"url": URL, **options})
    error = caught.value
    assert error.option == option
    assert SECRET not in str(error) and SECRET not in repr(error)
    assert str(error).count("option '") == 1
    return error


# --- defaults --------------------------------------------------------------------------------


def test_defaults() -> None:
    options = parse()
    assert options.url.password == SECRET
    assert options.columns == ColumnNames()
    assert options.missing.policy is MissingPolicy.ERROR and options.missing.default is None
    assert options.admission.mode is AdmissionMode.OPEN and options.admission.entries == ()
    assert options.admission.max_destinations == 256 and not options.admission.exempt
    assert options.on_admission_failure is FailurePolicy.ERROR and options.dlq is None
    assert options.breaker == BreakerConfig(failure_threshold=5, cool_down=30.0)
    assert options.partition_key_encoding is KeyEncoding.BYTES
    assert options.topic_defaults == TopicDefaults(1, None, None)
    assert options.create_destinations is True
    assert options.max_concurrent_destinations == 16
    assert options.max_batch_bytes == 32 * 1024 * 1024


def test_documented_defaults_are_the_parsed_ones() -> None:
    """Each concrete default in OPTION_DOCS, passed explicitly, changes nothing."""
    explicit = {d.name: d.default for d in OPTION_DOCS if not d.default.startswith("(")}
    assert RoutedOptions.from_options({"url": URL, **explicit}) == parse()


def test_spark_passthrough_and_case_insensitive_keys() -> None:
    options = RoutedOptions.from_options(
        {"URL": URL, "checkpointLocation": "/cp", "path": "x", "Admission.Max_Destinations": "3"}
    )
    assert options.admission.max_destinations == 3


def test_full_configuration() -> None:
    options = parse(
        default_stream="app",
        default_topic="misc",
        **{
            "admission.mode": "allowlist",
            "admission.allowlist": "app/*, billing/invoices",
            "admission.max_destinations": "10",
            "on_admission_failure": "dlq",
            "dlq.stream": "ops",
            "dlq.topic": "dead",
            "circuit_breaker.failure_threshold": "2",
            "circuit_breaker.cool_down": "500ms",
            "partition_key_encoding": "partition_id",
            "topic_defaults.partitions_count": "8",
            "topic_defaults.message_expiry": "7d",
            "topic_defaults.max_size": "10GB",
            "max_concurrent_destinations": "4",
            "max_batch_bytes": "1MB",
            "stream_column": "s",
            "value_column": "payload",
        },
    )
    assert options.missing.policy is MissingPolicy.DEFAULT
    assert options.missing.default == Destination("app", "misc")
    assert options.admission.entries == (Entry("app", "*"), Entry("billing", "invoices"))
    assert options.admission.exempt == {Destination("ops", "dead")}
    assert options.dlq == Destination("ops", "dead")
    assert options.breaker == BreakerConfig(2, 0.5)
    assert options.topic_defaults == TopicDefaults(8, timedelta(days=7), 10 * 2**30)
    assert options.columns.stream == "s" and options.columns.value == "payload"
    assert options.columns.routing == {
        "s", "topic", "partition_key", "partition_id", "payload", "headers", "id"
    }
    assert (options.max_concurrent_destinations, options.max_batch_bytes) == (4, 2**20)


def test_never_and_unlimited() -> None:
    defaults = parse(
        **{"topic_defaults.message_expiry": "never", "topic_defaults.max_size": "Unlimited"}
    ).topic_defaults
    assert defaults.message_expiry == "never" and defaults.max_size == "unlimited"


def test_explicit_missing_policies() -> None:
    assert parse(on_missing_destination="drop").missing.policy is MissingPolicy.DROP
    assert parse(on_missing_destination="ERROR").missing.policy is MissingPolicy.ERROR


def test_dlq_may_be_denylisted_and_default_may_be_the_dlq() -> None:
    options = parse(
        default_stream="ops",
        default_topic="dead",
        **{
            "admission.mode": "denylist",
            "admission.denylist": "ops/*",
            "on_admission_failure": "dlq",
            "dlq.stream": "ops",
            "dlq.topic": "dead",
        },
    )
    admission = options.new_admission()
    assert admission.check("ops", "dead") == "reserved"  # the options' default, never a row's
    assert admission.check("ops", "other") == "denylist"


def test_a_default_in_the_state_stream_is_refused_naming_default_stream() -> None:
    with pytest.raises(ConfigError, match=r"option 'default_stream'.*\(reserved\)"):
        parse(default_stream="iggy_spark_state", default_topic="query-x")


def test_a_task_admission_is_seeded_with_the_query_admitted_destinations() -> None:
    options = parse()
    admission = options.new_admission([Destination("a", "b")])
    assert admission.admitted == {Destination("a", "b")}


def test_options_pickle_and_hide_the_password() -> None:
    options = parse(default_stream="a", default_topic="b")
    assert SECRET not in repr(options) and SECRET not in str(options)
    assert pickle.loads(pickle.dumps(options)) == options


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "option", "hint"),
    [
        ({"admision.mode": "open"}, "admision.mode", "did you mean 'admission.mode'"),
        ({"max_destinations": "3"}, "max_destinations", "did you mean"),
        ({"topic": "x"}, "topic", "unknown option"),
        ({"zzzzzz": "x"}, "zzzzzz", "see the options table in the docs"),
        ({"admission.mode": "closed"}, "admission.mode", "open, allowlist, denylist"),
        ({"admission.mode": "allowlist"}, "admission.allowlist", "required"),
        ({"admission.mode": "denylist"}, "admission.denylist", "required"),
        ({"admission.allowlist": "a/b"}, "admission.allowlist", "only used"),
        ({"admission.mode": "denylist", "admission.allowlist": "a/b"},
         "admission.allowlist", "only used"),
        ({"admission.mode": "allowlist", "admission.allowlist": "a/b",
          "admission.denylist": "c/d"}, "admission.denylist", "only used"),
        ({"admission.mode": "allowlist", "admission.allowlist": "*/*"},
         "admission.allowlist", "admission.mode=open"),
        ({"admission.mode": "allowlist", "admission.allowlist": "a/b, */*"},
         "admission.allowlist", "admission.mode=open"),
        ({"admission.mode": "denylist", "admission.denylist": "*/*"},
         "admission.denylist", "refuse every row"),
        ({"admission.mode": "allowlist", "admission.allowlist": "a*/b"},
         "admission.allowlist", "partial wildcards"),
        ({"admission.mode": "allowlist", "admission.allowlist": ""},
         "admission.allowlist", "empty"),
        ({"admission.max_destinations": "0"}, "admission.max_destinations", "at least 1"),
        ({"admission.max_destinations": "many"}, "admission.max_destinations", "whole number"),
        ({"admission.max_destinations": "-5"}, "admission.max_destinations", "whole number"),
        ({"on_admission_failure": "retry"}, "on_admission_failure", "error, drop, dlq"),
        ({"on_admission_failure": "dlq"}, "dlq.stream", "required"),
        ({"on_admission_failure": "dlq", "dlq.stream": "a"}, "dlq.topic", "together"),
        ({"dlq.stream": "a", "dlq.topic": "b"}, "dlq.stream", "only used"),
        ({"on_admission_failure": "dlq", "dlq.stream": "a b", "dlq.topic": "c"},
         "dlq.stream", "not a valid name"),
        ({"on_missing_destination": "default"}, "default_stream", "required"),
        ({"on_missing_destination": "skip"}, "on_missing_destination", "default, drop, error"),
        ({"default_stream": "a"}, "default_topic", "together"),
        ({"default_topic": "a"}, "default_stream", "together"),
        ({"default_stream": "a", "default_topic": "b", "on_missing_destination": "drop"},
         "default_stream", "only used"),
        ({"default_stream": "", "default_topic": "b"}, "default_stream", "not a valid name"),
        ({"default_stream": "a/b", "default_topic": "b"}, "default_stream", "not a valid name"),
        ({"default_stream": "a", "default_topic": "é"}, "default_topic", "not a valid name"),
        ({"default_stream": "a", "default_topic": "b", "admission.mode": "denylist",
          "admission.denylist": "a/*"}, "admission.denylist", "default destination"),
        ({"default_stream": "a", "default_topic": "b", "admission.mode": "allowlist",
          "admission.allowlist": "c/*"}, "admission.allowlist", "default destination"),
        ({"circuit_breaker.failure_threshold": "0"}, "circuit_breaker.failure_threshold", "at"),
        ({"circuit_breaker.cool_down": "0"}, "circuit_breaker.cool_down", "greater than zero"),
        ({"circuit_breaker.cool_down": "-1s"}, "circuit_breaker.cool_down", "duration"),
        ({"circuit_breaker.cool_down": "30 sec"}, "circuit_breaker.cool_down", "duration"),
        ({"partition_key_encoding": "murmur"}, "partition_key_encoding", "bytes, key_u32"),
        ({"partition_key_encoding": "partition_id"}, "topic_defaults.partitions_count",
         "at least 2"),
        ({"partition_key_encoding": "partition_id", "topic_defaults.partitions_count": "1"},
         "topic_defaults.partitions_count", "at least 2"),
        ({"topic_defaults.partitions_count": "0"}, "topic_defaults.partitions_count", "between"),
        ({"topic_defaults.partitions_count": "1001"}, "topic_defaults.partitions_count",
         "between"),
        ({"topic_defaults.message_expiry": "forever"}, "topic_defaults.message_expiry",
         "duration"),
        ({"topic_defaults.message_expiry": "0s"}, "topic_defaults.message_expiry", "zero"),
        ({"topic_defaults.max_size": "big"}, "topic_defaults.max_size", "size"),
        ({"topic_defaults.max_size": "0"}, "topic_defaults.max_size", "between"),
        ({"topic_defaults.max_size": "16384PB"}, "topic_defaults.max_size", "size"),
        ({"topic_defaults.max_size": "17179869184GB"}, "topic_defaults.max_size", "between"),
        ({"create_destinations": "yes"}, "create_destinations", "true or false"),
        ({"create_destinations": "false", "topic_defaults.partitions_count": "3"},
         "topic_defaults.partitions_count", "create_destinations=true"),
        ({"create_destinations": "false", "topic_defaults.max_size": "1GB"},
         "topic_defaults.max_size", "create_destinations=true"),
        ({"max_concurrent_destinations": "0"}, "max_concurrent_destinations", "at least 1"),
        ({"max_batch_bytes": "0"}, "max_batch_bytes", "between"),
        ({"max_batch_bytes": "8 megs"}, "max_batch_bytes", "size"),
        ({"value_column": ""}, "value_column", "must name a column"),
        ({"value_column": "stream"}, "value_column", "already used by stream_column"),
        ({"id_column": "key", "partition_key_column": "key"}, "id_column", "already used"),
        ({"url": "http://x"}, "url", "TCP"),
        ({"url": f"iggy://iggy:{SECRET}@h?tls=maybe"}, "url", "true or false"),
    ],
)
def test_refusals_name_the_option(options: dict[str, str], option: str, hint: str) -> None:
    assert hint in str(refused(options, option))


def test_url_is_required() -> None:
    with pytest.raises(ConfigError, match="option 'url': is required"):
        RoutedOptions.from_options({})


def test_duplicate_keys_differing_in_case() -> None:
    with pytest.raises(ConfigError, match="option 'url': is given twice"):
        RoutedOptions.from_options({"url": URL, "URL": URL})


def test_partition_id_with_existing_topics_needs_no_partition_count() -> None:
    options = parse(partition_key_encoding="partition_id", create_destinations="false")
    assert options.partition_key_encoding is KeyEncoding.PARTITION_ID


# --- properties: valid configurations are accepted, any single bad value is refused ----------

_names = st.sampled_from(["a", "b", "orders", "ops", "x.y_z-1"])


def _draw_admission(draw: st.DrawFn, options: dict[str, str],
                    default: tuple[str, str] | None) -> None:
    """The default destination, what a missing one does, and the admission list."""
    if default:
        options["default_stream"], options["default_topic"] = default
        if draw(st.booleans()):
            options["on_missing_destination"] = "default"
    elif draw(st.booleans()):
        options["on_missing_destination"] = draw(st.sampled_from(["drop", "error"]))
    mode = draw(st.sampled_from(["open", "allowlist", "denylist", None]))
    if mode is not None:
        options["admission.mode"] = mode
    if mode == "allowlist":
        entries = draw(st.lists(st.tuples(_names, _names | st.just("*")), min_size=1, max_size=3))
        if default:
            entries.append(default)
        options["admission.allowlist"] = ",".join(f"{s}/{t}" for s, t in entries)
    if mode == "denylist":
        entries = draw(st.lists(st.tuples(_names, _names), min_size=1, max_size=3))
        entries = [e for e in entries if e != default] or [("never", "used")]
        options["admission.denylist"] = " , ".join(f"{s}/{t}" for s, t in entries)


def _draw_destinations(draw: st.DrawFn, options: dict[str, str]) -> None:
    """What a refused destination does, the key encoding and how topics are created."""
    policy = draw(st.sampled_from(["error", "drop", "dlq", None]))
    if policy is not None:
        options["on_admission_failure"] = policy
    if policy == "dlq":
        options["dlq.stream"], options["dlq.topic"] = draw(st.tuples(_names, _names))
    encoding = draw(st.sampled_from(["bytes", "key_u32", "partition_id", None]))
    if encoding is not None:
        options["partition_key_encoding"] = encoding
    create = draw(st.sampled_from(["true", "false", "TRUE", None]))
    if create is not None:
        options["create_destinations"] = create
    if create != "false":
        low = 2 if encoding == "partition_id" else 1
        if encoding == "partition_id" or draw(st.booleans()):
            options["topic_defaults.partitions_count"] = str(draw(st.integers(low, 1000)))
        if draw(st.booleans()):
            options["topic_defaults.message_expiry"] = draw(
                st.sampled_from(["never", "1s", "250ms", "7d", "1.5h", "3600"])
            )
        if draw(st.booleans()):
            options["topic_defaults.max_size"] = draw(
                st.sampled_from(["unlimited", "1", "10MB", "2GiB", "1tb"])
            )


@st.composite
def valid_options(draw: st.DrawFn) -> dict[str, str]:
    options = {"url": URL}
    default = draw(st.none() | st.tuples(_names, _names))
    _draw_admission(draw, options, default)
    _draw_destinations(draw, options)
    for name, values in {
        "admission.max_destinations": st.integers(1, 10**6).map(str),
        "circuit_breaker.failure_threshold": st.integers(1, 100).map(str),
        "circuit_breaker.cool_down": st.sampled_from(["30s", "500ms", "2m", "1", "0.25"]),
        "max_concurrent_destinations": st.integers(1, 64).map(str),
        "max_batch_bytes": st.sampled_from(["1", "64KB", "8MB", "1g"]),
        "value_column": st.sampled_from(["value", "payload", "body"]),
        "id_column": st.sampled_from(["id", "msg_id"]),
    }.items():
        if draw(st.booleans()):
            options[name] = draw(values)
    return options


@given(valid_options())
def test_valid_configurations_are_accepted(options: dict[str, str]) -> None:
    parsed = RoutedOptions.from_options(options)
    assert SECRET not in repr(parsed)
    if "dlq.stream" in options:
        assert parsed.dlq == Destination(options["dlq.stream"], options["dlq.topic"])
    if "default_stream" in options:
        assert parsed.missing.policy is MissingPolicy.DEFAULT


_BAD_VALUES: dict[str, list[str]] = {
    "admission.mode": ["", "closed", "allow list"],
    "admission.max_destinations": ["0", "-1", "1.5", "ten", ""],
    "on_admission_failure": ["", "ignore"],
    "on_missing_destination": ["", "fallback"],
    "circuit_breaker.failure_threshold": ["0", "x", "2.0"],
    "circuit_breaker.cool_down": ["0", "0ms", "soon", "-3s", "3 weeks"],
    "partition_key_encoding": ["", "u32", "hash"],
    "create_destinations": ["", "1", "on", "yes"],
    "max_concurrent_destinations": ["0", "many"],
    "max_batch_bytes": ["0", "0MB", "huge", "-1"],
    "value_column": ["", "   "],
    "default_stream": ["", "two words", "a/b", "*"],
    "topic_defaults.partitions_count": ["0", "1001", "x"],
    "topic_defaults.message_expiry": ["0s", "later", "-1d"],
    "topic_defaults.max_size": ["0", "lots", "-1MB"],
}


@given(valid_options(), st.sampled_from(sorted(_BAD_VALUES)), st.data())
def test_any_single_bad_value_is_refused(
    options: dict[str, str], option: str, data: st.DataObject
) -> None:
    bad = dict(options)
    bad[option] = data.draw(st.sampled_from(_BAD_VALUES[option]))
    if option == "default_stream":
        bad.setdefault("default_topic", "t")
    with pytest.raises(ConfigError) as caught:
        RoutedOptions.from_options(bad)
    assert caught.value.option == option
    assert SECRET not in str(caught.value)


# --- units -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("2m", timedelta(minutes=2)),
        ("1h", timedelta(hours=1)),
        ("7d", timedelta(days=7)),
        ("45", timedelta(seconds=45)),
        ("0.1", timedelta(milliseconds=100)),
        ("1.5S", timedelta(seconds=1.5)),
        (" 10 ms ", timedelta(milliseconds=10)),
        ("0", timedelta(0)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "s", "1x", "-1s", "1e3", "1,5s", "1 s 2", "inf", "nan",
                                  "99999999999999d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match=f"got '{re.escape(text)}'|duration '{text}' is too large"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1), ("1b", 1), ("2KB", 2048), ("2kib", 2048), ("3k", 3072), ("8MB", 8 << 20),
     ("1GiB", 1 << 30), ("1tb", 1 << 40), (" 5 mb ", 5 << 20)],
)
def test_byte_sizes(text: str, expected: int) -> None:
    assert parse_byte_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "1.5MB", "-1", "1PB", "ten"])
def test_bad_byte_sizes(text: str) -> None:
    with pytest.raises(ValueError, match=f"expected a size such as .*, got '{re.escape(text)}'"):
        parse_byte_size(text)


def test_bools_and_ints() -> None:
    assert parse_bool(" TRUE ") is True and parse_bool("false") is False
    assert parse_int("007", minimum=0) == 7
    for text in ["", "+1", "1_000", "0x10", "1.0"]:
        with pytest.raises(ValueError, match=f"expected a whole number, got '{re.escape(text)}'"):
            parse_int(text, minimum=0)
    with pytest.raises(ValueError, match="between 1 and 3"):
        parse_int("4", minimum=1, maximum=3)


# --- errors ----------------------------------------------------------------------------------

_ERRORS: list[IggySparkError] = [
    IggySparkError("plain message"),
    ConfigError("admission.mode", "expected one of open, allowlist, denylist; got 'x'"),
    AdmissionError("s", None, "missing_destination", "set default_stream"),
    EncodingError("id", 3, "integer message ids must be in 1..2**128-1, got 0"),
    EncodingError("headers", None, "must be map<string, string>"),
    DestinationError("s", "t", "permission denied"),
    SendError("s", "t", "Disconnected"),
]


@pytest.mark.parametrize("error", _ERRORS, ids=lambda e: type(e).__name__)
def test_errors_pickle_with_message_and_attributes(error: IggySparkError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error) and copy.args == error.args
    assert vars(copy) == vars(error)


def test_error_messages_read_well_in_spark_wrappers() -> None:
    config, admission, encoding, _, destination, send = _ERRORS[1:]
    assert isinstance(config, ValueError) and isinstance(encoding, ValueError)
    assert str(config) == (
        "option 'admission.mode': expected one of open, allowlist, denylist; got 'x'"
    )
    assert str(admission) == (
        "row refused for destination 's'/None (reason: missing_destination): set default_stream"
    )
    assert str(encoding).startswith("column 'id', row 3 of the batch: ")
    assert str(destination) == "creating or looking up destination 's'/'t': permission denied"
    assert str(send) == "sending to destination 's'/'t': Disconnected"
    assert all(isinstance(e, IggySparkError) for e in _ERRORS)


def test_error_keeps_its_cause_locally() -> None:
    def send() -> None:
        try:
            raise RuntimeError("Disconnected")
        except RuntimeError as exc:
            raise SendError("s", "t", str(exc)) from exc

    with pytest.raises(SendError) as info:
        send()
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_query_without_its_own_checkpoint_is_warned_to_have_a_name() -> None:
    # Spark hands the options over case-folded, as pyspark's CaseInsensitiveDict
    from pyspark.sql.datasource import CaseInsensitiveDict

    from iggy_spark.sink.datasource import session_checkpoint_warning

    own = CaseInsensitiveDict({"checkpointLocation": "/chk/q", "url": "iggy://h:1"})
    assert session_checkpoint_warning(own) is None
    warning = session_checkpoint_warning(CaseInsensitiveDict({"url": "iggy://h:1"}))
    assert warning is not None
    assert "spark.sql.streaming.checkpointLocation" in warning
    assert ".queryName(" in warning
