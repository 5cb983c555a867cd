"""The compiled core (``iggy_spark_core``) against the pure-Python pgoutput decoder on a real
server, with a workload written after Postgres's own logical-decoding regression tests
(``contrib/test_decoding/sql``: ddl, toast, truncate, messages, replorigin, decoding_into_rel).

The workload runs once per server version, and the slot is peeked once, as the reader peeks it
(:func:`~postgres_cdc_source.replication.peeking.fetches`, on a connection with
:data:`~postgres_cdc_source.pg_types.SESSION_SETTINGS`). The same rows are then read both ways,
as :func:`postgres_cdc_source.stream.reader._peeked` wires them: the decoder
:func:`~postgres_cdc_source.decoding.factory.make_decoder` builds, its events or the core's (a
fetch of 1, 7 or every row at a time), :func:`~postgres_cdc_source.assembly.transactions` and
:func:`~postgres_cdc_source.assembly.record_batches` with small and large batches and spills.
The two must give the same batches row for row, or fail with the same
:class:`~postgres_cdc_source.errors.DecodeError`. A second peek, by sessions with other
settings, holds the two equal where the converters meet text they were not written for.
"""

from __future__ import annotations

import importlib
import json
import re
import secrets
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from support.decoding import loads

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.catalog import column_lists
from postgres_cdc_source.connections import connect
from postgres_cdc_source.decoding.blocks import ChangeBlock
from postgres_cdc_source.decoding.changes import PeekRow
from postgres_cdc_source.decoding.compiled import CompiledPgOutput
from postgres_cdc_source.decoding.factory import make_decoder, plugin_options
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.decoding.schema_changes import ColumnTracker
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import DecodeError, SchemaChangedError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.pg_types import SESSION_SETTINGS
from postgres_cdc_source.replication import peeking, positions
from postgres_cdc_source.rows import RowFormat
from postgres_cdc_source.rows.json.format import JSON_ROWS
from postgres_cdc_source.rows.struct.catalog import struct_rows
from postgres_cdc_source.rows.struct.structs import StructRows

pytestmark = pytest.mark.services

PREFIX = "cc-test"
"""The logical messages' prefix the options deliver; ``cc-other``'s are counted, not kept."""

# --- the workload ------------------------------------------------------------------------------

# (column, type, SQL values): row n of the typed table takes the column's value n (cycling), and
# one more row is NULL in every column but the key.
TYPED: list[tuple[str, str, list[str]]] = [
    ("i2", "int2", ["-32768", "32767", "0"]),
    ("i4", "int4", ["-2147483648", "2147483647", "-1"]),
    ("i8", "int8", ["-9223372036854775808", "9223372036854775807", "42"]),
    ("o", "oid", ["0", "4294967295", "1259"]),
    ("num", "numeric", ["'NaN'", "'-0.000001230'", "1e100", "'Infinity'", "'-Infinity'",
                        "123456789012345678901234567890.0987654321", "0"]),
    ("dec", "numeric(12,4)", ["12.5", "-99999999.9999", "0"]),
    ("f4", "float4", ["'NaN'", "'Infinity'", "'-0'", "'1e-05'", "'3.4028235e38'", "'1.4e-45'",
                      "0.1", "'-Infinity'", "16777217", "0.30000001", "'1e-10'", "123456.79",
                      "'7.0e-39'", "'1e+20'", "3.14159265358979"]),
    ("f8", "float8", ["'NaN'", "'-Infinity'", "'-0'", "'1e-05'", "'1e+100'",
                      "0.1::float8 + 0.2::float8", "'5e-324'", "'1.7976931348623157e308'",
                      "'Infinity'", "123456789012345678", "100", "'1e16'", "'1e15'", "-1.5e-7",
                      "'1e21'", "'1e22'", "'1e-06'", "0.0001", "123456.789", "9007199254740993",
                      "'-1e-300'", "'2.2250738585072014e-308'", "'4.9406564584124654e-324'"]),
    ("b", "bool", ["true", "false"]),
    ("t", "text", [r"""E'it''s "quoted" \\ back\\slash'""",
                   r"E'line1\nline2\ttab\rcr\x01\x1f\x7f\b\f'",
                   "'héllo wörld ☃ 😀 中文'", r"E'\u2028\u2029\ufeff\u200b\u0080\u009f'",
                   "''", "' '", "'NULL'", """'{"not": "json"}'""", r"E'\\x00'",
                   "'</script><!--'", "repeat('long ', 400)"]),
    ("vc", "varchar(30)", ["'x y'", "'NULL'", "''", "'ünï'"]),
    ("ch", "char(6)", ["'ab'", "''", "'abcdef'"]),
    ("nm", "name", ["'a name'", "'Ünï'"]),
    ("qc", '"char"', ["'x'", "'é'", "''"]),
    ("by", "bytea", [r"'\x00ff'", "''", r"'\xdeadbeef'", "decode(repeat('ff', 100), 'hex')",
                     r"'\x0a'"]),
    ("j", "json", ["""'{"k": [1, 2.50],  "z" : null}'""", r"""'  [1, 2.50 , {"a":"\u00e9\n"}]  '""",
                   """'{"k":1,"k":2}'""", "'123456789012345678901234567890'", r"""'"\u0000"'""",
                   "'null'", r"""E'{\n  "nl": true\n}'""", "'[]'"]),
    ("jb", "jsonb", [r"""'{"b": 1, "a": [true, null, "x\"y"]}'""", r"""'"\u00e9"'""", "'null'",
                     "'{}'", "'1e1000'", "'[1.0, -0, 0.1e-5]'"]),
    ("ts", "timestamp", ["'infinity'", "'-infinity'", "'0044-03-15 12:00:00 BC'",
                         "'2024-02-29 12:34:56.789012'", "'294276-12-31 23:59:59.999999'",
                         "'1999-12-31 23:59:59.5'", "'4713-01-01 00:00:00 BC'",
                         "'2000-01-01 00:00:00'"]),
    ("tz", "timestamptz", ["'2024-06-01 12:00:00+05:30'", "'infinity'", "'-infinity'",
                           "'0001-01-01 00:00:00+00 BC'", "'1969-12-31 23:59:59.999999+00'",
                           "'2000-01-01 00:00:00-08'", "'294276-12-31 23:59:59.999999+00'",
                           "'1900-01-01 00:00:00+00'"]),
    ("d", "date", ["'infinity'", "'-infinity'", "'4714-11-24 BC'", "'5874897-12-31'",
                   "'2024-02-29'", "'0001-01-01'"]),
    ("tm", "time", ["'24:00:00'", "'00:00:00.000001'", "'12:34:56'"]),
    ("ttz", "timetz", ["'12:00:00+05:30'", "'00:00:00-14'"]),
    ("iv", "interval", ["'-1 year 2 mons -3 days 04:05:06.789'", "'0'", "'1 day'",
                        "'178000000 years'", "'-0.000001 seconds'"]),
    ("u", "uuid", ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
                   "'00000000-0000-0000-0000-000000000000'"]),
    ("ia", "int4[]", ["'{1,NULL,-3}'", "'{}'", "'[0:1]={7,8}'", "'{NULL}'"]),
    ("ta", "text[]", [r"""ARRAY['a b', NULL, 'NULL', '"', E'\\', '', '{}', ',', 'é',
                      E'tab\there', E'nl\nhere', 'x"y']""", "'{}'", "'{x}'", """'{"",""}'"""]),
    ("fa", "float8[]", ["'{NaN,Infinity,-Infinity,-0,1e-05,1e+100}'",
                        "'{0.1,0.30000000000000004,100}'"]),
    ("na", "numeric[]", ["'{1.5,NaN,-Infinity}'", "'{}'"]),
    ("ba", "bool[]", ["'{t,f,NULL}'", "'{}'"]),
    ("ja", "jsonb[]", [r"""ARRAY['{"a": 1}'::jsonb, 'null', NULL, '"s,t"']"""]),
    ("tza", "timestamptz[]", ["ARRAY['infinity'::timestamptz, '2024-01-01 00:00:00+00', NULL]"]),
    ("bya", "bytea[]", [r"ARRAY['\x00ff'::bytea, '', NULL]"]),
    ("md", "int8[]", ["'{{1,2},{NULL,4}}'", "'{{{1}},{{2}}}'", "'{}'"]),
    ("e", "mood", ["'calm'", """'it''s "fine"'""", "'ünïcode'", "'a,b {c}'"]),
    ("ea", "mood[]", ["ARRAY['calm', 'a,b {c}', NULL]::mood[]", "'{}'"]),
    ("pos", "positive", ["1", "2147483647"]),
    ("lab", "label", [r"E'domain \\ text'", "''"]),
    ("posa", "positive[]", ["'{1,2}'"]),
    ("ip", "inet", ["'192.168.0.1/24'", "'::1'"]),
    ("mac", "macaddr", ["'08:00:2b:01:02:03'"]),
    ("pt", "point", ["'(1.5,-2)'"]),
    ("r", "int4range", ["'[1,5)'", "'empty'", "'(,)'"]),
    ("bits", "varbit", ["B'1011'", "B''"]),
    ("tsv", "tsvector", ["'a fat cat'"]),
    ("lsn", "pg_lsn", ["'16/B374D848'", "'0/0'"]),
    ("mon", "money", ["12.34"]),
]
TYPED_ROWS = max(len(values) for _, _, values in TYPED)
TYPED_NAMES = ["id", *(name for name, _, _ in TYPED)]


