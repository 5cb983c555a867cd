"""Every ``iggy_routed`` option, parsed and validated once, before any data moves.

Spark hands a data source its options as a mapping of lower-cased keys to strings.
:meth:`RoutedOptions.from_options` turns that into a frozen, picklable dataclass or raises a
:class:`~iggy_spark.errors.ConfigError` naming the option to fix, so a typo or a contradiction
fails ``start()`` on the driver instead of a task on an executor an hour later.

Two rules keep configurations honest:

* an unknown option is an error (with the closest valid name suggested): a misspelt
  ``admission.denylist`` must not silently admit everything;
* an option that the other settings make irrelevant is an error too (``dlq.topic`` without
  ``on_admission_failure=dlq``, ``admission.allowlist`` in ``denylist`` mode...): the user
  clearly expected it to do something.

:data:`OPTION_DOCS` is the only copy of the defaults (the docs' table is checked against it);
names are read by the machinery both connectors share (:mod:`connector_common.options`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any, Literal, TypeVar

from connector_common.options import OptionDoc, OptionSet, parsed
from connector_common.units import (
    MAX_LONG,
    parse_bool,
    parse_int,
    parse_positive_duration,
    parse_positive_size,
)
from iggy_spark.errors import ConfigError, show
from iggy_spark.iggy_url import IggyUrl
from iggy_spark.sink.admission import (
    NAME_RULE,
    WILDCARD,
    Admission,
    AdmissionMode,
    AdmissionReason,
    AdmissionRules,
    Destination,
    Entry,
    MissingDestination,
    MissingPolicy,
    is_valid_name,
    parse_entries,
)
from iggy_spark.sink.breaker import BreakerConfig

__all__ = [
    "OPTION_DOCS",
    "ColumnNames",
    "DeliveryGuarantee",
    "FailurePolicy",
    "KeyEncoding",
    "RoutedOptions",
    "TopicDefaults",
]

_E = TypeVar("_E", bound=StrEnum)
_T = TypeVar("_T")

MAX_PARTITIONS = 1000  # the server's limit per topic
MAX_MESSAGE_BYTES = 64_000_000  # Iggy's limit for one message's payload


class FailurePolicy(StrEnum):
    """``on_admission_failure``: what happens to a row that was refused a destination."""

    ERROR = "error"
    DROP = "drop"
    DLQ = "dlq"


class DeliveryGuarantee(StrEnum):
    """``delivery_guarantee``: what a replayed micro-batch sends again."""

    EFFECTIVELY_ONCE = "effectively_once"
    AT_LEAST_ONCE = "at_least_once"


class KeyEncoding(StrEnum):
    """``partition_key_encoding``: how a row picks its partition.

    ``bytes``: hash the key's bytes (strings as UTF-8) on the server; ``key_u32``: hash an
    integer key as 4 little-endian bytes; ``partition_id``: the row names its partition (from 0).
    """

    BYTES = "bytes"
    KEY_U32 = "key_u32"
    PARTITION_ID = "partition_id"


OPTION_DOCS: tuple[OptionDoc, ...] = (
    OptionDoc("url", "(required)", "`iggy://user:password@host:port`, optionally with "
              "`?tls=true&tls_domain=...&tls_ca_file=...`; the password is redacted everywhere"),
    OptionDoc("default_stream", "(none)", "stream for rows whose stream is null "
              "(set together with default_topic)"),
    OptionDoc("default_topic", "(none)", "topic for rows whose topic is null "
              "(set together with default_stream)"),
    OptionDoc("on_missing_destination", "(`default` if the defaults are set, else `error`)",
              "rows with a null stream or topic: `default` fills in the defaults, `drop` skips "
              "the row, `error` fails the query"),
    OptionDoc("admission.mode", "open", "`open` (any valid name), `allowlist` (only listed "
              "destinations) or `denylist` (all but listed destinations)"),
    OptionDoc("admission.allowlist", "(none)", "comma-separated `stream/topic` entries; each "
              "part a literal name or `*` alone; required in allowlist mode"),
    OptionDoc("admission.denylist", "(none)", "same grammar; required in denylist mode"),
    OptionDoc("admission.max_destinations", "256", "hard cap on distinct destinations per "
              "query, in every mode (the DLQ is not counted)"),
    OptionDoc("on_admission_failure", "error", "refused rows: `error` fails the query, `drop` "
              "skips them (counted), `dlq` sends them to dlq.stream/dlq.topic"),
    OptionDoc("dlq.stream", "(none)", "dead-letter stream; required with on_admission_failure=dlq"),
    OptionDoc("dlq.topic", "(none)", "dead-letter topic; required with on_admission_failure=dlq"),
    OptionDoc("circuit_breaker.failure_threshold", "5", "consecutive send failures that open a "
              "destination's circuit breaker"),
    OptionDoc("circuit_breaker.cool_down", "30s", "how long an open breaker refuses rows before "
              "one probe send (`500ms`, `30s`, `2m` or seconds)"),
    OptionDoc("partition_key_encoding", "bytes", "`bytes` (hash of partition_key), `key_u32` "
              "(hash of an integer key as 4 little-endian bytes) or `partition_id` (row names "
              "its partition, from 0)"),
    OptionDoc("topic_defaults.partitions_count", "1", "partitions of topics the sink creates "
              f"(1-{MAX_PARTITIONS}); must be > 1 with partition_key_encoding=partition_id"),
    OptionDoc("topic_defaults.message_expiry", "(server default)", "expiry of created topics: "
              "a duration (`7d`, `12h`) or `never`"),
    OptionDoc("topic_defaults.max_size", "(server default)", "size cap of created topics "
              "(`10GB`, binary units) or `unlimited`; Iggy refuses a cap below one segment "
              "(1 GB)"),
    OptionDoc("create_destinations", "true", "create missing streams and topics; false sends "
              "only to existing ones"),
    OptionDoc("prewarm_deadline", "60s", "at query start, the literal `stream/topic` entries "
              "of an allowlist are created or looked up in parallel for at most this long; "
              "what is not ready by then is logged and done on first use"),
    OptionDoc("max_concurrent_destinations", "16", "destinations a task sends to at the same time"),
    OptionDoc("max_batch_bytes", "32MB", "payload bytes a task buffers (all destinations "
              "together) before it sends and waits for the acknowledgements: bounds memory "
              "(about 4x this for messages of a few hundred bytes, with the SDK's message "
              "objects); with many destinations, more of it means fewer, larger sends"),
    OptionDoc("max_message_bytes", "64000000", "largest payload a row may have (Iggy's limit, "
              "or lower to match your server's); a larger row fails the query, or goes to the "
              "DLQ as `too_large` with on_admission_failure=dlq"),
    OptionDoc("send_timeout", "60s", "how long a task keeps retrying a send while the server is "
              "unreachable before it fails (and Spark does not commit the batch)"),
    OptionDoc("delivery_guarantee", "effectively_once", "`effectively_once`: a replayed batch "
              "sends only what did not land yet (see Delivery semantics; falls back to "
              "at-least-once, with a warning, where it cannot decide); `at_least_once`: a "
              "replayed batch is sent again in full, and messages carry no origin header"),
    OptionDoc("delivery_scan_messages", "10000", "effectively_once: how many messages of each "
              "partition's tail a replayed task reads back, at most, looking for what it "
              "already sent; past it that group falls back to at-least-once"),
    OptionDoc("state_stream", "iggy_spark_state", "stream holding the sink's query state: one "
              "topic per query, `query-<Spark query id>` (see Operations); the sink's user "
              "needs to create, append to and poll it; rows may not name it"),
    OptionDoc("json_columns", "(none)", "comma-separated string columns holding JSON text "
              "(e.g. pg_cdc's `key,before,after`), embedded in the payload as JSON, "
              "not as strings"),
    OptionDoc("stream_column", "stream", "column holding the destination stream"),
    OptionDoc("topic_column", "topic", "column holding the destination topic"),
    OptionDoc("partition_key_column", "partition_key", "column holding the partition key "
              "(string/binary, or integer for key_u32)"),
    OptionDoc("partition_id_column", "partition_id", "column holding the partition id "
              "(partition_id encoding)"),
    OptionDoc("value_column", "value", "column holding the payload (string/binary); without it "
              "the row's other columns are sent as JSON"),
    OptionDoc("headers_column", "headers", "column holding the Iggy user headers "
              "(`map<string,string>`)"),
    OptionDoc("id_column", "id", "column holding the message id: an integer in 1..2^128-1, or "
              "a string/binary hashed with xxh3-128"),
)

_OPTIONS = OptionSet("iggy_routed", OPTION_DOCS, ConfigError)
_TOPIC_DEFAULTS = tuple(d.name for d in OPTION_DOCS if d.name.startswith("topic_defaults."))


@dataclass(frozen=True)
class ColumnNames:
    """Where each part of the row contract lives in the DataFrame."""

    stream: str = "stream"
    topic: str = "topic"
    partition_key: str = "partition_key"
    partition_id: str = "partition_id"
    value: str = "value"
    headers: str = "headers"
    id: str = "id"

    @property
    def routing(self) -> frozenset[str]:
        """Columns that steer a message rather than belong in its JSON payload."""
        return frozenset(vars(self).values())


@dataclass(frozen=True)
class TopicDefaults:
    """Settings of the topics the sink creates; ``None`` leaves the server's default."""

    partitions_count: int = 1
    message_expiry: timedelta | Literal["never"] | None = None
    max_size: int | Literal["unlimited"] | None = None
    segment_size: int | None = None
    """Bytes per segment (the unit Iggy's retention deletes); only the sink's control topic
    sets it (:mod:`iggy_spark.sink.control_topic`)."""


