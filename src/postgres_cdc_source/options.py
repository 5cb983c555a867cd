"""Every ``pg_cdc`` option, parsed and validated once, before any data moves.

Spark hands a data source its options as a case-insensitive mapping of lower-cased keys to
strings. :meth:`CdcOptions.from_options` turns that into a frozen, picklable dataclass or raises
:class:`~postgres_cdc_source.errors.ConfigError` naming the option at fault, so a typo fails
``load()`` on the driver instead of a task on an executor an hour later.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from connector_common.options import OptionSet, parsed
from connector_common.units import parse_bool, parse_duration, parse_int, parse_positive_size
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.option_docs import CDC_ONLY, OPTION_DOCS, POLLING_ONLY
from postgres_cdc_source.sql_names import qualified_name

__all__ = [
    "BACKFILL_CHANNEL",
    "GENERATED_COLUMNS",
    "MARKER_PREFIX",
    "MODES",
    "ON_SLOT_LOST",
    "PLUGINS",
    "REQUESTS_TABLE",
    "REQUEST_PREFIX",
    "ROW_FORMATS",
    "ROW_FORMAT_REFUSALS",
    "SCHEMA_EVOLUTION",
    "SNAPSHOT_MODES",
    "CdcOptions",
    "PollingOptions",
    "redact_dsn",
]

T = TypeVar("T")

PLUGINS = ("pgoutput", "test_decoding")
MODES = ("cdc", "polling")
SNAPSHOT_MODES = ("never", "initial")
ON_SLOT_LOST = ("fail", "resnapshot")
ROW_FORMATS = ("json", "struct", "variant")
SCHEMA_EVOLUTION = ("fail", "add_columns")
GENERATED_COLUMNS = ("exclude", "include")

MARKER_PREFIX = "pg_cdc.backfill.chunk"
"""Prefix of the logical messages a query writes to place a backfill chunk in its stream; never
delivered, even with ``message_prefixes=*``."""
REQUEST_PREFIX = "pg_cdc.backfill"
"""Prefix of the logical messages that ask a query to backfill (see
:mod:`postgres_cdc_source.backfill.requests`)."""
BACKFILL_CHANNEL = "pg_cdc_backfill"
"""The ``NOTIFY`` channel that tells a running query to look for backfill requests."""
REQUESTS_TABLE = ("public", "pg_cdc_requests")
"""The table whose rows are the backfill requests (:mod:`postgres_cdc_source.backfill.requests`):
who may insert into it is who may steer a query's backfills. Never captured, whatever the
filters say: its rows are the connector's, not the application's."""

_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")
_MAX_ROWS = 2**31 - 1  # fetch/batch/spill sizes: more is no batch size, and FETCH overflows
_SECRET_KEYS = ("password", "sslpassword")

# Routing options, and the value of each that is not a column name.
_BUILTIN_ROUTE = {"topic_from": "table", "stream_from": "schema", "partition_key_from": "key"}
# A column route can find no value (a delete under the default replica identity carries only
# the key): the default it then falls back to is required.
_ROUTE_DEFAULT = {"topic_from": "default_topic", "stream_from": "default_stream"}


def _is_column_route(option: str, value: str | None) -> bool:
    return value is not None and value != _BUILTIN_ROUTE[option]


_OPTIONS = OptionSet("pg_cdc", OPTION_DOCS, ConfigError)
_MODE_DEFAULTS = {"cdc": frozenset(POLLING_ONLY), "polling": frozenset(CDC_ONLY)}

Options = Mapping[str, str]
"""The options given, over the documented defaults."""


def _parse(options: Options, option: str, parse: Callable[[str], T]) -> T:
    """Option ``option`` (one with a default) read with the grammar ``parse``."""
    return parsed(option, options[option], parse, ConfigError)


def _parse_optional(options: Options, option: str, parse: Callable[[str], T]) -> T | None:
    """Option ``option`` read with the grammar ``parse``; ``None`` when not given."""
    text = options.get(option)
    return None if text is None else parsed(option, text, parse, ConfigError)


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    """The grammar of an option that takes one of ``choices``."""
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{text!r} (expected one of {', '.join(choices)})")
        return text

    return parse


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
    all_tables_publication: bool = False
    """Whether ``<publication>_all`` is created and read (see
    :mod:`~postgres_cdc_source.replication.publication`)."""
    row_format: str = "json"
    """``json``: ``key``/``before``/``after`` as JSON text; ``struct``: as structs of the
    captured tables' columns (:mod:`postgres_cdc_source.rows.struct`); ``variant``: as
    VARIANT values (:mod:`postgres_cdc_source.rows.variant`)."""
    schema_evolution: str = "fail"
    """``row_format=struct``: what a restart on a checkpoint written with other structs does
    (:func:`postgres_cdc_source.rows.struct.structs.checkpoint_difference`), and how a change is
    typed (:meth:`postgres_cdc_source.rows.struct.structs.StructRows.retyped`)."""
    schema_location: str | None = None
    """``schema_evolution=add_columns``: the directory where the query keeps its structs
    between runs (:mod:`postgres_cdc_source.rows.struct.history`)."""
    generated_columns: str = "exclude"
    """Whether the rows carry stored generated columns (``include``) or leave them out."""
    include_schema_changes: bool = False
    """Whether a ``ddl`` row marks a captured table's change of columns
    (:mod:`postgres_cdc_source.decoding.schema_changes`)."""
    primary_dsn: str | None = field(default=None, repr=False)
    """When ``dsn`` is a hot standby: its primary, where the query's writes go
    (:mod:`postgres_cdc_source.replication.standby`)."""

    @property
    def safe_dsn(self) -> str:
        """The DSN with its password redacted."""
        return redact_dsn(self.dsn)

    def on_primary(self) -> CdcOptions:
        """These options connecting to ``primary_dsn`` (which must be set) instead of ``dsn``:
        every connection rule (retries, the password kept out of messages) applies to it."""
        assert self.primary_dsn is not None
        return replace(self, dsn=self.primary_dsn, primary_dsn=None)

    def __repr__(self) -> str:
        if self.polling is not None:
            table = self.polling.table
            return f"CdcOptions(dsn={self.safe_dsn!r}, mode='polling', table={table!r})"
        primary = ("" if self.primary_dsn is None
                   else f", primary_dsn={redact_dsn(self.primary_dsn)!r}")
        return (f"CdcOptions(dsn={self.safe_dsn!r}{primary}, slot={self.slot!r}, "
                f"plugin={self.plugin!r})")

    def keeps(self, schema: str, table: str) -> bool:
        """Whether ``include_tables``/``exclude_tables`` let changes of this table through."""
        if (schema, table) == REQUESTS_TABLE:
            return False
        name = qualified_name(schema, table)
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
    def delivers_generated(self) -> bool:
        """Whether the rows carry stored generated columns (``generated_columns=include``)."""
        return self.generated_columns == "include"

    @property
    def routes_by_column(self) -> bool:
        """Whether a routing option names a row column (rather than table, schema or key)."""
        return any(
            _is_column_route(option, getattr(self, option)) for option in _BUILTIN_ROUTE
        )

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> CdcOptions:
        """Parse Spark's option map; raise :class:`ConfigError` naming the first bad option."""
        given = _OPTIONS.given(options)
        mode = _mode(given)
        opts: Options = {**_OPTIONS.defaults, **given}
        dsn = _dsn(opts.get("dsn"))
        primary_dsn = None if "primary_dsn" not in given else _dsn(given["primary_dsn"],
                                                                     "primary_dsn")
        polling = _polling_options(opts) if mode == "polling" else None
        slot = _slot(opts.get("slot")) if polling is None else ""  # polling has no slot
        plugin = _parse(opts, "plugin", _choice(PLUGINS))
        publication = _publication(opts.get("publication") or slot, given, plugin)
        topic_from, stream_from, key_from = _routes(opts)
        snapshot = _parse(opts, "snapshot", _choice(SNAPSHOT_MODES))
        on_slot_lost = _parse(opts, "on_slot_lost", _choice(ON_SLOT_LOST))
        create_slot = _parse(opts, "create_slot", parse_bool)
        _check_snapshot_options(given, snapshot, on_slot_lost, create_slot)
        return cls(
            dsn=dsn,
            slot=slot,
            plugin=plugin,
            publication=publication,
            create_slot=create_slot,
            failover=_parse(opts, "failover", parse_bool),
            on_slot_lost=on_slot_lost,
            include_tables=_regex("include_tables", opts.get("include_tables")),
            exclude_tables=_regex("exclude_tables", opts.get("exclude_tables")),
            max_bytes_per_trigger=_parse_optional(opts, "max_bytes_per_trigger",
                                                  parse_positive_size),
            fail_on_data_loss=_parse(opts, "fail_on_data_loss", parse_bool),
            topic_from=topic_from,
            stream_from=stream_from,
            partition_key_from=key_from,
            default_stream=opts.get("default_stream"),
            default_topic=opts.get("default_topic"),
            fetch_rows=_parse(opts, "fetch_rows", _positive_int),
            batch_rows=_parse(opts, "batch_rows", _positive_int),
            spill_rows=_parse(opts, "spill_rows", _positive_int),
            snapshot=snapshot,
            snapshot_chunk_rows=_parse(opts, "snapshot_chunk_rows", _positive_int),
            snapshot_max_rows_per_trigger=_parse(opts, "snapshot_max_rows_per_trigger",
                                                 _positive_int),
            min_partitions=_parse(opts, "min_partitions", _positive_int),
            min_bytes_per_partition=_parse(opts, "min_bytes_per_partition", parse_positive_size),
            mode=mode,
            polling=polling,
            connect_retry_seconds=_parse(opts, "connect_retry_timeout",
                                         parse_duration).total_seconds(),
            message_prefixes=_prefixes(opts.get("message_prefixes")),
            backfill_chunk_rows=_parse(opts, "backfill_chunk_rows", _positive_int),
            all_tables_publication=_all_tables(opts, given, plugin),
            row_format=_row_format(opts, given),
            schema_evolution=_schema_evolution(opts, given),
            schema_location=_schema_location(opts, given),
            include_schema_changes=_schema_changes(opts),
            generated_columns=_parse(opts, "generated_columns", _choice(GENERATED_COLUMNS)),
            primary_dsn=primary_dsn,
        )