def _typed_sql() -> list[str]:
    """Every type's values inserted, each row then updated to another row's values (all columns
    sent), half of them deleted."""
    columns = ", ".join(name for name, _, _ in TYPED)
    rows = [f"({n + 1}, " + ", ".join(f"({v[n % len(v)]})::{t}" for _, t, v in TYPED) + ")"
            for n in range(TYPED_ROWS)]
    return [
        "CREATE TYPE mood AS ENUM ('calm', 'it''s \"fine\"', 'ünïcode', 'a,b {c}')",
        "CREATE DOMAIN positive AS int4 CHECK (VALUE > 0)",
        "CREATE DOMAIN label AS text",
        "CREATE TABLE typed (id int4 PRIMARY KEY, "
        + ", ".join(f"{name} {pg_type}" for name, pg_type, _ in TYPED) + ")",
        f"INSERT INTO typed (id, {columns}) VALUES " + ", ".join(rows),
        f"INSERT INTO typed (id) VALUES ({TYPED_ROWS + 1})",
        f"UPDATE typed AS t SET ({columns}) = (SELECT {columns} FROM typed AS s"
        f" WHERE s.id = t.id % {TYPED_ROWS + 1} + 1)",
        "DELETE FROM typed WHERE id % 2 = 0",
    ]