@dataclass(frozen=True)
class RoutedOptions:
    """The validated options of one ``iggy_routed`` query."""

    url: IggyUrl
    columns: ColumnNames
    missing: MissingDestination
    admission: AdmissionRules
    on_admission_failure: FailurePolicy
    dlq: Destination | None
    breaker: BreakerConfig
    partition_key_encoding: KeyEncoding
    topic_defaults: TopicDefaults
    create_destinations: bool
    max_concurrent_destinations: int
    max_batch_bytes: int
    send_timeout: float = 60.0
    json_columns: frozenset[str] = frozenset()
    max_message_bytes: int = MAX_MESSAGE_BYTES
    prewarm_deadline: float = 60.0
    delivery: DeliveryGuarantee = DeliveryGuarantee.EFFECTIVELY_ONCE
    delivery_scan_messages: int = 10_000
    state_stream: str = "iggy_spark_state"

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> RoutedOptions:
        """Parse Spark's option map; raises :class:`ConfigError` naming the first bad option."""
        given = _OPTIONS.given(options)
        raw = _OPTIONS.defaults | given

        def parse(name: str, parser: Callable[[str], _T]) -> _T:
            return parsed(name, raw[name], parser, ConfigError)

        if "url" not in raw:
            raise ConfigError("url", "is required, e.g. iggy://user:password@localhost:8090")
        url = IggyUrl.parse(raw["url"])  # raises its own ConfigError for 'url'
        dlq = _destination(given, "dlq.stream", "dlq.topic")
        on_failure = parse("on_admission_failure", _choice(FailurePolicy))
        if on_failure is FailurePolicy.DLQ and dlq is None:
            raise ConfigError("dlq.stream", "dlq.stream and dlq.topic are required when "
                              "on_admission_failure=dlq")
        if on_failure is not FailurePolicy.DLQ and dlq is not None:
            raise ConfigError("dlq.stream", "dlq.stream and dlq.topic are only used with "
                              f"on_admission_failure=dlq, but it is {on_failure}")
        state_stream = parse("state_stream", _name)
        if dlq is not None and dlq.stream == state_stream:
            raise ConfigError("state_stream", f"{show(state_stream)} is the dlq.stream; the "
                              "sink's state needs a stream of its own")
        admission = _admission_rules(given, parse, dlq, state_stream)
        missing_destination = _missing_destination(given, parse, admission)
        encoding = parse("partition_key_encoding", _choice(KeyEncoding))
        create = parse("create_destinations", parse_bool)
        return cls(
            url=url,
            columns=_column_names(raw),
            missing=missing_destination,
            admission=admission,
            on_admission_failure=on_failure,
            dlq=dlq,
            breaker=BreakerConfig(
                failure_threshold=parse("circuit_breaker.failure_threshold", _at_least(1)),
                cool_down=parse("circuit_breaker.cool_down", _seconds),
            ),
            partition_key_encoding=encoding,
            topic_defaults=_topic_defaults(given, parse, create, encoding),
            create_destinations=create,
            max_concurrent_destinations=parse("max_concurrent_destinations", _at_least(1)),
            max_batch_bytes=parse("max_batch_bytes", parse_positive_size),
            send_timeout=parse("send_timeout", _seconds),
            max_message_bytes=parse("max_message_bytes", _message_size),
            prewarm_deadline=parse("prewarm_deadline", _seconds),
            delivery=parse("delivery_guarantee", _choice(DeliveryGuarantee)),
            delivery_scan_messages=parse("delivery_scan_messages", _at_least(1)),
            state_stream=state_stream,
            json_columns=frozenset(
                name.strip() for name in raw.get("json_columns", "").split(",") if name.strip()
            ),
        )

    @property
    def prewarm(self) -> tuple[Destination, ...]:
        """The allowlist's literal destinations (no ``*``): known before any row arrives."""
        if self.admission.mode is not AdmissionMode.ALLOWLIST:
            return ()
        return tuple(Destination(e.stream, e.topic) for e in self.admission.entries
                     if WILDCARD not in (e.stream, e.topic))

    def new_admission(
        self,
        admitted: Iterable[Destination] = (),
        admit: Callable[[Destination], bool] | None = None,
    ) -> Admission:
        """An :class:`Admission` for one task, seeded with the query's admitted destinations;
        ``admit`` arbitrates new ones between the query's tasks."""
        return Admission(self.admission, admitted, admit)


