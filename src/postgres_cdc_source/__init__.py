"""``pg_cdc``: Postgres logical-decoding changes as a Spark structured stream.

``spark.readStream.format("pg_cdc")`` works without registration once the package is installed;
:func:`register` does it explicitly (for sessions started before installation, or Spark Connect).
:func:`request_backfill` and :func:`cancel_backfill` ask a running query to deliver (or stop
delivering) a table's rows; :func:`abandon_batch` skips the stuck batch of a stopped query;
:func:`json_rows` turns a ``row_format=struct`` stream's rows into the JSON mode's.

The names in ``__all__`` (these functions and the exceptions) are the public API, with those of
:mod:`postgres_cdc_source.monitoring` (what monitoring tools read of a running query). Every
other module is internal and may move between versions. The functions that talk to Postgres
import psycopg when first used, so the package imports without it (an install without the
``cdc`` extra); :func:`json_rows` needs no psycopg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from connector_common.dependencies import MissingDependencyError, require
from connector_common.errors import ConnectorError
from postgres_cdc_source.errors import (
    BackfillRefused,
    CdcError,
    ConfigError,
    DecodeError,
    SlotError,
    SlotLostError,
    SourceError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from postgres_cdc_source.abandon import abandon_batch
    from postgres_cdc_source.backfill.requests import cancel_backfill, request_backfill
    from postgres_cdc_source.rows.struct.json_text import json_rows

__all__ = [
    "BackfillRefused",
    "CdcError",
    "ConfigError",
    "ConnectorError",
    "DecodeError",
    "MissingDependencyError",
    "SlotError",
    "SlotLostError",
    "SourceError",
    "abandon_batch",
    "cancel_backfill",
    "json_rows",
    "register",
    "request_backfill",
]

_NEEDS_PSYCOPG = {
    "request_backfill": "postgres_cdc_source.backfill.requests",
    "cancel_backfill": "postgres_cdc_source.backfill.requests",
    "abandon_batch": "postgres_cdc_source.abandon",
}
_LAZY = {"json_rows": "postgres_cdc_source.rows.struct.json_text"}


def __getattr__(name: str) -> Any:
    """The public functions imported from their module when first asked: those that need
    psycopg (:class:`MissingDependencyError` without it), and :func:`json_rows` (pyspark's and
    pyarrow's, which Spark has)."""
    module = _NEEDS_PSYCOPG.get(name)
    if module is not None:
        require("pg_cdc", "cdc", "psycopg")
    else:
        module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def register(spark: SparkSession) -> None:
    """Register the ``pg_cdc`` format on ``spark``."""
    from postgres_cdc_source.source import PgCdcDataSource

    spark.dataSource.register(PgCdcDataSource)