# Changes interleaved with DDL, between and inside transactions (after ddl.sql)
DDL = [
    "CREATE TABLE evolving (id serial PRIMARY KEY, weight int, label varchar(80))",
    "BEGIN; INSERT INTO evolving (weight, label) VALUES (10, '10');"
    " INSERT INTO evolving (weight, label) VALUES (11, '11'); COMMIT",
    "ALTER TABLE evolving ADD COLUMN extra int",
    "INSERT INTO evolving (weight, label, extra) VALUES (20, '20', 5)",
    "BEGIN; INSERT INTO evolving (weight, label, extra) VALUES (21, '21', 6), (22, '22', NULL);"
    " UPDATE evolving SET extra = 7 WHERE weight = 10; COMMIT",
    "ALTER TABLE evolving DROP COLUMN extra",
    "INSERT INTO evolving (weight, label) VALUES (30, '30')",
    "ALTER TABLE evolving RENAME COLUMN label TO tag",
    "INSERT INTO evolving (weight, tag) VALUES (40, '40')",
    "ALTER TABLE evolving ALTER COLUMN tag TYPE int4 USING tag::int4",
    "INSERT INTO evolving (weight, tag) VALUES (50, 50)",
    "BEGIN; INSERT INTO evolving (weight, tag) VALUES (60, 61);"
    " ALTER TABLE evolving ADD COLUMN note1 int;"
    " INSERT INTO evolving (weight, tag, note1) VALUES (60, 62, 1);"
    " ALTER TABLE evolving ADD COLUMN note2 text DEFAULT 'd';"
    " INSERT INTO evolving (weight, tag, note2) VALUES (60, 63, 'n');"
    " ALTER TABLE evolving ALTER COLUMN weight TYPE numeric(12,3);"
    " UPDATE evolving SET weight = weight / 7 WHERE tag = 61;"
    " ALTER TABLE evolving DROP COLUMN note1;"
    " DELETE FROM evolving WHERE tag = 62; COMMIT",
    # renamed between and inside transactions
    "CREATE TABLE before_rename (id int PRIMARY KEY, v text)",
    "INSERT INTO before_rename VALUES (1, 'a')",
    "ALTER TABLE before_rename RENAME TO after_rename",
    "BEGIN; INSERT INTO after_rename VALUES (2, 'b'); UPDATE after_rename SET v = 'c' WHERE id = 1;"
    " ALTER TABLE after_rename RENAME TO renamed_twice; DELETE FROM renamed_twice WHERE id = 2;"
    " COMMIT",
    # a unique key first, then a primary key added by a rewrite
    "CREATE TABLE unique_then_pkey (id2 serial UNIQUE NOT NULL, data int)",
    "INSERT INTO unique_then_pkey (data) VALUES (10)",
    "ALTER TABLE unique_then_pkey ADD COLUMN id serial PRIMARY KEY",
    "INSERT INTO unique_then_pkey (data) VALUES (11)",
    "DELETE FROM unique_then_pkey",
    # tables created (and one dropped) inside a transaction, key updates among them
    "BEGIN; CREATE TABLE fleeting (id serial PRIMARY KEY, data int);"
    " INSERT INTO fleeting (data) SELECT g FROM generate_series(1, 120) AS g;"
    " DELETE FROM fleeting WHERE id <= 40;"
    " UPDATE fleeting SET data = -data WHERE id > 100;"
    " UPDATE fleeting SET id = -id WHERE id = 50;"
    " CREATE TABLE odd_key (id text PRIMARY KEY, data text);"
    " INSERT INTO odd_key VALUES ('ab', 'foo');"
    " UPDATE odd_key SET id = 'x', data = 'quux';"
    " DROP TABLE fleeting; COMMIT",
    # identifiers to quote, a key of two columns in another order than the table's
    """CREATE TABLE "Odd ""Name"" é" ("Col 1" int PRIMARY KEY, "x""y]:" text, "é" text,"""
    r""" U&"tab\0009here" int, "select" bool)""",
    """INSERT INTO "Odd ""Name"" é" VALUES (1, 'a', 'b', 2, true), (2, NULL, 'ü', NULL, false)""",
    r"""UPDATE "Odd ""Name"" é" SET "é" = 'c', U&"tab\0009here" = 3""",
    """UPDATE "Odd ""Name"" é" SET "Col 1" = 10 WHERE "Col 1" = 1""",
    """DELETE FROM "Odd ""Name"" é" WHERE "Col 1" = 2""",
    "CREATE TABLE composite (region text, id int, v text, PRIMARY KEY (id, region))",
    "INSERT INTO composite VALUES ('eu', 1, 'a'), ('us', 1, 'b'), ('eu', 2, NULL)",
    "UPDATE composite SET v = 'c' WHERE id = 1",
    "UPDATE composite SET region = 'ap' WHERE id = 2",
    "DELETE FROM composite WHERE region = 'us'",
    # subtransactions: released, rolled back, alone (after ddl.sql's tr_sub)
    "CREATE TABLE nested (id serial PRIMARY KEY, path text)",
    "BEGIN; INSERT INTO nested (path) VALUES ('top-1'); SAVEPOINT a;"
    " INSERT INTO nested (path) VALUES ('a-1'); RELEASE SAVEPOINT a; SAVEPOINT b; SAVEPOINT c;"
    " INSERT INTO nested (path) VALUES ('c-1'); RELEASE SAVEPOINT c;"
    " INSERT INTO nested (path) VALUES ('b-1'); ROLLBACK TO SAVEPOINT b;"
    " INSERT INTO nested (path) VALUES ('top-2'); COMMIT",
    "BEGIN; SAVEPOINT lone; INSERT INTO nested (path) VALUES ('sub-only'); COMMIT",
]

# Replica identities, and tables with no key (after ddl.sql's table_without_key & co.)
IDENTITY = [
    "CREATE TABLE identity (id int PRIMARY KEY, code text NOT NULL, v int)",
    "CREATE UNIQUE INDEX identity_code ON identity (code)",
    "INSERT INTO identity VALUES (1, 'c1', 1), (2, 'c2', 2), (3, 'c3', 3)",
    "UPDATE identity SET v = 10 WHERE id = 1",
    "UPDATE identity SET id = -id WHERE id = 2",
    "DELETE FROM identity WHERE id = 3",
    "ALTER TABLE identity REPLICA IDENTITY FULL",
    "UPDATE identity SET v = 11 WHERE id = 1",
    "UPDATE identity SET id = 2 WHERE id = -2",
    "INSERT INTO identity VALUES (4, 'c4', NULL)",
    "DELETE FROM identity WHERE id = 4",
    "ALTER TABLE identity REPLICA IDENTITY USING INDEX identity_code",
    "UPDATE identity SET v = 12 WHERE id = 1",
    "UPDATE identity SET code = 'c1x' WHERE id = 1",
    "DELETE FROM identity WHERE id = 2",
    "ALTER TABLE identity REPLICA IDENTITY DEFAULT",
    "UPDATE identity SET v = 13, id = 5 WHERE id = 1",
    "CREATE TABLE keyless (a int, b text)",
    "ALTER TABLE keyless REPLICA IDENTITY FULL",
    "INSERT INTO keyless VALUES (1, 'one'), (1, 'one'), (NULL, NULL)",
    "UPDATE keyless SET b = 'uno' WHERE a = 1",
    "DELETE FROM keyless WHERE a IS NULL",
    "ALTER TABLE keyless ADD COLUMN c text",
    "UPDATE keyless SET c = 'new'",
    "DELETE FROM keyless",
    "CREATE TABLE append_only (a int, b text)",  # no identity: inserts only in a FOR ALL pub
    "INSERT INTO append_only VALUES (1, 'x'), (2, NULL)",
    # the publication of @ins publishes inserts and truncates only
    "CREATE TABLE @ins.nothing (id int PRIMARY KEY, v text)",
    "ALTER TABLE @ins.nothing REPLICA IDENTITY NOTHING",
    "INSERT INTO @ins.nothing VALUES (1, 'a'), (2, 'b')",
    "UPDATE @ins.nothing SET v = 'z'",
    "DELETE FROM @ins.nothing WHERE id = 1",
    "CREATE TABLE @ins.bare (v text)",
    "INSERT INTO @ins.bare VALUES ('kept'), (NULL)",
    "UPDATE @ins.bare SET v = 'changed'",
]

