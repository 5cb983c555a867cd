"""Every ``pg_cdc`` option, parsed and validated once, before any data moves.

Spark hands a data source its options as a case-insensitive mapping of lower-cased keys to
strings. :meth:`CdcOptions.from_options` turns that into a frozen, picklable dataclass or raises
:class:`~postgres_cdc_source.errors.ConfigError` naming the option at fault, so a typo fails
``load()`` on the driver instead of a task on an executor an hour later.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from connector_common.options import OptionDoc, OptionSet, parsed
from connector_common.units import parse_bool, parse_duration, parse_int, parse_positive_size
from postgres_cdc_source.errors import ConfigError

__all__ = [
    "CdcOptions", "PollingOptions", "OPTION_DOCS", "PLUGINS", "MODES",
    "SNAPSHOT_MODES", "ON_SLOT_LOST", "CDC_ONLY", "POLLING_ONLY", "MARKER_PREFIX", "redact_dsn",
]

T = TypeVar("T")

PLUGINS = ("pgoutput", "test_decoding")
MODES = ("cdc", "polling")
SNAPSHOT_MODES = ("never", "initial")
ON_SLOT_LOST = ("fail", "resnapshot")

MARKER_PREFIX = "pg_cdc.backfill.chunk"
"""Prefix of the logical messages a query writes to place a backfill chunk in its stream; never
delivered, even with ``message_prefixes=*``."""

_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")
_MAX_ROWS = 2**31 - 1  # fetch/batch/spill sizes: more is no batch size, and FETCH overflows
_SECRET_KEYS = ("password", "sslpassword")


OPTION_DOCS: tuple[OptionDoc, ...] = (
    OptionDoc(
        "dsn",
        "(required)",
        "libpq conninfo or URI of the database to capture; the "
        "password is redacted everywhere. `sslmode` and friends pass through.",
    ),
    OptionDoc(
        "mode",
        "cdc",
        "`cdc` (a logical replication slot) or `polling` (read one `table` by its "
        "`tracking_column`; no slot, works without `wal_level=logical`)",
    ),
    OptionDoc(
        "slot",
        "(required for cdc)",
        "logical replication slot name: lower-case letters, digits, _",
    ),
    OptionDoc("plugin", "pgoutput", "output plugin: `pgoutput` or `test_decoding`"),
    OptionDoc(
        "publication",
        "(the slot name)",
        "pgoutput publication; if missing, created with its `<name>_inserts` and `<name>_all` "
        "siblings and kept in sync with the tables (see Publications); an existing one is used "
        "as it is",
    ),
    OptionDoc("create_slot", "true", "create the slot (and publication) if missing"),
    OptionDoc(
        "failover",
        "false",
        "`true` creates the slot as a failover slot (Postgres 17+), which standbys synchronize "
        "so the stream continues on a promoted standby; refused at start on older servers. "
        "Off by default because it needs Postgres 17+ and standby configuration (see Failover "
        "slots), and because a primary with `synchronized_standby_slots` holds back decoding "
        "until those standbys confirm",
    ),
    OptionDoc(
        "on_slot_lost",
        "fail",
        "what the query does when its slot is missing or invalidated by Postgres (the changes "
        "since the checkpoint are gone): `fail` stops it with `SlotLostError` naming the slot, "
        "the reason and the ways back; `resnapshot` recreates the slot and reads the captured "
        "tables again as `snapshot=initial` does (rows with `op` = `read`), which restores the "
        "state but not the history of the gap (see Lost slots); needs `create_slot=true`",
    ),
    OptionDoc("include_tables", "(all)", "regular expression, full match on `schema.table`"),
    OptionDoc("exclude_tables", "(none)", "regular expression, full match on `schema.table`"),
    OptionDoc(
        "message_prefixes",
        "(none)",
        "logical messages to deliver (`pg_logical_emit_message`, op `message`): a comma-"
        "separated list of prefixes, or `*` for all; none by default, so messages other tools "
        "write to the WAL never reach your topics unasked (see Logical messages)",
    ),
    OptionDoc(
        "max_bytes_per_trigger",
        "(unlimited)",
        "WAL bytes per micro-batch (`64MB` style); "
        "a batch always holds at least one whole transaction",
    ),
    OptionDoc(
        "min_partitions",
        "1",
        "Spark tasks a batch's changes are decoded in, each a WAL range read through a "
        "temporary copy of the slot; above 1, `start_pipeline` and `pg-to-iggy` keep per-key "
        "order (composing `pg_cdc` yourself, use `in_key_order`: see Parallel decoding)",
    ),
    OptionDoc(
        "min_bytes_per_partition",
        "16MB",
        "WAL bytes below which a batch is not split further: a batch of less than twice this "
        "is one partition",
    ),
    OptionDoc(
        "fail_on_data_loss",
        "true",
        "fail when the slot is found ahead of the checkpoint "
        "(changes consumed elsewhere); false skips ahead with a warning",
    ),
    OptionDoc(
        "topic_from",
        "(none)",
        "fill `topic`: `table`, or the name of a row column (then default_topic is required)",
    ),
    OptionDoc(
        "stream_from",
        "(none)",
        "fill `stream`: `schema`, or the name of a row column (then default_stream is required)",
    ),
    OptionDoc(
        "partition_key_from",
        "(none)",
        "fill `partition_key`: `key` (the replica-identity key JSON), or the name of a row column",
    ),
    OptionDoc("default_stream", "(none)", "`stream` when stream_from gives none"),
    OptionDoc("default_topic", "(none)", "`topic` when topic_from gives none"),
    OptionDoc(
        "connect_retry_timeout",
        "30s",
        "how long connecting (and reading again after a session lost mid-read) is retried "
        "while the server does not answer or is starting, restarting or shutting down (at "
        "query start, planning and in tasks) before the query fails; `0s` fails at once; a "
        "refused login or a missing database is never retried",
    ),
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
        "backfill_chunk_rows",
        "10000",
        "rows per backfill chunk (see Backfill): the key range read and placed in the stream "
        "at once, at most one chunk per micro-batch",
    ),
    OptionDoc(
        "spill_rows",
        "20000",
        "changes of one open transaction kept in memory before "
        "the rest waits on local disk for its COMMIT",
    ),
    OptionDoc(
        "table",
        "(required for polling)",
        "polling: the table to read, as SQL names it (`schema.table`, search_path applies)",
    ),
    OptionDoc(
        "tracking_column",
        "(required for polling)",
        "polling: an orderable column that grows as rows are written (a sequence, a "
        "timestamp); rows are read in its order, rows where it is NULL are not read",
    ),
    OptionDoc(
        "max_rows_per_trigger",
        "(unlimited)",
        "polling: rows per micro-batch; a batch always ends on a whole tracking value "
        "and also holds every late-committed row",
    ),
    OptionDoc(
        "delete_after_read",
        "false",
        "polling: DELETE a batch's rows once Spark has committed it (the table needs a key)",
    ),
    OptionDoc(
        "processed_column",
        "(none)",
        "polling: a boolean column set to true once Spark has committed the batch; rows "
        "where it is true are not read",
    ),
)

# Routing options, and the value of each that is not a column name.
_BUILTIN_ROUTE = {"topic_from": "table", "stream_from": "schema", "partition_key_from": "key"}
# A column route can find no value (a delete under the default replica identity carries only
# the key): the default it then falls back to is required.
_ROUTE_DEFAULT = {"topic_from": "default_topic", "stream_from": "default_stream"}


def _is_column_route(option: str, value: str | None) -> bool:
    return value is not None and value != _BUILTIN_ROUTE[option]


CDC_ONLY = frozenset({
    "slot", "plugin", "publication", "create_slot", "failover", "on_slot_lost",
    "include_tables", "exclude_tables", "message_prefixes", "max_bytes_per_trigger",
    "min_partitions",
    "min_bytes_per_partition", "fail_on_data_loss",
    "spill_rows", "snapshot", "snapshot_chunk_rows", "snapshot_max_rows_per_trigger",
    "backfill_chunk_rows",
})
"""Options that mean something only to ``mode=cdc``; refused with ``mode=polling``."""
POLLING_ONLY = frozenset(
    {"table", "tracking_column", "max_rows_per_trigger", "delete_after_read", "processed_column"}
)
"""Options that mean something only to ``mode=polling``; refused with ``mode=cdc``."""

_OPTIONS = OptionSet("pg_cdc", OPTION_DOCS, ConfigError)
_MODE_DEFAULTS = {"cdc": frozenset(POLLING_ONLY), "polling": frozenset(CDC_ONLY)}


def _parsed(option: str, text: str, parse: Callable[[str], T]) -> T:
    return parsed(option, text, parse, ConfigError)


def _positive_int(text: str) -> int:
    return parse_int(text, minimum=1, maximum=_MAX_ROWS)


def _regex(option: str, text: str | None) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999}: OverflowError
        raise ConfigError(option, f"bad regular expression {text!r}: {exc}") from None


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
class PollingOptions:
    """The ``mode=polling`` options; the table and columns are checked against the database
    by :func:`postgres_cdc_source.polling.table.inspect` at ``load()``."""

    table: str
    tracking_column: str
    max_rows_per_trigger: int | None
    delete_after_read: bool
    processed_column: str | None

    @property
    def destructive(self) -> bool:
        return self.delete_after_read or self.processed_column is not None


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
    min_partitions: int = 1
    min_bytes_per_partition: int = 16 * 1024 * 1024
    failover: bool = False
    on_slot_lost: str = "fail"
    mode: str = "cdc"
    polling: PollingOptions | None = None  # set exactly when mode is polling
    connect_retry_seconds: float = 30.0
    message_prefixes: frozenset[str] = frozenset()
    """Prefixes of the logical messages to deliver; ``*`` stands for every prefix."""
    backfill_chunk_rows: int = 10000

    @property
    def safe_dsn(self) -> str:
        """The DSN with its password redacted."""
        return redact_dsn(self.dsn)

    def __repr__(self) -> str:
        if self.polling is not None:
            table = self.polling.table
            return f"CdcOptions(dsn={self.safe_dsn!r}, mode='polling', table={table!r})"
        return f"CdcOptions(dsn={self.safe_dsn!r}, slot={self.slot!r}, plugin={self.plugin!r})"

    def keeps(self, schema: str, table: str) -> bool:
        """Whether ``include_tables``/``exclude_tables`` let changes of this table through."""
        name = f"{schema}.{table}"
        if self.include_tables is not None and not self.include_tables.fullmatch(name):
            return False
        return self.exclude_tables is None or not self.exclude_tables.fullmatch(name)

    @property
    def delivers_messages(self) -> bool:
        """Whether any logical message is delivered (``message_prefixes`` is set)."""
        return bool(self.message_prefixes)

    def keeps_message(self, prefix: str) -> bool:
        """Whether ``message_prefixes`` lets a logical message with ``prefix`` through."""
        return prefix in self.message_prefixes or (
            "*" in self.message_prefixes and prefix != MARKER_PREFIX)

    @property
    def routes_by_column(self) -> bool:
        """Whether a routing option names a row column (rather than table, schema or key)."""
        return any(
            _is_column_route(option, getattr(self, option)) for option in _BUILTIN_ROUTE
        )

    @property
    def filters_tables(self) -> bool:
        return self.include_tables is not None or self.exclude_tables is not None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> CdcOptions:
        """Parse Spark's option map; raise :class:`ConfigError` naming the first bad option."""
        opts = _OPTIONS.given(options)
        mode = opts.get("mode", "cdc")
        if mode not in MODES:
            raise ConfigError(
                "mode", f"bad value: {mode!r} (expected one of {', '.join(MODES)})"
            )
        for key in sorted(opts):
            if key in _MODE_DEFAULTS[mode]:
                other = "polling" if mode == "cdc" else "cdc"
                raise ConfigError(
                    key, f"only applies to mode={other}, not mode={mode}"
                )
        get = {**_OPTIONS.defaults, **opts}.get

        dsn = get("dsn")
        if not dsn:
            raise ConfigError("dsn", "is required (a libpq conninfo or URI)")
        if "\x00" in dsn:
            raise ConfigError("dsn", "bad value: it contains a NUL character")
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError:
            raise ConfigError(
                "dsn", "bad value: not a valid libpq conninfo or URI"
            ) from None

        polling = _polling_options(get) if mode == "polling" else None
        slot = (get("slot") or "") if polling is None else ""  # polling has no slot
        if not slot and polling is None:
            raise ConfigError("slot", "is required")
        if polling is None and not _SLOT_NAME.fullmatch(slot):
            raise ConfigError(
                "slot",
                f"bad value: {slot!r} (Postgres allows 1-63 lower-case letters, "
                "digits and underscores)",
            )
        plugin = str(get("plugin"))
        if plugin not in PLUGINS:
            raise ConfigError(
                "plugin", f"bad value: {plugin!r} (expected one of {', '.join(PLUGINS)})"
            )
        publication = get("publication") or slot
        if "\x00" in publication or len(publication.encode()) > 63:
            raise ConfigError(
                "publication",
                f"bad value: {publication[:80]!r} (Postgres names are at most "
                "63 bytes, without NUL characters)",
            )
        if "publication" in opts and plugin != "pgoutput":
            raise ConfigError("publication", "only applies to plugin pgoutput")

        max_bytes = get("max_bytes_per_trigger")
        topic_from, stream_from = get("topic_from"), get("stream_from")
        key_from = get("partition_key_from")
        for option, value in (
            ("topic_from", topic_from),
            ("stream_from", stream_from),
            ("partition_key_from", key_from),
        ):
            if value is not None and not value.strip():
                raise ConfigError(option, "bad value: empty")
            default = _ROUTE_DEFAULT.get(option)
            if default is not None and _is_column_route(option, value) and not get(default):
                raise ConfigError(
                    default,
                    f"is required with {option}={value!r}: a change whose "
                    f"row does not carry column {value!r} (a delete under the default replica "
                    f"identity carries only the key) is routed there",
                )
        snapshot = str(get("snapshot"))
        if snapshot not in SNAPSHOT_MODES:
            raise ConfigError(
                "snapshot",
                f"bad value: {snapshot!r} "
                f"(expected one of {', '.join(SNAPSHOT_MODES)})",
            )
        on_slot_lost = str(get("on_slot_lost"))
        if on_slot_lost not in ON_SLOT_LOST:
            raise ConfigError(
                "on_slot_lost",
                f"bad value: {on_slot_lost!r} (expected one of {', '.join(ON_SLOT_LOST)})",
            )
        create_slot = _parsed("create_slot", str(get("create_slot")), parse_bool)
        if on_slot_lost == "resnapshot" and not create_slot:
            raise ConfigError(
                "on_slot_lost",
                "resnapshot recreates the slot, so it needs create_slot=true",
            )
        for option in ("snapshot_chunk_rows", "snapshot_max_rows_per_trigger"):
            if option in opts and snapshot != "initial" and on_slot_lost != "resnapshot":
                raise ConfigError(
                    option, "only applies with snapshot=initial or on_slot_lost=resnapshot"
                )
        return cls(
            dsn=dsn,
            slot=slot,
            plugin=plugin,
            publication=publication,
            create_slot=create_slot,
            failover=_parsed("failover", str(get("failover")), parse_bool),
            on_slot_lost=on_slot_lost,
            include_tables=_regex("include_tables", get("include_tables")),
            exclude_tables=_regex("exclude_tables", get("exclude_tables")),
            max_bytes_per_trigger=_parsed("max_bytes_per_trigger", max_bytes, parse_positive_size)
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
            min_partitions=_parsed("min_partitions", str(get("min_partitions")), _positive_int),
            min_bytes_per_partition=_parsed(
                "min_bytes_per_partition", str(get("min_bytes_per_partition")), parse_positive_size
            ),
            mode=mode,
            polling=polling,
            connect_retry_seconds=_parsed(
                "connect_retry_timeout", str(get("connect_retry_timeout")), parse_duration
            ).total_seconds(),
            message_prefixes=_prefixes(get("message_prefixes")),
            backfill_chunk_rows=_parsed(
                "backfill_chunk_rows", str(get("backfill_chunk_rows")), _positive_int
            ),
        )