_Parse = Callable[[str, Callable[[str], Any]], Any]


def _choice(enum: type[_E]) -> Callable[[str], _E]:
    def parse(text: str) -> _E:
        try:
            return enum(text.strip().lower())
        except ValueError:
            allowed = ", ".join(member.value for member in enum)
            raise ValueError(f"expected one of {allowed}; got {text!r}") from None

    return parse


def _at_least(minimum: int, maximum: int = MAX_LONG) -> Callable[[str], int]:
    return lambda text: parse_int(text, minimum=minimum, maximum=maximum)


def _seconds(text: str) -> float:
    return parse_positive_duration(text).total_seconds()


def _message_size(text: str) -> int:
    return parse_positive_size(text, maximum=MAX_MESSAGE_BYTES)


def _name(text: str) -> str:
    if not is_valid_name(text):
        raise ValueError(f"{show(text)} is not a valid name: use {NAME_RULE}")
    return text


def _destination(given: Mapping[str, str], stream: str, topic: str) -> Destination | None:
    """A (stream, topic) option pair: both or neither."""
    if stream not in given and topic not in given:
        return None
    for this, other in ((stream, topic), (topic, stream)):
        if this not in given:
            raise ConfigError(this, f"must be set together with {other}")
    names = []
    for option in (stream, topic):
        try:
            names.append(_name(given[option]))
        except ValueError as exc:
            raise ConfigError(option, str(exc)) from None
    return Destination(*names)