# Large values (after toast.sql): out of line uncompressed and compressed, updates that leave
# them unchanged ('u'), a toasted key, both replica identities
TOAST = [
    "CREATE TABLE toasty (id serial PRIMARY KEY, doc text, weight float8 DEFAULT 0.5,"
    " blob bytea, notes text, small int)",
    "ALTER TABLE toasty ALTER COLUMN doc SET STORAGE EXTERNAL",
    "ALTER TABLE toasty ALTER COLUMN blob SET STORAGE EXTERNAL",
    "INSERT INTO toasty (doc, blob, small) SELECT string_agg(md5(g::text), ''),"
    " decode(string_agg(md5((g * 7)::text), ''), 'hex'), 1 FROM generate_series(1, 400) AS g",
    "INSERT INTO toasty (doc, notes, small) VALUES (repeat('out of line ', 1500),"
    " repeat('compressed in line ', 3000), 2)",
    "INSERT INTO toasty (notes, small) SELECT string_agg(md5(g::text), ''), 3"
    " FROM generate_series(1, 500) AS g",
    "UPDATE toasty SET small = small + 10",
    "UPDATE toasty SET weight = 'NaN' WHERE id = 1",
    "UPDATE toasty SET doc = doc || '!' WHERE id = 1",
    "INSERT INTO toasty (id, doc) VALUES (2, 'upsert') ON CONFLICT (id)"
    " DO UPDATE SET doc = EXCLUDED.doc || toasty.doc",
    "DELETE FROM toasty WHERE id = 1",
    "ALTER TABLE toasty REPLICA IDENTITY FULL",
    "UPDATE toasty SET small = 99",
    "DELETE FROM toasty",
    "CREATE TABLE toasted_key (id serial, k text PRIMARY KEY, c1 text, c2 text)",
    "ALTER TABLE toasted_key ALTER COLUMN k SET STORAGE EXTERNAL",
    "ALTER TABLE toasted_key ALTER COLUMN c1 SET STORAGE EXTERNAL",
    "INSERT INTO toasted_key (k, c1) VALUES (repeat('0123456789', 250), repeat('9876543210', 300))",
    "UPDATE toasted_key SET c2 = 'small'",
    "UPDATE toasted_key SET k = k || 'x'",
    "DELETE FROM toasted_key",
]

# TRUNCATE of one and several tables (after truncate.sql), a table the filter rejects among them
TRUNCATE = [
    "CREATE TABLE trunc_a (id serial UNIQUE, data int)",
    "CREATE TABLE trunc_b (a int PRIMARY KEY, b int)",
    "CREATE TABLE trunc_c (id int PRIMARY KEY, b_ref int REFERENCES trunc_b (a))",
    "INSERT INTO trunc_a (data) VALUES (1), (2)",
    "INSERT INTO trunc_b VALUES (1, 1), (2, 2)",
    "INSERT INTO trunc_c VALUES (1, 1)",
    "TRUNCATE trunc_a",
    "TRUNCATE trunc_a, trunc_a RESTART IDENTITY CASCADE",
    "INSERT INTO trunc_a (data) VALUES (3)",
    "TRUNCATE trunc_b CASCADE",
    "BEGIN; INSERT INTO trunc_b VALUES (3, 3); INSERT INTO skipped VALUES (100, 'in truncate');"
    " TRUNCATE trunc_a, trunc_b, skipped, @ins.bare CASCADE; INSERT INTO trunc_b VALUES (4, 4);"
    " COMMIT",
]

# A table the table filter rejects, its changes among a kept table's: they still count in seq
SKIPPED = [
    "CREATE TABLE skipped (id int PRIMARY KEY, v text)",
    "CREATE TABLE beside (id int PRIMARY KEY, v text)",
    "BEGIN; INSERT INTO beside VALUES (1, 'k1'); INSERT INTO skipped VALUES (1, 'x');"
    " INSERT INTO beside VALUES (2, 'k2'); UPDATE skipped SET v = 'y'; DELETE FROM skipped;"
    " INSERT INTO beside VALUES (3, 'k3'); COMMIT",
    "INSERT INTO skipped VALUES (2, 'alone')",
]

# Logical messages, transactional or not, kept or not (after messages.sql)
MESSAGES = [
    f"SELECT pg_logical_emit_message(true, '{PREFIX}', 'transactional, alone')",
    f"SELECT pg_logical_emit_message(false, '{PREFIX}', 'not transactional')",
    f"SELECT pg_logical_emit_message(false, '{PREFIX}', '\\xff00fe'::bytea)",
    f"SELECT pg_logical_emit_message(true, '{PREFIX}', '')",
    f"BEGIN; SELECT pg_logical_emit_message(true, '{PREFIX}', 'rolled back');"
    f" SELECT pg_logical_emit_message(false, '{PREFIX}', 'survives the rollback'); ROLLBACK",
    f"BEGIN; INSERT INTO beside VALUES (10, 'with messages');"
    f" SELECT pg_logical_emit_message(true, '{PREFIX}', 'in a transaction');"
    f" SELECT pg_logical_emit_message(false, '{PREFIX}', 'emitted at once');"
    " SELECT pg_logical_emit_message(true, 'cc-other', 'counted, not delivered');"
    " INSERT INTO beside VALUES (11, 'after messages'); COMMIT",
    "SELECT pg_logical_emit_message(true, 'cc-other', 'never delivered')",
]

