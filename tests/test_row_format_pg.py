"""``row_format=struct`` against the catalog: the structs of the tables the include rules cover,
tables of other shapes refused by ``load()``'s ``ConfigError``, and the planning's check that a
captured table still has the columns (and the rules the tables) the query started with."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.schema_watch import catalog_changed
from postgres_cdc_source.struct_types import struct_rows

pytestmark = pytest.mark.services


@pytest.fixture
def schema(pg: LocalPostgres) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    name = "rf_" + uuid.uuid4().hex[:10]
    with pg.connect() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        for table in ("a", "b"):
            conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, amount numeric(10,2))")
                         .format(sql.Identifier(name, table)))
        yield conn, name
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def _options(schema: str) -> CdcOptions:
    return CdcOptions.from_options({"dsn": "dbname=x", "slot": "s", "row_format": "struct",
                                    "include_tables": re.escape(schema) + r"\..*"})


def test_the_covered_tables_share_a_struct_and_changes_are_seen(
    schema: tuple[psycopg.Connection[Any], str],
) -> None:
    conn, name = schema
    options = _options(name)
    typed = struct_rows(conn, options.keeps)
    assert sorted(typed.tables) == [f"{name}.a", f"{name}.b"]
    assert typed.row.simpleString() == "struct<id:bigint,amount:decimal(10,2)>"
    assert not catalog_changed(conn, options, typed)
    conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, amount numeric(10,2))")
                 .format(sql.Identifier(name, "c")))
    assert catalog_changed(conn, options, typed)  # a table the rules cover now
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name, "c")))
    assert not catalog_changed(conn, options, typed)
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN note text").format(sql.Identifier(name, "b")))
    assert catalog_changed(conn, options, typed)


def test_tables_of_other_shapes_are_refused_naming_them(
    schema: tuple[psycopg.Connection[Any], str],
) -> None:
    conn, name = schema
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN note text").format(sql.Identifier(name, "b")))
    with pytest.raises(ConfigError, match=(
            f"option 'row_format': struct: row_format=struct needs tables of one shape, but "
            f"{name}.a and {name}.b differ: the second has more columns: 'note'")):
        struct_rows(conn, _options(name).keeps)
