"""Pick the decoder and the peek options for the configured plugin."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from postgres_cdc_source.catalog import TableInfo, table_info
from postgres_cdc_source.decoding.changes import (
    Decoder,
    GeneratedColumns,
    MessageFilter,
    Retyping,
)
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder, pgoutput_options, read_message
from postgres_cdc_source.decoding.schema_changes import ColumnTracker
from postgres_cdc_source.decoding.text_format import TEST_DECODING_OPTIONS, TextFormatDecoder
from postgres_cdc_source.decoding.text_lines import message_line
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.partitions import owner_lookup

__all__ = ["make_decoder", "parse_message", "plugin_options", "sends_generated"]


def plugin_options(options: CdcOptions, publications: Sequence[str]) -> list[str]:
    """The output plugin's options as the flat name/value list the peek functions take.

    ``publications`` are pgoutput's ``publication_names`` (ignored by test_decoding).
    """
    pairs = (pgoutput_options(publications, messages=True)  # backfill markers, requests
             if options.plugin == "pgoutput" else TEST_DECODING_OPTIONS)
    return [item for pair in pairs.items() for item in pair]


def make_decoder(
    options: CdcOptions, conn: psycopg.Connection[Any], also: MessageFilter | None = None,
    typed: Retyping | None = None, columns: ColumnTracker | None = None,
) -> Decoder:
    """A fresh decoder for one peek session on ``conn``, delivering the logical messages
    ``message_prefixes`` asks for and those ``also`` picks (a backfill's markers), the rows
    typed by ``typed`` with ``row_format=struct``, ``ddl`` changes where ``columns`` finds a
    table's columns changed (``include_schema_changes``).

    test_decoding prints type names but not the replica identity, so its decoder looks tables up
    in the catalog, on the peeking connection (same ``search_path`` as the output it parses).
    """
    table_filter = options.keeps  # asked once per table; it also drops REQUESTS_TABLE
    keep_values = options.routes_by_column  # the Router reads decoded values, not JSON again
    def messages(prefix: str) -> bool:
        return options.keeps_message(prefix) or (also is not None and also(prefix))

    def catalog(schema: str, table: str) -> TableInfo | None:
        return table_info(conn, schema, table, generated=options.delivers_generated)

    if options.plugin == "pgoutput":
        return PgOutputDecoder(table_filter, keep_values=keep_values, messages=messages,
                               typed=typed, columns=columns,
                               generated=_generated(catalog) if sends_generated(conn) else None)

    return TextFormatDecoder(catalog, table_filter, keep_values=keep_values, messages=messages,
                             typed=typed, columns=columns,
                             owner=owner_lookup(conn, options.keeps))


def sends_generated(conn: psycopg.Connection[Any]) -> bool:
    """Whether the managed publications send stored generated columns (Postgres 18's
    ``publish_generated_columns = stored``, :mod:`~postgres_cdc_source.replication.publication`)."""
    return conn.info.server_version >= 180000


def _generated(catalog: Callable[[str, str], TableInfo | None]) -> GeneratedColumns:
    """The generated columns the rows leave out, as ``catalog`` says (with
    ``generated_columns=include`` it keeps the stored ones, so nothing is dropped)."""

    def generated(schema: str, table: str) -> frozenset[str]:
        info = catalog(schema, table)
        return frozenset(() if info is None else (c.name for c in info.columns if c.generated))
    return generated


def parse_message(plugin: str, data: bytes | str) -> tuple[bool, str, bytes]:
    """``(transactional?, prefix, content)`` of one peeked logical message row of ``plugin``."""
    if plugin == "pgoutput":
        assert isinstance(data, bytes)
        return read_message(data)
    assert isinstance(data, str)
    return message_line(data)