# A big transaction (many fetches, spills and blocks), then one of updates alone
BULK = [
    "CREATE TABLE bulk (id int PRIMARY KEY, n int8, f float8, t text, ok bool, at timestamptz,"
    " j jsonb, by bytea, stamp timestamp)",
    "BEGIN; INSERT INTO bulk SELECT g, g * 1000003, g / 7.0, 'row ' || g || E'\\t\"q\"',"
    " g % 2 = 0, '2024-01-01'::timestamptz + g * interval '1 minute 1.5 seconds',"
    " jsonb_build_object('g', g, 's', repeat('é', g % 5)), decode(md5(g::text), 'hex'),"
    " '2024-01-01'::timestamp - g * interval '1 day 0.25 seconds'"
    " FROM generate_series(1, 300) AS g;"
    " UPDATE bulk SET f = f * -1, t = t || '!' WHERE id % 3 = 0;"
    " DELETE FROM bulk WHERE id % 5 = 0; COMMIT",
    "UPDATE bulk SET n = -n, f = f / 3",
    # stored generated columns: sent by Postgres 18 when the publication asks, left out of rows
    "CREATE TABLE derived (id int PRIMARY KEY, price numeric,"
    " twice numeric GENERATED ALWAYS AS (price * 2) STORED)",
    "INSERT INTO derived (id, price) VALUES (1, 2.5), (2, NULL)",
    "UPDATE derived SET price = price + 1",
    "DELETE FROM derived WHERE id = 2",
]

ALL_TABLES = {
    "typed", "evolving", "after_rename", "before_rename", "renamed_twice", "unique_then_pkey",
    "fleeting", "odd_key", "nested", "identity", "keyless", "append_only", "nothing", "bare",
    "toasty", "toasted_key", "trunc_a", "trunc_b", "trunc_c", "beside", "bulk", "derived",
    "copied", "peeked", 'Odd "Name" é', "composite",
}
"""Every table whose changes reach the rows (``skipped`` never does)."""


@dataclass
class Workload:
    """The peeked rows of one server's workload, and what reading them needs."""

    version: int
    dsn: str
    schema: str
    slot: str
    rows: list[PeekRow]
    other_sessions: dict[str, list[PeekRow]]
    """Rows peeked by sessions with other settings than :data:`SESSION_SETTINGS`."""
    conn: psycopg.Connection[Any]
    """The peeking session (catalog look-ups of the decoder and of ``ddl`` rows)."""
    big_doc: str

    def options(self, **extra: str) -> CdcOptions:
        return CdcOptions.from_options({
            "dsn": self.dsn, "slot": self.slot, "plugin": "pgoutput",
            "exclude_tables": re.escape(self.schema) + r"\.skipped",
            "message_prefixes": PREFIX, "fetch_rows": "100000", **extra})


def _peek(conn: psycopg.Connection[Any], options: CdcOptions, pubs: list[str]) -> list[PeekRow]:
    """Every row of the slot, peeked as the reader peeks (a server-side cursor, binary)."""
    upto = positions.flush_lsn(conn)
    rows = [row for fetch in peeking.fetches(conn, options, upto, pubs) for row in fetch]
    conn.commit()
    return rows


def _run(admin: psycopg.Connection[Any], statements: Iterable[str], ins: str) -> None:
    for statement in statements:
        admin.execute(statement.replace("@ins.", ins + "."))


def _run_workload(pg: LocalPostgres, admin: psycopg.Connection[Any], schema: str, ins: str,
                  options: CdcOptions, pubs: list[str], origin: str) -> str:
    """The whole workload; returns the big text value the TOAST checks look for."""
    search_path = f"-c search_path={schema}"
    _run(admin, [*DDL, *IDENTITY], ins)
    _run(admin, _typed_sql(), ins)
    _run(admin, TOAST, ins)
    big_doc = secrets.token_hex(6000)  # 12 kB, too random for pglz: out of line either way
    admin.execute("INSERT INTO toasty (doc, small) VALUES (%s, 4)", (big_doc,))
    admin.execute("UPDATE toasty SET small = 5 WHERE small = 4")
    _run(admin, [*SKIPPED, *TRUNCATE, *MESSAGES], ins)
    if pg.version >= 17:  # the flushing variant
        admin.execute(f"SELECT pg_logical_emit_message(false, '{PREFIX}', 'flushed', true)")
    _run(admin, BULK, ins)
    # a multi-insert (COPY) with values in and out of line (after toast.sql's toasted_copy)
    admin.execute("CREATE TABLE copied (id int PRIMARY KEY, data text)")
    admin.execute("ALTER TABLE copied ALTER COLUMN data SET STORAGE EXTERNAL")
    with admin.cursor().copy("COPY copied (id, data) FROM STDIN") as copy:
        for n in range(1, 81):
            copy.write_row((n, f"toasted-{n}-" + "0123456789" * 300 if n % 20 == 2
                            else f"small\t{n}\\"))
    # two transactions interleaved, committed in the other order
    with pg.connect(options=search_path) as a, pg.connect(options=search_path) as b:
        a.execute("BEGIN")
        b.execute("BEGIN")
        a.execute("INSERT INTO nested (path) VALUES ('a-first')")
        b.execute("INSERT INTO nested (path) VALUES ('b-first')")
        a.execute("INSERT INTO nested (path) VALUES ('a-second')")
        b.execute("INSERT INTO beside VALUES (20, 'b-second')")
        b.execute("COMMIT")
        a.execute("COMMIT")
    # a transaction replayed from a replication origin (after replorigin.sql): pgoutput sends
    # an Origin message inside it
    with pg.connect(options=search_path) as replay:
        replay.execute("SELECT pg_replication_origin_create(%s)", (origin,))
        replay.execute("SELECT pg_replication_origin_session_setup(%s)", (origin,))
        replay.execute("BEGIN")
        replay.execute("SELECT pg_replication_origin_xact_setup('0/AABBCCDD',"
                       " '2013-01-01 00:00+00')")
        replay.execute("INSERT INTO nested (path) VALUES ('replayed')")
        replay.execute("COMMIT")
        replay.execute("SELECT pg_replication_origin_session_reset()")
    # the slot's own output written into a captured table (after decoding_into_rel.sql)
    admin.execute("CREATE TABLE peeked (id serial PRIMARY KEY, lsn pg_lsn, xid xid, data bytea)")
    admin.execute(
        "INSERT INTO peeked (lsn, xid, data) SELECT lsn, xid, data FROM"
        " pg_logical_slot_peek_binary_changes(%s, NULL, 40, VARIADIC %s::text[])",
        (options.slot, plugin_options(options, pubs)))
    admin.execute("UPDATE peeked SET data = substring(data from 1 for 3) WHERE id % 4 = 0")
    admin.execute(
        "INSERT INTO beside VALUES (30, 'last')")  # a last transaction after everything else
    return big_doc