def _all_tables(opts: Options, given: Options, plugin: str) -> bool:
    if "all_tables_publication" in given and plugin != "pgoutput":
        raise ConfigError("all_tables_publication", "only applies to plugin pgoutput")
    return _parse(opts, "all_tables_publication", parse_bool)


_NO_MESSAGE_ROW = "a logical message has no row of the captured tables' columns"
ROW_FORMAT_REFUSALS: dict[str, dict[str, str]] = {
    "json": {},
    "struct": {"message_prefixes": _NO_MESSAGE_ROW},
    "variant": {"message_prefixes": _NO_MESSAGE_ROW, **dict.fromkeys(
        ("topic_from", "stream_from", "partition_key_from"),
        "its values are encoded variants; route with row_format=json or struct")},
}
"""The options each row format refuses when given (option -> why), checked here, when the
options are parsed (:attr:`postgres_cdc_source.rows.RowFormat.refused_options`); besides,
``schema_evolution`` applies with ``struct`` only and ``include_schema_changes`` with ``json``
only."""


def _row_format(opts: Options, given: Options) -> str:
    """``row_format``, refusing the options it cannot serve (:data:`ROW_FORMAT_REFUSALS`)."""
    row_format = _parse(opts, "row_format", _choice(ROW_FORMATS))
    for option, why in ROW_FORMAT_REFUSALS[row_format].items():
        if option in given:
            raise ConfigError(option, f"not supported with row_format={row_format} ({why})")
    return row_format


