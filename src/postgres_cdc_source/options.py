"""Every ``pg_cdc`` option, parsed and validated once, before any data moves.

Spark hands a data source its options as a case-insensitive mapping of lower-cased keys to
strings. :meth:`CdcOptions.from_options` turns that into a frozen, picklable dataclass or raises
:class:`~postgres_cdc_source.errors.ConfigError` naming the option at fault, so a typo fails
``load()`` on the driver instead of a task on an executor an hour later.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from iggy_spark.units import parse_bool, parse_byte_size, parse_int
from postgres_cdc_source.errors import ConfigError

__all__ = ["CdcOptions", "OptionDoc", "OPTION_DOCS", "PLUGINS", "SNAPSHOT_MODES", "redact_dsn"]

T = TypeVar("T")

PLUGINS = ("pgoutput", "test_decoding")
SNAPSHOT_MODES = ("never", "initial")

_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")
_MAX_ROWS = 2**31 - 1  # fetch/batch/spill sizes: more is no batch size, and FETCH overflows
_SECRET_KEYS = ("password", "sslpassword")


class OptionDoc(NamedTuple):
    """One row of the README's options table; the defaults below are the only copy."""

    name: str
    default: str
    meaning: str


OPTION_DOCS: tuple[OptionDoc, ...] = (
    OptionDoc(
        "dsn",
        "(required)",
        "libpq conninfo or URI of the database to capture; the "
        "password is redacted everywhere. `sslmode` and friends pass through.",
    ),
    OptionDoc("slot", "(required)", "logical replication slot name: lower-case letters, digits, _"),
    OptionDoc("plugin", "pgoutput", "output plugin: `pgoutput` or `test_decoding`"),
    OptionDoc(
        "publication",
        "(the slot name)",
        "pgoutput publication; created if missing "
        "(FOR ALL TABLES, or for the tables matching include_tables at creation)",
    ),
    OptionDoc("create_slot", "true", "create the slot (and publication) if missing"),
    OptionDoc("include_tables", "(all)", "regular expression, full match on `schema.table`"),
    OptionDoc("exclude_tables", "(none)", "regular expression, full match on `schema.table`"),
    OptionDoc(
        "max_bytes_per_trigger",
        "(unlimited)",
        "WAL bytes per micro-batch (`64MB` style); "
        "a batch always holds at least one whole transaction",
    ),
    OptionDoc(
        "fail_on_data_loss",
        "true",
        "fail when the slot is found ahead of the checkpoint "
        "(changes consumed elsewhere); false skips ahead with a warning",
    ),
    OptionDoc("topic_from", "(none)", "fill `topic`: `table`, or the name of a row column"),
    OptionDoc("stream_from", "(none)", "fill `stream`: `schema`, or the name of a row column"),
    OptionDoc(
        "partition_key_from",
        "(none)",
        "fill `partition_key`: `key` (the replica-identity key JSON), or the name of a row column",
    ),
    OptionDoc("default_stream", "(none)", "`stream` when stream_from gives none"),
    OptionDoc("default_topic", "(none)", "`topic` when topic_from gives none"),
    OptionDoc("fetch_rows", "10000", "rows fetched from the server per round trip"),
    OptionDoc("batch_rows", "10000", "rows per Arrow batch handed to Spark"),
    OptionDoc(
        "snapshot",
        "never",
        "`initial`: a query starting without a checkpoint first reads every captured table as "
        "it was at the slot's consistent point (rows with `op` = `read`), then streams changes "
        "from that point; `never`: changes only",
    ),
    OptionDoc(
        "snapshot_chunk_rows",
        "50000",
        "rows per snapshot chunk: one Spark partition each, a primary-key range "
        "(a range of pages for a table without one)",
    ),
    OptionDoc(
        "snapshot_max_rows_per_trigger",
        "500000",
        "snapshot rows per micro-batch (rounded up to whole chunks); "
        "each batch's end is a checkpointed resume point",
    ),
    OptionDoc(
        "spill_rows",
        "20000",
        "changes of one open transaction kept in memory before "
        "the rest waits on local disk for its COMMIT",
    ),
)

_DEFAULTS = {doc.name: doc.default for doc in OPTION_DOCS if not doc.default.startswith("(")}
# Spark adds these itself; they are not ours to validate.
_PASSTHROUGH = frozenset({"path", "checkpointlocation"})


def _parsed(option: str, text: str, parse: Callable[[str], T]) -> T:
    """Apply one of the shared scalar grammars, naming ``option`` when the value is bad."""
    try:
        return parse(text)
    except ValueError as exc:
        raise ConfigError(option, f"bad value for {option}: {exc}") from None


def _positive_int(text: str) -> int:
    return parse_int(text, minimum=1, maximum=_MAX_ROWS)


def _positive_size(text: str) -> int:
    size = parse_byte_size(text)
    if size <= 0:
        raise ValueError(f"must be positive, got {text!r}")
    return size


def _regex(option: str, text: str | None) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999}: OverflowError
        raise ConfigError(option, f"bad regular expression for {option}: {text!r}: {exc}") from None