OTHER_SESSIONS = {
    # every value's text in other styles: the converters' output changes, never one path alone
    "styles": {**SESSION_SETTINGS, "TimeZone": "Asia/Kathmandu", "DateStyle": "SQL,DMY",
               "IntervalStyle": "postgres_verbose", "extra_float_digits": "0"},
    "other_zone": {**SESSION_SETTINGS, "TimeZone": "America/St_Johns", "DateStyle": "ISO,MDY",
                   "extra_float_digits": "3"},
    # bytea as escapes: its converter refuses the text, and both paths must say so alike
    "bytea_escape": {**SESSION_SETTINGS, "bytea_output": "escape"},
}


@pytest.fixture(scope="module")
def workload(pg: LocalPostgres) -> Iterator[Workload]:
    schema = "cc_" + uuid.uuid4().hex[:10]
    ins = schema + "_ins"
    slot, origin = schema + "_slot", schema + "_origin"
    pubs = [schema + "_all", schema + "_inserts"]
    generated = " WITH (publish_generated_columns = stored)" if pg.version >= 18 else ""
    names = {"s": sql.Identifier(schema), "ins": sql.Identifier(ins),
             "all": sql.Identifier(pubs[0]), "inserts": sql.Identifier(pubs[1])}
    with pg.connect(options=f"-c search_path={schema}") as admin:
        for statement in (
            "CREATE SCHEMA {s}", "CREATE SCHEMA {ins}",
            "CREATE PUBLICATION {all} FOR TABLES IN SCHEMA {s}" + generated,
            "CREATE PUBLICATION {inserts} FOR TABLES IN SCHEMA {ins}"
            " WITH (publish = 'insert, truncate')",
        ):
            admin.execute(sql.SQL(statement).format(**names))
        admin.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        options = CdcOptions.from_options({"dsn": pg.dsn, "slot": slot})
        conn = connect(options, autocommit=False)  # the reader's session, SESSION_SETTINGS
        try:
            big_doc = _run_workload(pg, admin, schema, ins, options, pubs, origin)
            rows = _peek(conn, options, pubs)
            others: dict[str, list[PeekRow]] = {}
            for name, settings in OTHER_SESSIONS.items():
                session = " ".join(f"-c {k}={v}" for k, v in settings.items())
                with psycopg.connect(pg.dsn, options=session) as other:
                    others[name] = _peek(other, options, pubs)
            yield Workload(pg.version, pg.dsn, schema, slot, rows, others, conn, big_doc)
        finally:
            conn.close()
            admin.execute("ROLLBACK")  # a statement of the workload failed inside its BEGIN
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            admin.execute(sql.SQL("DROP PUBLICATION {all}, {inserts}").format(**names))
            admin.execute("SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin"
                          " WHERE roname = %s", (origin,))
            admin.execute(sql.SQL("DROP SCHEMA {s}, {ins} CASCADE").format(**names))


@pytest.fixture(scope="module")
def core() -> ModuleType:
    """The compiled core, imported directly (``IGGY_SPARK_CORE=python`` does not turn it off
    here): the test needs it."""
    module = importlib.import_module("iggy_spark_core")
    assert module is not None
    return module


# --- reading the rows both ways ----------------------------------------------------------------

Outcome = tuple[list[int], list[dict[str, Any]]] | str
"""The batches' sizes and rows, or the text of the error the read raised."""

VARIANTS: dict[str, dict[str, str]] = {
    "plain": {},
    # routed by the built-in routes (the block's columns), ddl rows where columns change
    "routed": {"stream_from": "schema", "topic_from": "table", "partition_key_from": "key",
               "include_schema_changes": "true"},
}


def _decoder(work: Workload, options: CdcOptions, rows: RowFormat = JSON_ROWS
             ) -> PgOutputDecoder:
    """A fresh decoder as the reader makes it for a batch (no backfill)."""
    conn = work.conn
    columns = None
    if options.include_schema_changes:
        columns = ColumnTracker((), lambda old, new, keys: column_lists(conn, old, new, keys))
    decoder = make_decoder(options, conn, None, rows.retyping, columns)
    assert isinstance(decoder, PgOutputDecoder)
    return decoder


def _fetches(rows: list[PeekRow], size: int | None) -> list[list[PeekRow]]:
    if size is None:
        return [list(rows)]
    return [rows[start:start + size] for start in range(0, len(rows), size)]


def _read(events: Callable[[], Iterable[Any]], options: CdcOptions, batch_rows: int,
          spill_rows: int, rows: RowFormat = JSON_ROWS) -> Outcome:
    schema = rows.schemas()[1]
    try:
        batches = list(record_batches(transactions(events(), spill_rows), Router(options, rows),
                                      batch_rows, schema))
    except (DecodeError, SchemaChangedError) as exc:
        return f"{type(exc).__name__}: {exc}"
    assert all(0 < b.num_rows <= batch_rows for b in batches)
    return ([b.num_rows for b in batches], pa.Table.from_batches(batches, schema=schema)
            .to_pylist())


def _python(work: Workload, peeked: list[PeekRow], options: CdcOptions, batch_rows: int,
            spill_rows: int, rows: RowFormat = JSON_ROWS) -> Outcome:
    return _read(lambda: _decoder(work, options, rows).events(peeked), options, batch_rows,
                 spill_rows, rows)