def _schema_evolution(opts: Options, given: Options) -> str:
    if "schema_evolution" in given and opts.get("row_format") != "struct":
        raise ConfigError("schema_evolution", "only applies with row_format=struct")
    return _parse(opts, "schema_evolution", _choice(SCHEMA_EVOLUTION))


def _schema_location(opts: Options, given: Options) -> str | None:
    if "schema_location" in given and opts.get("schema_evolution") != "add_columns":
        raise ConfigError("schema_location", "only applies with schema_evolution=add_columns "
                          "(the structs it keeps are the union add_columns evolves)")
    location = opts.get("schema_location") or None
    if location is not None and "@" in urlsplit(location).netloc:
        raise ConfigError("schema_location", "a URI with a user or password: give the "
                          "credentials through the environment (as the file system's SDK "
                          "finds them), never in the option")
    return location


def _schema_changes(opts: Options) -> bool:
    include = _parse(opts, "include_schema_changes", parse_bool)
    if include and opts.get("row_format") != "json":
        raise ConfigError("include_schema_changes", f"not supported with row_format="
                          f"{opts.get('row_format')}: a ddl row's before and after are column "
                          "lists, not rows of the table (use row_format=json)")
    return include


def _mode(given: Options) -> str:
    """``mode``, once no option of the other mode is given."""
    mode = parsed("mode", given.get("mode", "cdc"), _choice(MODES), ConfigError)
    for key in sorted(given):
        if key in _MODE_DEFAULTS[mode]:
            other = "polling" if mode == "cdc" else "cdc"
            raise ConfigError(key, f"only applies to mode={other}, not mode={mode}")
    return mode