def _prefixes(text: str | None) -> frozenset[str]:
    """``message_prefixes``: comma-separated prefixes, none empty; ``*`` alone means all."""
    if text is None:
        return frozenset()
    prefixes = [p.strip() for p in text.split(",")]
    if not all(prefixes):
        raise ConfigError("message_prefixes", f"bad value: {text!r} has an empty prefix")
    if "*" in prefixes and len(prefixes) > 1:
        raise ConfigError("message_prefixes", f"bad value: {text!r} ('*' means every "
                          "prefix: list prefixes or give '*' alone)")
    if any("\x00" in p for p in prefixes):
        raise ConfigError("message_prefixes", "bad value: it contains a NUL character")
    return frozenset(prefixes)


def _polling_options(get: Callable[[str], str | None]) -> PollingOptions:
    """The ``mode=polling`` options (names only; the catalog checks happen at ``load()``)."""
    names: dict[str, str] = {}
    for option in ("table", "tracking_column"):
        value = get(option)
        if not value or not value.strip():
            raise ConfigError(option, "is required with mode=polling")
        if "\x00" in value:
            raise ConfigError(option, "bad value: it contains a NUL character")
        names[option] = value
    max_rows = get("max_rows_per_trigger")
    delete = _parsed("delete_after_read", str(get("delete_after_read")), parse_bool)
    processed = get("processed_column")
    if processed is not None and not processed.strip():
        raise ConfigError("processed_column", "bad value: empty")
    if delete and processed is not None:
        raise ConfigError(
            "processed_column",
            "options 'delete_after_read' and 'processed_column' exclude each other: "
            "a read row is either deleted or marked",
        )
    return PollingOptions(
        table=names["table"],
        tracking_column=names["tracking_column"],
        max_rows_per_trigger=_parsed("max_rows_per_trigger", max_rows, _positive_int)
        if max_rows is not None
        else None,
        delete_after_read=delete,
        processed_column=processed,
    )