def _compiled(work: Workload, core: ModuleType, fetches: Sequence[list[PeekRow]],
              options: CdcOptions, batch_rows: int, spill_rows: int,
              blocks: list[int] | None = None, rows: RowFormat = JSON_ROWS) -> Outcome:
    structs = rows if isinstance(rows, StructRows) else None

    def events() -> Iterator[Any]:
        for event in CompiledPgOutput(_decoder(work, options, rows), core, structs
                                      ).events(fetches):
            if blocks is not None and type(event) is ChangeBlock:
                blocks.append(len(event))
            yield event
    return _read(events, options, batch_rows, spill_rows, rows)


def _assert_same(python: Outcome, compiled: Outcome) -> None:
    """Equal outcomes, the first differing row shown alone."""
    if isinstance(python, str) or isinstance(compiled, str):
        assert compiled == python
        return
    (python_sizes, python_rows), (compiled_sizes, compiled_rows) = python, compiled
    for index, (want, got) in enumerate(zip(python_rows, compiled_rows, strict=False)):
        # as text where they differ: a NaN (a struct's float) is equal to itself there
        assert got == want or repr(got) == repr(want), (
            f"row {index} differs (compiled, then Python)")
    assert len(compiled_rows) == len(python_rows)
    assert compiled_sizes == python_sizes


SIZES = [pytest.param(5, 3, id="batch5-spill3"), pytest.param(100_000, 100_000, id="large")]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("fetch", [1, 7, None], ids=["fetch1", "fetch7", "fetch_all"])
@pytest.mark.parametrize(("batch_rows", "spill_rows"), SIZES)
def test_the_core_reads_the_workload_as_python_does(
    workload: Workload, core: ModuleType, variant: str, fetch: int | None, batch_rows: int,
    spill_rows: int,
) -> None:
    options = workload.options(**VARIANTS[variant])
    python = _python(workload, workload.rows, options, batch_rows, spill_rows)
    assert not isinstance(python, str), python
    blocks: list[int] = []
    compiled = _compiled(workload, core, _fetches(workload.rows, fetch), options, batch_rows,
                         spill_rows, blocks)
    _assert_same(python, compiled)
    assert sum(blocks) >= 500, blocks  # the core took the bulk of the row changes


@pytest.mark.parametrize("session", list(OTHER_SESSIONS))
@pytest.mark.parametrize("fetch", [1, None], ids=["fetch1", "fetch_all"])
def test_the_core_reads_other_session_settings_as_python_does(
    workload: Workload, core: ModuleType, session: str, fetch: int | None,
) -> None:
    """Peeked without the reader's settings, the text of values changes (or a converter refuses
    it): the two paths still agree, on the rows or on the error."""
    rows = workload.other_sessions[session]
    options = workload.options()
    python = _python(workload, rows, options, 5, 3)
    _assert_same(python, _compiled(workload, core, _fetches(rows, fetch), options, 5, 3))
    if session == "bytea_escape":
        assert isinstance(python, str) and "cannot convert" in python and "'by'" in python


STRUCT_TABLES = {"typed": (0, 0), "bulk": (500, 500), "toasty": (1, 1), "evolving": (0, 0),
                 "composite": (1, 1), "keyless": (0, 1)}
"""Tables read alone with ``row_format=struct`` (the structs of one table), and how many of
their changes the core takes at least, with ``schema_evolution`` ``fail`` and ``add_columns``.
``evolving`` and ``keyless`` changed their columns: the structs of now refuse their earlier
changes, or type them by name; ``typed``'s edge values include infinite and BC timestamps,
which a struct field cannot hold: both paths fail at the same value."""


@pytest.mark.parametrize("evolution", ["fail", "add_columns"])
@pytest.mark.parametrize("table", list(STRUCT_TABLES))
def test_the_core_reads_a_table_as_structs_as_python_does(
    workload: Workload, core: ModuleType, table: str, evolution: str,
) -> None:
    options = CdcOptions.from_options({
        "dsn": workload.dsn, "slot": workload.slot, "plugin": "pgoutput",
        "row_format": "struct", "schema_evolution": evolution,
        "include_tables": re.escape(f"{workload.schema}.{table}")})
    structs = struct_rows(workload.conn, options.keeps, evolution)
    workload.conn.rollback()
    for fetch, (batch_rows, spill_rows) in ((1, (5, 3)), (None, (100_000, 100_000))):
        python = _python(workload, workload.rows, options, batch_rows, spill_rows, structs)
        blocks: list[int] = []
        _assert_same(python, _compiled(workload, core, _fetches(workload.rows, fetch), options,
                                       batch_rows, spill_rows, blocks, structs))
        assert sum(blocks) >= STRUCT_TABLES[table][evolution == "add_columns"], blocks
        assert table in ("typed", "evolving", "keyless") or not isinstance(python, str), python


# --- the workload reaches what it is written for -----------------------------------------------

def _of(rows: list[dict[str, Any]], table: str, op: str | None = None) -> list[dict[str, Any]]:
    return [r for r in rows if r["table"] == table and (op is None or r["op"] == op)]