def _entries(parse: _Parse, option: str, mode: AdmissionMode) -> tuple[Entry, ...]:
    entries: tuple[Entry, ...] = parse(option, parse_entries)
    if any(entry.matches_everything for entry in entries):
        if mode is AdmissionMode.ALLOWLIST:
            raise ConfigError(option, "'*/*' admits every destination; say admission.mode=open "
                              "instead (the cap still applies)")
        raise ConfigError(option, "'*/*' would refuse every row; remove it (to stop writing, "
                          "stop the query)")
    return entries


def _admission_rules(
    given: Mapping[str, str], parse: _Parse, dlq: Destination | None, state_stream: str
) -> AdmissionRules:
    mode: AdmissionMode = parse("admission.mode", _choice(AdmissionMode))
    lists = {AdmissionMode.ALLOWLIST: "admission.allowlist",
             AdmissionMode.DENYLIST: "admission.denylist"}
    for list_mode, option in lists.items():
        if option in given and mode is not list_mode:
            raise ConfigError(option, f"is only used with admission.mode={list_mode}, "
                              f"but the mode is {mode}")
    entries: tuple[Entry, ...] = ()
    if mode in lists:
        option = lists[mode]
        if option not in given:
            raise ConfigError(option, f"is required when admission.mode={mode}")
        entries = _entries(parse, option, mode)
    return AdmissionRules(
        mode=mode,
        entries=entries,
        max_destinations=parse("admission.max_destinations", _at_least(1)),
        exempt=frozenset([dlq] if dlq else []),
        reserved=state_stream,
    )


