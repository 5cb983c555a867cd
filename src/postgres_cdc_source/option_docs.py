"""Every ``pg_cdc`` option as the docs list it: name, default, meaning (the docs' options tables
are checked against :data:`OPTION_DOCS`), and the options that mean something to one mode only.
:mod:`postgres_cdc_source.options` parses them."""

from __future__ import annotations

from connector_common.options import OptionDoc

__all__ = ["CDC_ONLY", "OPTION_DOCS", "POLLING_ONLY"]

OPTION_DOCS: tuple[OptionDoc, ...] = (
    OptionDoc(
        "dsn",
        "(required)",
        "libpq conninfo or URI of the database to capture; the "
        "password is redacted everywhere. `sslmode` and friends pass through.",
    ),
    OptionDoc(
        "primary_dsn",
        "(none)",
        "when `dsn` is a hot standby (Postgres 16+): libpq conninfo or URI of its primary, "
        "where `pg_cdc` creates and syncs the managed publications, writes backfill markers "
        "and takes backfill requests (the slot and the decoding stay on the standby); the "
        "password is redacted everywhere. Without it a standby is read with what the primary "
        "already has (see Deployment, Reading a standby); ignored while `dsn` is a primary",
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
        "pgoutput publication; if missing, created with its `<name>_inserts` sibling and kept in "
        "sync with the tables (see Publications); an existing one is used as it is",
    ),
    OptionDoc(
        "all_tables_publication",
        "false",
        "pgoutput with the managed publications: `true` also creates and reads "
        "`<publication>_all` (`FOR ALL TABLES`, inserts and truncates; superuser), which sends "
        "every insert of the database to the reader, so that new tables' rows arrive without "
        "the event trigger; `false` reads only the captured tables (an existing `_all` is no "
        "longer read from the next batch on; see Publications)",
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
    OptionDoc("include_tables", "(all)",
              "regular expression, full match on `schema.table`; a name holding `.` or `\"` "
              "is double-quoted there, its `\"` doubled (see Choosing tables)"),
    OptionDoc("exclude_tables", "(none)",
              "regular expression, full match on `schema.table` as for `include_tables`; "
              "wins over it"),
    OptionDoc(
        "message_prefixes",
        "(none)",
        "logical messages to deliver (`pg_logical_emit_message`, op `message`): a comma-"
        "separated list of prefixes, or `*` for all; none by default, so messages other tools "
        "write to the WAL never reach your topics unasked (see Logical messages)",
    ),
    OptionDoc(
        "generated_columns",
        "exclude",
        "`exclude`: the rows leave stored generated columns out, as pgoutput does before "
        "Postgres 18; `include`: they carry their values (changes, snapshot, backfill, polling "
        "and typed rows alike): with pgoutput from Postgres 18 (refused before it, naming the "
        "server's version), with test_decoding and `mode=polling` on every version; virtual "
        "generated columns (18) have no stored value and are always left out",
    ),
    OptionDoc(
        "include_schema_changes",
        "false",
        "`true` adds a row with `op` = `ddl` where a captured table's columns change (added, "
        "dropped, renamed, of another type), with the old and new column lists, just before "
        "the table's first change written with the new ones (see Schema changes as rows); "
        "`row_format=json` only",
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
    OptionDoc(
        "row_format",
        "json",
        "`json`: `key`, `before` and `after` as JSON text; `struct`: as structs with the "
        "Spark types of the captured tables' columns, read from the catalog when the query "
        "starts (the tables `include_tables` covers, all of one shape; see Typed rows); "
        "`variant`: as VARIANT values, tables of any shape (see Variant rows)",
    ),
    OptionDoc(
        "schema_evolution",
        "fail",
        "`row_format=struct`: what a captured table's column change does to the structs "
        "(see Typed rows). `fail`: the query stops before the first change the structs cannot "
        "type, and a restart on the same checkpoint is refused, naming the difference (a new "
        "checkpoint with the same slot goes on from the last delivered change); "
        "`add_columns`: changes are typed by column name, and a restart on the same "
        "checkpoint evolves the structs: columns added are appended, types widened (smallint "
        "to integer to bigint, real to double precision, a larger numeric or varchar), "
        "dropped and renamed columns stay as null fields (with `schema_location`); any other "
        "type change or another key is refused",
    ),
    OptionDoc(
        "schema_location",
        "(none)",
        "`schema_evolution=add_columns`: a directory (local or mounted: `/dbfs`, "
        "`/Volumes`; or a URI pyarrow opens: `s3://`, `gs://`, `abfs://`, `hdfs://`, with "
        "credentials from the environment, never in the URI), e.g. the query's "
        "checkpointLocation, where the driver keeps the query's structs between runs, so "
        "that `load()` gives the fields of dropped and renamed columns too",
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

CDC_ONLY = frozenset({
    "slot", "plugin", "publication", "all_tables_publication", "create_slot", "failover",
    "primary_dsn",
    "on_slot_lost",
    "include_tables", "exclude_tables", "message_prefixes", "include_schema_changes",
    "max_bytes_per_trigger",
    "min_partitions",
    "min_bytes_per_partition", "fail_on_data_loss",
    "spill_rows", "snapshot", "snapshot_chunk_rows", "snapshot_max_rows_per_trigger",
    "backfill_chunk_rows", "row_format", "schema_evolution", "schema_location",
})
"""Options that mean something only to ``mode=cdc``; refused with ``mode=polling``."""
POLLING_ONLY = frozenset(
    {"table", "tracking_column", "max_rows_per_trigger", "delete_after_read", "processed_column"}
)
"""Options that mean something only to ``mode=polling``; refused with ``mode=cdc``."""
