"""``include_tables`` / ``exclude_tables``: a pattern matches one (schema, table) pair's text.

The text is ``schema.table`` with a name holding ``.`` or ``"`` double-quoted
(:func:`~postgres_cdc_source.options.qualified_name`): ``a."b.c"`` and ``"a.b".c`` are two
tables, where plain ``schema.table`` text made them one. Checked exhaustively on the text,
on the rules, and against a real Postgres through both plugins.
"""

from __future__ import annotations

import itertools
import json

import pytest
from psycopg import sql

from connector_common.lsn import parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.options import CdcOptions, qualified_name
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

_BASE = {"dsn": "host=localhost", "slot": "s"}


def _names(alphabet: str, longest: int) -> list[str]:
    return ["".join(chars) for n in range(1, longest + 1)
            for chars in itertools.product(alphabet, repeat=n)]


def test_no_two_tables_share_a_text() -> None:
    """Every (schema, table) pair of names of up to three of ``a``, ``.``, ``"`` and ``7`` (the
    characters that could make two texts meet) has a text of its own."""
    names = _names('a."7', 3)
    seen: dict[str, tuple[str, str]] = {}
    for pair in itertools.product(names, repeat=2):
        text = qualified_name(*pair)
        assert seen.setdefault(text, pair) == pair, f"{pair} and {seen[text]} are both {text}"


@pytest.mark.parametrize(("schema", "table", "text"), [
    ("public", "orders", "public.orders"),
    ("public", "Orders", "public.Orders"),
    ("sales", "order items", "sales.order items"),
    ("public", "7", "public.7"),
    ("a", "b.c", 'a."b.c"'),
    ("a.b", "c", '"a.b".c'),
    ("public", 'say "hi"', 'public."say ""hi"""'),
    ('"', ".", '""""."."'),
])
def test_the_text_of_a_table(schema: str, table: str, text: str) -> None:
    """Names without ``.`` or ``"`` as they are (the patterns of existing queries keep their
    tables); the others quoted as SQL quotes them."""
    assert qualified_name(schema, table) == text


@pytest.mark.parametrize(("rules", "kept"), [
    ({"include_tables": r'a\."b\.c"'}, {("a", "b.c")}),
    ({"include_tables": r'"a\.b"\.c'}, {("a.b", "c")}),
    ({"include_tables": r"a\.b\.c"}, set()),  # the old text is nobody's now
    ({"exclude_tables": r'a\."b\.c"'}, {("a.b", "c"), ("public", "7"), ("public", 'q"t'),
                                        ("public", "orders")}),
    ({"include_tables": r"public\..*", "exclude_tables": r"public\.7"},
     {("public", 'q"t'), ("public", "orders")}),
    ({"include_tables": r'public\."q""t"|public\.7'}, {("public", 'q"t'), ("public", "7")}),
    ({"include_tables": r"public\.orders"}, {("public", "orders")}),
])
def test_the_rules_keep_the_pairs_their_patterns_spell(
    rules: dict[str, str], kept: set[tuple[str, str]]
) -> None:
    options = CdcOptions.from_options({**_BASE, **rules})
    tables = [("a", "b.c"), ("a.b", "c"), ("public", "7"), ("public", 'q"t'),
              ("public", "orders")]
    assert {t for t in tables if options.keeps(*t)} == kept


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_tables_named_with_dots_quotes_and_digits_are_captured_by_their_pair(
    pg: LocalPostgres, name: str, plugin: str
) -> None:
    """Schemas ``N`` and ``N.x``: ``N."x.t"`` is captured, ``"N.x".t`` (the same plain text)
    is not; ``N.7`` and ``N."q""t"`` are; ``N.plain`` is left out, as the pattern says."""
    slot = f"{name}_{plugin}"
    wide = f"{name}.x"
    tables = [(name, "x.t"), (wide, "t"), (name, "7"), (name, 'q"t'), (name, "plain")]
    with pg.connect() as conn:
        for schema in (name, wide):
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for schema, table in tables:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(
                sql.Identifier(schema, table)))
    reader = PgCdcStreamReader(CdcOptions.from_options({
        "dsn": pg.dsn, "slot": slot, "plugin": plugin,
        "include_tables": rf'{name}\."x\.t"|{name}\.7|{name}\."q""t"'}))
    start = reader.initialOffset()
    try:
        with pg.connect() as conn:
            for number, (schema, table) in enumerate(tables):
                conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(
                    sql.Identifier(schema, table)), (number,))
        end = reader.latestOffset(start, ReadAllAvailable())
        rows = [row for batch in reader.read(CdcPartition(parse_lsn(start["lsn"]),
                                                          parse_lsn(end["lsn"])))
                for row in batch.to_pylist()]
    finally:
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert [(row["schema"], row["table"], json.loads(row["after"])["id"]) for row in rows] == [
        (name, "x.t", 0), (name, "7", 2), (name, 'q"t', 3)]
