"""Every ``iggy`` source option, parsed and validated once on the driver, before any data moves.

:data:`OPTION_DOCS` is the only copy of the defaults (the docs' table is checked against it);
names are read by the machinery every connector shares (:mod:`connector_common.options`), so a
misspelt option is refused with the closest valid name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from connector_common.options import OptionDoc, OptionSet, parsed
from connector_common.units import MAX_LONG, MAX_U32, parse_bool, parse_int, parse_positive_size
from iggy_spark.errors import ConfigError
from iggy_spark.identifiers import identifier
from iggy_spark.iggy_url import IggyUrl
from iggy_spark.source.offsets import OffsetSpec, parse_ending_spec, parse_offset_spec

__all__ = ["OPTION_DOCS", "PAYLOAD_FORMATS", "SourceOptions", "parse_timestamp"]

OPTION_DOCS = (
    OptionDoc("url", "(required)",
              "`iggy://user:password@host:port[?tls=true...]`, as for `iggy_routed`; the "
              "password never appears in logs, plans or errors"),
    OptionDoc("stream", "(required)", "the Iggy stream (name or numeric id) to read from"),
    OptionDoc("topics", "(one of the two)",
              "comma-separated topic names; each must exist when the query starts (one deleted "
              "later is lost data: `fail_on_data_loss`)"),
    OptionDoc("topic_pattern", "(one of the two)",
              "a regular expression over the stream's topic names (full match), evaluated at "
              "every planning, so topics created later are picked up (from `earliest`)"),
    OptionDoc("starting_offsets", "earliest",
              "`earliest`, `latest`, or a JSON map `{\"topic\": {\"0\": 42}}` of the first "
              "offset to read per partition (`-2` earliest, `-1` latest; partitions left out "
              "start at `earliest`). Streaming: only used when the checkpoint is new"),
    OptionDoc("starting_timestamp", "(none)",
              "instead of `starting_offsets`: start each partition at its first message "
              "appended at or after this time (ISO-8601, UTC unless it says otherwise, or "
              "milliseconds since the epoch); partitions with nothing that recent start at "
              "`latest`"),
    OptionDoc("ending_offsets", "latest",
              "batch reads only: `latest` or a JSON map like `starting_offsets` of the offset "
              "to stop before (exclusive; `-1` latest; partitions left out end at `latest`)"),
    OptionDoc("ending_timestamp", "(none)",
              "batch reads only, instead of `ending_offsets`: stop each partition before its "
              "first message appended at or after this time (as `starting_timestamp`); "
              "partitions with nothing that recent are read to `latest`"),
    OptionDoc("max_messages_per_trigger", "(unlimited)",
              "admission control: at most this many messages per micro-batch, shared fairly "
              "among partitions; honoured by `Trigger.AvailableNow` too"),
    OptionDoc("max_bytes_per_trigger", "(unlimited)",
              "admission control: at most about this many bytes per micro-batch (`64MB`, "
              "`512KB` or bytes), shared fairly among partitions and charged at each "
              "partition's average stored message size; a batch reads at least one message. "
              "With `max_messages_per_trigger` both hold; honoured by `Trigger.AvailableNow`"),
    OptionDoc("max_messages_per_partition", "500000",
              "an Iggy partition's range longer than this is split over several Spark "
              "partitions (tasks); a task costs about as much as reading 100,000 small "
              "messages, so splits much smaller than that cost more than they gain"),
    OptionDoc("poll_bytes", "4MB",
              "about how many bytes one poll request fetches (`4MB`, `512KB` or bytes): each "
              "poll asks for as many messages as fit, judged by the previous poll's messages; "
              "one poll is one Arrow batch, and a task holds at most two"),
    OptionDoc("poll_messages", "10000",
              "at most this many messages per poll request (and Arrow batch), whatever their "
              "size"),
    OptionDoc("payload_format", "binary",
              "`binary`: the `payload` column as sent; `json`: the rows are the payloads' JSON "
              "fields, in the schema given with `.schema(...)`; `pg_cdc`: the rows `pg_cdc` "
              "produced, from the payloads an `iggy_routed` sink wrote from it"),
    OptionDoc("report_consumer", "(none)",
              "an Iggy consumer name under which each committed batch's offsets are stored "
              "on the server, for monitoring tools' lag (Spark's checkpoint stays the truth)"),
    OptionDoc("fail_on_data_loss", "true",
              "`true` fails the query when planned offsets no longer exist (retention, a topic "
              "deleted); `false` skips what was lost and goes on"),
)

_OPTIONS = OptionSet("iggy", OPTION_DOCS, ConfigError)
_MAXIMUM = {
    "poll_messages": MAX_U32,  # the poll request's count field
    "max_messages_per_trigger": MAX_LONG,  # Spark's ReadMaxRows
    "max_messages_per_partition": MAX_LONG,  # a range of Iggy offsets, in Spark's checkpoint
}
"""The largest value of each count: what the field it travels in holds."""
_MAX_MICROS = 2**64 - 1
"""A poll by timestamp sends µs since the epoch as an unsigned 64-bit number."""


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options; picklable (executors get a copy with every task)."""

    url: IggyUrl
    stream: str
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    starting: OffsetSpec
    starting_timestamp: int | None
    """µs since the epoch, as Iggy stamps messages."""
    ending: OffsetSpec
    ending_timestamp: int | None
    """µs since the epoch, like :attr:`starting_timestamp`."""
    max_messages_per_trigger: int | None
    max_bytes_per_trigger: int | None
    max_messages_per_partition: int
    poll_bytes: int
    poll_messages: int
    fail_on_data_loss: bool
    report_consumer: str | None
    payload_format: str
    """``binary``, ``json`` or ``pg_cdc``."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's option map; raises :class:`ConfigError` naming the option to fix."""
        user = _OPTIONS.given(options)
        given = {**_OPTIONS.defaults, **user}
        for timestamp, offsets in (("starting_timestamp", "starting_offsets"),
                                   ("ending_timestamp", "ending_offsets")):
            if timestamp in user and offsets in user:
                raise ConfigError(timestamp, f"give it or {offsets!r}, not both")

        def required(name: str) -> str:
            value = given.get(name, "").strip()
            if not value:
                raise ConfigError(name, "is required")
            return value

        def positive(name: str) -> int:
            return parsed(name, given[name],
                          lambda t: parse_int(t, minimum=1, maximum=_MAXIMUM[name]), ConfigError)

        url = parsed("url", required("url"), IggyUrl.parse, ConfigError)
        topics, pattern = _subscription(given.get("topics"), given.get("topic_pattern"))
        cap = given.get("max_messages_per_trigger")
        byte_cap = given.get("max_bytes_per_trigger")
        since, until = given.get("starting_timestamp"), given.get("ending_timestamp")
        return cls(
            url=url,
            stream=_named("stream", required("stream")),
            topics=topics,
            topic_pattern=pattern,
            starting=parsed("starting_offsets", given["starting_offsets"], parse_offset_spec,
                            ConfigError),
            starting_timestamp=None if since is None else parsed(
                "starting_timestamp", since, parse_timestamp, ConfigError),
            ending=parsed("ending_offsets", given["ending_offsets"], parse_ending_spec,
                          ConfigError),
            ending_timestamp=None if until is None else parsed(
                "ending_timestamp", until, parse_timestamp, ConfigError),
            max_messages_per_trigger=None if cap is None else positive("max_messages_per_trigger"),
            max_bytes_per_trigger=None if byte_cap is None else parsed(
                "max_bytes_per_trigger", byte_cap, parse_positive_size, ConfigError),
            max_messages_per_partition=positive("max_messages_per_partition"),
            poll_bytes=parsed("poll_bytes", given["poll_bytes"], parse_positive_size,
                              ConfigError),
            poll_messages=positive("poll_messages"),
            fail_on_data_loss=parsed("fail_on_data_loss", given["fail_on_data_loss"], parse_bool,
                                     ConfigError),
            report_consumer=_named("report_consumer",
                                   given.get("report_consumer", "").strip()) or None,
            payload_format=parsed("payload_format", given["payload_format"], _payload_format,
                                  ConfigError),
        )

    def wants(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed to (by name or by pattern)."""
        if self.topics is not None:
            return topic in self.topics
        pattern = self.topic_pattern
        return pattern is not None and re.fullmatch(pattern, topic) is not None


def _named(option: str, text: str) -> str:
    """``text``, refused now if no request could carry it (a name over 255 bytes), rather than
    at every poll or report."""
    if text:
        parsed(option, text, lambda t: identifier(t, "the name"), ConfigError)
    return text


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (UTC when it names no zone), as µs
    since the epoch; ASCII only, from the epoch on (a poll by timestamp sends an unsigned
    64-bit number of µs)."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        micros = int(text) * 1000
    else:
        try:
            moment = datetime.fromisoformat(text)  # ASCII digits only, unlike int()
        except ValueError:
            raise ValueError("expected an ISO-8601 time like 2026-11-25T10:00:00Z or "
                             "milliseconds since the epoch") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        micros = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    if not 0 <= micros <= _MAX_MICROS:
        raise ValueError(f"must be at or after 1970-01-01T00:00:00Z and at most {_MAX_MICROS} "
                         f"µs after it, got {text!r}")
    return micros



PAYLOAD_FORMATS = ("binary", "json", "pg_cdc")


def _payload_format(text: str) -> str:
    word = text.strip().lower()
    if word not in PAYLOAD_FORMATS:
        raise ValueError(f"expected one of {', '.join(PAYLOAD_FORMATS)}")
    return word


def _subscription(
    topics: str | None, pattern: str | None
) -> tuple[tuple[str, ...] | None, str | None]:
    """Exactly one of ``topics`` and ``topic_pattern``, checked."""
    if (topics is None) == (pattern is None):
        raise ConfigError("topics", "give exactly one of 'topics' and 'topic_pattern'")
    if topics is not None:
        names = tuple(dict.fromkeys(t.strip() for t in topics.split(",") if t.strip()))
        if not names:
            raise ConfigError("topics", "lists no topic; use topics=name1,name2")
        return names, None
    assert pattern is not None
    try:
        re.compile(pattern)
    except (re.error, OverflowError) as exc:  # OverflowError: a{99999999999}
        raise ConfigError("topic_pattern", f"is not a regular expression: {exc}") from None
    return None, pattern