def test_the_workload_reaches_every_case(workload: Workload) -> None:
    """The compared rows are not trivial: every table, op, type and case of the workload is in
    them (read by the Python path; the tests above hold the core's equal)."""
    python = _python(workload, workload.rows, workload.options(), 100_000, 100_000)
    assert not isinstance(python, str), python
    rows = python[1]
    assert {r["table"] for r in rows} == ALL_TABLES | {None}  # None: the logical messages
    assert {r["schema"] for r in rows} == {workload.schema, workload.schema + "_ins", None}
    assert {r["op"] for r in rows} == {"insert", "update", "delete", "truncate", "message"}

    # every type's column arrives, with the values its converter makes
    typed = _of(rows, "typed")
    assert [r["op"] for r in typed] == (["insert"] * (TYPED_ROWS + 1) + ["update"] *
                                        (TYPED_ROWS + 1) + ["delete"] * ((TYPED_ROWS + 1) // 2))
    # json.loads: orjson refuses the 1001-digit number jsonb prints for 1e1000
    inserted = [json.loads(r["after"]) for r in typed[:TYPED_ROWS + 1]]
    assert all(list(after) == TYPED_NAMES for after in inserted)
    assert inserted[-1] == {"id": TYPED_ROWS + 1} | dict.fromkeys(TYPED_NAMES[1:])
    f8 = [after["f8"] for after in inserted[:TYPED_ROWS]]
    assert f8[:9] == ["NaN", "-Infinity", -0.0, 1e-05, 1e100, 0.30000000000000004, 5e-324,
                      1.7976931348623157e308, "Infinity"]
    first, second = inserted[0], inserted[1]
    assert first["t"] == 'it\'s "quoted" \\ back\\slash'
    assert second["t"] == "line1\nline2\ttab\rcr\x01\x1f\x7f\b\f"
    assert (first["i8"], second["i8"], second["o"]) == (-2**63, 2**63 - 1, 2**32 - 1)
    assert (first["b"], second["b"], first["by"]) == (True, False, "AP8=")
    assert first["ta"] == ["a b", None, "NULL", '"', "\\", "", "{}", ",", "é", "tab\there",
                           "nl\nhere", 'x"y']
    assert first["ja"] == [{"a": 1}, None, None, "s,t"]
    assert (first["ts"], first["d"], inserted[2]["ts"]) == ("infinity", "infinity",
                                                            "0044-03-15 12:00:00 BC")
    assert (first["tz"], first["e"], second["e"]) == ("2024-06-01T06:30:00+00:00", "calm",
                                                      'it\'s "fine"')
    assert (first["ia"], first["md"], inserted[2]["ia"]) == ([1, None, -3], [[1, 2], [None, 4]],
                                                             [7, 8])

    # TOAST: a value out of line, unchanged by an update, is named, never a silent null
    toasty = _of(rows, "toasty")
    assert any(loads(r["after"])["doc"] == workload.big_doc for r in toasty if r["op"] == "insert")
    unchanged = [r for r in toasty if r["op"] == "update" and r["unchanged"]]
    assert {tuple(r["unchanged"]) for r in unchanged} >= {("doc", "blob"), ("doc",), ("blob",)}
    assert all(set(r["unchanged"]).isdisjoint(loads(r["after"])) for r in unchanged)
    assert any(r["before"] is not None and len(loads(r["before"])["doc"] or "") > 8000
               for r in unchanged)  # FULL: the old row whole, its TOAST values included
    assert [r["op"] for r in _of(rows, "toasted_key")] == ["insert", "update", "update",
                                                           "delete"]

    # replica identities: the key's shape follows each one
    keys = [loads(r["key"]) for r in _of(rows, "identity")]
    assert keys[:4] == [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 1}]
    assert {"id": 1, "code": "c1", "v": 10} in keys and {"code": "c1"} in keys
    assert all(r["key"] is None for r in _of(rows, "append_only") + _of(rows, "bare"))
    assert [r["op"] for r in _of(rows, "nothing")] == ["insert", "insert"]
    assert all(r["before"] is not None for r in _of(rows, "keyless", "delete"))

    odd = _of(rows, 'Odd "Name" é')
    assert list(loads(odd[0]["after"])) == ["Col 1", 'x"y]:', "é", "tab\there", "select"]
    assert [loads(r["key"]) for r in _of(rows, "composite")][-2:] == [
        {"region": "eu", "id": 2}, {"region": "us", "id": 1}]

    # DDL: the rows carry the columns the table had when each was written
    evolving = [list(loads(r["after"]) or ()) for r in _of(rows, "evolving")]
    assert ["id", "weight", "label", "extra"] in evolving and ["id", "weight", "tag"] in evolving
    assert ["id", "weight", "tag", "note1"] in evolving
    assert ["id", "weight", "tag", "note1", "note2"] in evolving
    assert [r["op"] for r in _of(rows, "fleeting")].count("insert") == 120
    assert [r["table"] for r in rows if r["table"] in ("after_rename", "renamed_twice")] == [
        "after_rename", "after_rename", "renamed_twice"]

    # the filter's table counts in seq; TRUNCATE of several tables, the skipped one counted too
    beside = _of(rows, "beside")
    assert {loads(r["after"])["v"]: r["seq"] for r in beside} == {
        "k1": 0, "k2": 2, "k3": 5, "with messages": 0, "after messages": 3, "b-second": 1,
        "last": 0}
    truncates = [(r["table"], r["seq"]) for r in rows if r["op"] == "truncate"]
    assert truncates == [("trunc_a", 0), ("trunc_a", 0), ("trunc_b", 0), ("trunc_c", 1),
                         ("trunc_a", 2), ("trunc_b", 3), ("bare", 5), ("trunc_c", 6)]  # 4: skipped

    # messages: only the prefix asked for; those outside a transaction have no seq
    messages = [loads(r["after"]) for r in rows if r["op"] == "message"]
    assert {m["prefix"] for m in messages} == {PREFIX}
    contents = [m["content"] for m in messages]
    assert {"survives the rollback", "emitted at once", "in a transaction", None} <= set(contents)
    assert "rolled back" not in contents
    lone = [r for r in rows if r["op"] == "message" and r["seq"] is None]
    assert len(lone) == 4 + (workload.version >= 17)

    # big and interleaved transactions, the origin's, the slot's output as bytea
    assert len(_of(rows, "bulk")) == 300 + 100 + 60 + 240
    assert [loads(r["after"])["path"] for r in _of(rows, "nested")][-4:] == [
        "b-first", "a-first", "a-second", "replayed"]
    assert len(_of(rows, "copied")) == 80 and len(_of(rows, "peeked", "insert")) >= 40
    assert all(list(loads(r["after"] or r["key"])) == (["id", "price"] if r["after"] else ["id"])
               for r in _of(rows, "derived"))

    # with include_schema_changes, ddl rows mark the column changes
    routed = _python(workload, workload.rows, workload.options(**VARIANTS["routed"]), 1000, 1000)
    assert not isinstance(routed, str), routed
    ddl = [r for r in routed[1] if r["op"] == "ddl"]
    assert {r["table"] for r in ddl} >= {"evolving", "keyless"}
    assert all(r["topic"] == r["table"] and r["stream"] == r["schema"] for r in routed[1]
               if r["table"] is not None)