def _missing_destination(
    given: Mapping[str, str], parse: _Parse, admission: AdmissionRules
) -> MissingDestination:
    default = _destination(given, "default_stream", "default_topic")
    derived = MissingPolicy.DEFAULT if default else MissingPolicy.ERROR
    policy = derived
    if "on_missing_destination" in given:
        policy = parse("on_missing_destination", _choice(MissingPolicy))
    if policy is MissingPolicy.DEFAULT and default is None:
        raise ConfigError("default_stream", "default_stream and default_topic are required when "
                          "on_missing_destination=default")
    if policy is not MissingPolicy.DEFAULT and default is not None:
        raise ConfigError("default_stream", "default_stream and default_topic are only used "
                          f"with on_missing_destination=default, but it is {policy}")
    if default is not None and default not in admission.exempt:
        reason = admission.list_reason(default)
        if reason is not None:
            option = ("default_stream" if reason is AdmissionReason.RESERVED
                      else f"admission.{admission.mode}")
            raise ConfigError(option, f"refuses the default destination {default} ({reason}); "
                              "every row without a destination would be refused")
    return MissingDestination(policy, default)


def _expiry(text: str) -> timedelta | Literal["never"]:
    if text.strip().lower() == "never":
        return "never"
    expiry = parse_positive_duration(text)
    if expiry >= _NEVER_EXPIRES:  # sent in µs as a u64, whose largest value means never
        raise ValueError(f"must be less than {_NEVER_EXPIRES} (or never)")
    return expiry


_NEVER_EXPIRES = timedelta(microseconds=2**64 - 1)


def _max_size(text: str) -> int | Literal["unlimited"]:
    return "unlimited" if text.strip().lower() == "unlimited" else parse_positive_size(text)


def _topic_defaults(
    given: Mapping[str, str], parse: _Parse, create: bool, encoding: KeyEncoding
) -> TopicDefaults:
    if not create:
        for option in _TOPIC_DEFAULTS:
            if option in given:
                raise ConfigError(option, "is only used when create_destinations=true")
        return TopicDefaults()
    partitions: int = parse("topic_defaults.partitions_count", _at_least(1, MAX_PARTITIONS))
    if encoding is KeyEncoding.PARTITION_ID and partitions < 2:
        raise ConfigError("topic_defaults.partitions_count", "must be at least 2 with "
                          "partition_key_encoding=partition_id: created topics would have a "
                          "single partition (or set create_destinations=false to write to "
                          "existing topics only)")
    expiry = parse("topic_defaults.message_expiry", _expiry) if (
        "topic_defaults.message_expiry" in given) else None
    size = parse("topic_defaults.max_size", _max_size) if (
        "topic_defaults.max_size" in given) else None
    return TopicDefaults(partitions_count=partitions, message_expiry=expiry, max_size=size)


def _column_names(raw: Mapping[str, str]) -> ColumnNames:
    """The ``*_column`` options: non-empty and pairwise distinct."""
    seen: dict[str, str] = {}
    names: dict[str, str] = {}
    for option in (d.name for d in OPTION_DOCS if d.name.endswith("_column")):
        column = raw[option]
        if not column.strip():
            raise ConfigError(option, "must name a column")
        if column in seen:
            raise ConfigError(option, f"names column {column!r}, already used by {seen[column]}")
        seen[column] = option
        names[option.removesuffix("_column")] = column
    return ColumnNames(**names)