def _dsn(dsn: str | None, option: str = "dsn") -> str:
    if not dsn:
        raise ConfigError(option, "is required (a libpq conninfo or URI)" if option == "dsn"
                          else "bad value: empty (a libpq conninfo or URI)")
    if "\x00" in dsn:
        raise ConfigError(option, "bad value: it contains a NUL character")
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise ConfigError(option, "bad value: not a valid libpq conninfo or URI") from None
    return dsn


def _slot(slot: str | None) -> str:
    if not slot:
        raise ConfigError("slot", "is required")
    if not _SLOT_NAME.fullmatch(slot):
        raise ConfigError(
            "slot",
            f"bad value: {slot!r} (Postgres allows 1-63 lower-case letters, digits and "
            "underscores)",
        )
    return slot


def _publication(publication: str, given: Options, plugin: str) -> str:
    if "\x00" in publication or len(publication.encode()) > 63:
        raise ConfigError(
            "publication",
            f"bad value: {publication[:80]!r} (Postgres names are at most 63 bytes, without NUL "
            "characters)",
        )
    if "publication" in given and plugin != "pgoutput":
        raise ConfigError("publication", "only applies to plugin pgoutput")
    return publication


def _routes(opts: Options) -> tuple[str | None, str | None, str | None]:
    """``topic_from``, ``stream_from`` and ``partition_key_from``, each with the default it
    needs when it names a column."""
    for option in _BUILTIN_ROUTE:
        value = opts.get(option)
        if value is not None and not value.strip():
            raise ConfigError(option, "bad value: empty")
        default = _ROUTE_DEFAULT.get(option)
        if default is not None and _is_column_route(option, value) and not opts.get(default):
            raise ConfigError(
                default,
                f"is required with {option}={value!r}: a change whose row does not carry column "
                f"{value!r} (a delete under the default replica identity carries only the key) "
                "is routed there",
            )
    return opts.get("topic_from"), opts.get("stream_from"), opts.get("partition_key_from")


def _check_snapshot_options(
    given: Options, snapshot: str, on_slot_lost: str, create_slot: bool
) -> None:
    if on_slot_lost == "resnapshot" and not create_slot:
        raise ConfigError(
            "on_slot_lost", "resnapshot recreates the slot, so it needs create_slot=true"
        )
    for option in ("snapshot_chunk_rows", "snapshot_max_rows_per_trigger"):
        if option in given and snapshot != "initial" and on_slot_lost != "resnapshot":
            raise ConfigError(
                option, "only applies with snapshot=initial or on_slot_lost=resnapshot"
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


def _polling_options(opts: Options) -> PollingOptions:
    """The ``mode=polling`` options (names only; the catalog checks happen at ``load()``)."""
    names: dict[str, str] = {}
    for option in ("table", "tracking_column"):
        value = opts.get(option)
        if not value or not value.strip():
            raise ConfigError(option, "is required with mode=polling")
        if "\x00" in value:
            raise ConfigError(option, "bad value: it contains a NUL character")
        names[option] = value
    delete = _parse(opts, "delete_after_read", parse_bool)
    processed = opts.get("processed_column")
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
        max_rows_per_trigger=_parse_optional(opts, "max_rows_per_trigger", _positive_int),
        delete_after_read=delete,
        processed_column=processed,
    )