def redact_dsn(dsn: str) -> str:
    """The conninfo with every secret replaced by ``***``, safe for logs and errors."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable dsn>"
    for key in _SECRET_KEYS:
        if key in params:
            params[key] = "***"
    return make_conninfo("", **params)


@dataclass(frozen=True)
class CdcOptions:
    """The parsed options of one ``pg_cdc`` stream; see :data:`OPTION_DOCS`."""

    dsn: str = field(repr=False)
    slot: str
    plugin: str
    publication: str
    create_slot: bool
    include_tables: re.Pattern[str] | None
    exclude_tables: re.Pattern[str] | None
    max_bytes_per_trigger: int | None
    fail_on_data_loss: bool
    topic_from: str | None
    stream_from: str | None
    partition_key_from: str | None
    default_stream: str | None
    default_topic: str | None
    fetch_rows: int
    batch_rows: int
    spill_rows: int
    snapshot: str
    snapshot_chunk_rows: int
    snapshot_max_rows_per_trigger: int

    @property
    def safe_dsn(self) -> str:
        """The DSN with its password redacted."""
        return redact_dsn(self.dsn)

    def __repr__(self) -> str:
        return f"CdcOptions(dsn={self.safe_dsn!r}, slot={self.slot!r}, plugin={self.plugin!r})"

    def keeps(self, schema: str, table: str) -> bool:
        """Whether ``include_tables``/``exclude_tables`` let changes of this table through."""
        name = f"{schema}.{table}"
        if self.include_tables is not None and not self.include_tables.fullmatch(name):
            return False
        return self.exclude_tables is None or not self.exclude_tables.fullmatch(name)

    @property
    def filters_tables(self) -> bool:
        return self.include_tables is not None or self.exclude_tables is not None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> CdcOptions:
        """Parse Spark's option map; raise :class:`ConfigError` naming the first bad option."""
        opts = {k.lower(): v for k, v in options.items()}
        known = {doc.name for doc in OPTION_DOCS}
        for key in opts:
            if key not in known and key not in _PASSTHROUGH:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(key, f"unknown pg_cdc option {key!r}{hint}")
        get = {**_DEFAULTS, **opts}.get

        dsn = get("dsn")
        if not dsn:
            raise ConfigError("dsn", "option 'dsn' is required (a libpq conninfo or URI)")
        if "\x00" in dsn:
            raise ConfigError("dsn", "bad value for dsn: it contains a NUL character")
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError:
            raise ConfigError(
                "dsn", "bad value for dsn: not a valid libpq conninfo or URI"
            ) from None

        slot = get("slot")
        if not slot:
            raise ConfigError("slot", "option 'slot' is required")
        if not _SLOT_NAME.fullmatch(slot):
            raise ConfigError(
                "slot",
                f"bad value for slot: {slot!r} (Postgres allows 1-63 lower-case letters, "
                "digits and underscores)",
            )
        plugin = str(get("plugin"))
        if plugin not in PLUGINS:
            raise ConfigError(
                "plugin", f"bad value for plugin: {plugin!r} (expected one of {', '.join(PLUGINS)})"
            )
        publication = get("publication") or slot
        if "\x00" in publication or len(publication.encode()) > 63:
            raise ConfigError(
                "publication",
                f"bad value for publication: {publication[:80]!r} (Postgres names are at most "
                "63 bytes, without NUL characters)",
            )
        if "publication" in opts and plugin != "pgoutput":
            raise ConfigError("publication", "option 'publication' only applies to plugin pgoutput")

        max_bytes = get("max_bytes_per_trigger")
        topic_from, stream_from = get("topic_from"), get("stream_from")
        key_from = get("partition_key_from")
        for option, value in (
            ("topic_from", topic_from),
            ("stream_from", stream_from),
            ("partition_key_from", key_from),
        ):
            if value is not None and not value.strip():
                raise ConfigError(option, f"bad value for {option}: empty")
        snapshot = str(get("snapshot"))
        if snapshot not in SNAPSHOT_MODES:
            raise ConfigError(
                "snapshot",
                f"bad value for snapshot: {snapshot!r} "
                f"(expected one of {', '.join(SNAPSHOT_MODES)})",
            )
        for option in ("snapshot_chunk_rows", "snapshot_max_rows_per_trigger"):
            if option in opts and snapshot != "initial":
                raise ConfigError(option, f"option {option!r} only applies with snapshot=initial")
        return cls(
            dsn=dsn,
            slot=slot,
            plugin=plugin,
            publication=publication,
            create_slot=_parsed("create_slot", str(get("create_slot")), parse_bool),
            include_tables=_regex("include_tables", get("include_tables")),
            exclude_tables=_regex("exclude_tables", get("exclude_tables")),
            max_bytes_per_trigger=_parsed("max_bytes_per_trigger", max_bytes, _positive_size)
            if max_bytes is not None
            else None,
            fail_on_data_loss=_parsed(
                "fail_on_data_loss", str(get("fail_on_data_loss")), parse_bool
            ),
            topic_from=topic_from,
            stream_from=stream_from,
            partition_key_from=key_from,
            default_stream=get("default_stream"),
            default_topic=get("default_topic"),
            fetch_rows=_parsed("fetch_rows", str(get("fetch_rows")), _positive_int),
            batch_rows=_parsed("batch_rows", str(get("batch_rows")), _positive_int),
            spill_rows=_parsed("spill_rows", str(get("spill_rows")), _positive_int),
            snapshot=snapshot,
            snapshot_chunk_rows=_parsed(
                "snapshot_chunk_rows", str(get("snapshot_chunk_rows")), _positive_int
            ),
            snapshot_max_rows_per_trigger=_parsed(
                "snapshot_max_rows_per_trigger",
                str(get("snapshot_max_rows_per_trigger")),
                _positive_int,
            ),
        )
