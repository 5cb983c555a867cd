"""The baselines: what a competent user writes by hand instead of using this project.

Nothing here imports the project. Each loop does the same work as the project path it is
compared with, written the way an experienced Python data engineer would write it for speed:

* one connection with a server-side cursor (``fetch_rows`` rows per round trip), the binary peek
  function for pgoutput, LSNs selected as ``int8`` so Python never parses ``0/16B3748`` text;
* ``struct`` unpacking of pgoutput messages, converters looked up once per relation, every row
  built straight into a ``dict`` and serialised with ``orjson`` (bytes, never decoded to str);
* test_decoding lines split with one regular expression per column, the key columns asked from
  the catalog once per table;
* every change's replica-identity key as JSON, inserts included (``pg_cdc``'s contract);
* changes held per transaction until its COMMIT (every output row carries the commit's LSN and
  time, as ``pg_cdc``'s rows do), with no spilling (the benchmark's transactions are small);
* the apache-iggy SDK driven directly: ``SendMessage`` objects, made from the payload as
  ``str`` (the SDK tries ``str`` first, so a ``bytes`` payload costs it a failed conversion: a
  message from ``bytes`` took about 1 µs, from ``str`` 0.2 µs, decoding included 0.35 µs),
  ``send_messages`` in batches of 1,000 per destination, awaited one after the other on one
  connection.

The loops are checked against the project on a sample (``bench_source`` compares their JSON with
``pg_cdc``'s decoders; ``bench_e2e`` compares the Iggy payloads byte for byte), so a ratio never
compares different work.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
from apache_iggy import IggyClient, Partitioning, SendMessage
from xxhash import xxh3_128_intdigest

__all__ = [
    "SESSION",
    "Row",
    "Txn",
    "connect",
    "count_rows",
    "encode_rows",
    "lsn_text",
    "peek_rows",
    "pgoutput_transactions",
    "pipeline_payload",
    "raw_peek",
    "sdk_client",
    "send_rows",
    "test_decoding_transactions",
]

# The session settings that fix the text of values (time zone, float digits, bytea format).
SESSION = ("-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=iso_8601 -c extra_float_digits=1"
           " -c bytea_output=hex -c client_encoding=UTF8")
FETCH_ROWS = 10_000
BATCH = 1_000

_PEEK = {
    "pgoutput": "SELECT (lsn - '0/0')::int8, data FROM pg_logical_slot_peek_binary_changes("
                "%s, NULL, NULL, 'proto_version', '1', 'publication_names', %s)",
    "test_decoding": "SELECT (lsn - '0/0')::int8, data FROM pg_logical_slot_peek_changes("
                     "%s, NULL, NULL, 'include-xids', '1', 'include-timestamp', '1')",
}

Row = tuple[int, int, int, datetime, int, str, str, str, bytes | None, bytes | None,
            bytes | None]
"""``(lsn, commit_lsn, xid, commit_ts, seq, schema, table, op, key, before, after)``."""
Change = tuple[int, int, str, str, str, bytes | None, bytes | None, bytes | None]
"""A change waiting for its COMMIT: ``(lsn, seq, schema, table, op, key, before, after)``."""
Txn = tuple[int, int, datetime, list[Change]]
"""A committed transaction: ``(xid, commit_lsn, commit_ts, changes)``."""


def connect(dsn: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, options=SESSION, autocommit=autocommit)


def peek_rows(
    conn: psycopg.Connection[Any], plugin: str, slot: str, publication: str
) -> Iterator[tuple[int, Any]]:
    """Every ``(lsn, data)`` row the slot holds, through a server-side cursor."""
    params: tuple[str, ...] = (slot, publication) if plugin == "pgoutput" else (slot,)
    with conn.cursor(name="peek", binary=True) as cur:
        cur.itersize = FETCH_ROWS
        cur.execute(_PEEK[plugin], params)
        yield from cur


def raw_peek(dsn: str, plugin: str, slot: str, publication: str) -> tuple[int, int]:
    """Fetch the whole peek and touch nothing: ``(rows, payload bytes)``; the floor of any
    reader, since the server's decoding and the transfer are in it and nothing else."""
    with connect(dsn) as conn:
        rows = size = 0
        for _lsn, data in peek_rows(conn, plugin, slot, publication):
            rows += 1
            size += len(data)
        conn.rollback()
    return rows, size


# -- pgoutput -----------------------------------------------------------------------------------

_U32 = struct.Struct(">I").unpack_from
_U16 = struct.Struct(">H").unpack_from
_BEGIN = struct.Struct(">QqI").unpack_from
_COMMIT = struct.Struct(">BQQq").unpack_from
_TYPE = struct.Struct(">Ii").unpack_from
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _timestamptz(text: str) -> str:
    """``2024-01-02 03:04:05+00`` (TimeZone=UTC) -> ``2024-01-02T03:04:05+00:00``."""
    return text[:-3].replace(" ", "T", 1) + "+00:00"


_BY_OID: dict[int, Callable[[str], Any]] = {
    16: {"t": True, "f": False}.__getitem__, 20: int, 21: int, 23: int, 700: float, 701: float,
    1184: _timestamptz, 114: orjson.Fragment, 3802: orjson.Fragment,
}
_OPS = {73: "insert", 85: "update", 68: "delete"}


class _Relation:
    __slots__ = ("columns", "key", "schema", "table")

    def __init__(self, data: bytes) -> None:
        end = data.index(0, 5)
        self.schema = data[5:end].decode() or "pg_catalog"
        pos = end + 1
        end = data.index(0, pos)
        self.table = data[pos:end].decode()
        pos = end + 2  # the replica identity byte
        (count,) = _U16(data, pos)
        pos += 2
        columns: list[tuple[str, Callable[[str], Any]]] = []
        key: list[str] = []
        for _ in range(count):
            flags = data[pos]
            end = data.index(0, pos + 1)
            name = data[pos + 1:end].decode()
            oid, _ = _TYPE(data, end + 1)
            pos = end + 9
            columns.append((name, _BY_OID.get(oid, str)))
            if flags & 1:
                key.append(name)
        self.columns = columns
        self.key = key


def _tuple(data: bytes, pos: int, columns: Sequence[tuple[str, Callable[[str], Any]]]
           ) -> tuple[dict[str, Any], int]:
    """TupleData at ``pos`` (after its kind byte) as ``{column: value}``; unchanged TOAST
    columns left out. Returns the position after it."""
    row: dict[str, Any] = {}
    pos += 2
    for name, convert in columns:
        kind = data[pos]
        if kind == 116:  # 't'
            end = pos + 5 + _U32(data, pos + 1)[0]
            row[name] = convert(data[pos + 5:end].decode())
            pos = end
        else:
            if kind == 110:  # 'n'
                row[name] = None
            pos += 1
    return row, pos


def pgoutput_transactions(rows: Iterable[tuple[int, bytes]]) -> Iterator[Txn]:
    """Committed transactions, their changes' key/before/after already JSON."""
    dumps = orjson.dumps
    relations: dict[int, _Relation] = {}
    changes: list[Change] = []
    xid = seq = 0
    key: bytes | None
    before: bytes | None
    after: bytes | None
    for lsn, data in rows:
        kind = data[0]
        if kind == 73:  # 'I'
            rel = relations[_U32(data, 1)[0]]
            row, _ = _tuple(data, 6, rel.columns)
            key = dumps({name: row[name] for name in rel.key}) if rel.key else None
            changes.append((lsn, seq, rel.schema, rel.table, "insert", key, None, dumps(row)))
            seq += 1
        elif kind == 85 or kind == 68:  # 'U', 'D'
            rel = relations[_U32(data, 1)[0]]
            marker, pos = data[5], 6
            key = before = after = None
            old: dict[str, Any] | None = None
            if marker == 75 or marker == 79:  # 'K' old key, 'O' old row
                old, pos = _tuple(data, pos, rel.columns)
                if marker == 79:
                    before = dumps(old)
                pos += 1  # the 'N' of the new tuple
            if kind == 85:
                new, _ = _tuple(data, pos, rel.columns)
                after = dumps(new)
                old = old or new
            if old is not None and rel.key:
                key = dumps({name: old[name] for name in rel.key})
            changes.append((lsn, seq, rel.schema, rel.table, _OPS[kind], key, before, after))
            seq += 1
        elif kind == 66:  # 'B'
            xid = _BEGIN(data, 1)[2]
            seq = 0
            changes = []
        elif kind == 67:  # 'C'
            _, _, end_lsn, micros = _COMMIT(data, 1)
            yield xid, end_lsn, _PG_EPOCH + timedelta(microseconds=micros), changes
            changes = []
        elif kind == 82:  # 'R'
            relations[_U32(data, 1)[0]] = _Relation(data)
        elif kind == 84:  # 'T': one change per truncated relation
            count = _U32(data, 1)[0]
            for i in range(count):
                rel = relations[_U32(data, 6 + 4 * i)[0]]
                changes.append((lsn, seq + i, rel.schema, rel.table, "truncate", None, None,
                                None))
            seq += count


# -- test_decoding ------------------------------------------------------------------------------

_COLUMN = re.compile(r" ([^\[ ]+)\[([^\]]+)\]:('(?:[^']|'')*'|[^ ]+)")
_HEAD = re.compile(r"table ([^.]+)\.([^:]+): (INSERT|UPDATE|DELETE):")
_BY_NAME: dict[str, Callable[[str], Any]] = {
    "bigint": int, "integer": int, "smallint": int, "double precision": float, "real": float,
    "boolean": {"true": True, "false": False}.__getitem__,
    "timestamp with time zone": _timestamptz, "json": orjson.Fragment, "jsonb": orjson.Fragment,
}


def _columns(text: str) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name, type_name, value in _COLUMN.findall(text):
        if value == "null":
            row[name] = None
        elif value[0] == "'":
            row[name] = _BY_NAME.get(type_name, str)(value[1:-1].replace("''", "'"))
        elif value != "unchanged-toast-datum":
            row[name] = _BY_NAME.get(type_name, str)(value)
    return row


def test_decoding_transactions(
    rows: Iterable[tuple[int, str]], key_columns: Callable[[str, str], list[str]]
) -> Iterator[Txn]:
    """Committed transactions from test_decoding lines; ``key_columns(schema, table)`` is
    asked once per table (test_decoding does not say which columns are the key)."""
    dumps = orjson.dumps
    keys: dict[tuple[str, str], list[str]] = {}
    changes: list[Change] = []
    xid = seq = 0
    for lsn, line in rows:
        head = _HEAD.match(line)
        if head is not None:
            schema, table, op = head.groups()
            names = keys.get((schema, table))
            if names is None:
                names = keys[schema, table] = key_columns(schema, table)
            body = line[head.end():]
            key = before = after = None
            if op == "INSERT":
                row = _columns(body)
                after = dumps(row)
                if names:
                    key = dumps({name: row.get(name) for name in names})
            else:
                old_text, _, new_text = body.partition(" new-tuple:")
                if op == "UPDATE" and not new_text:
                    old_text, new_text = "", old_text
                if old_text.startswith(" old-key:"):
                    old_text = old_text[len(" old-key:"):]
                old = _columns(old_text) if old_text else None
                if new_text:
                    new = _columns(new_text)
                    after = dumps(new)
                    old = old or new
                if old is not None and names:
                    key = dumps({name: old.get(name) for name in names})
            changes.append((lsn, seq, schema, table, op.lower(), key, before, after))
            seq += 1
        elif line.startswith("BEGIN "):
            xid, seq, changes = int(line[6:]), 0, []
        elif line.startswith("COMMIT "):
            stamp = line[line.index("(at ") + 4:-1]
            yield xid, lsn, datetime.fromisoformat(stamp), changes
            changes = []


def catalog_keys(conn: psycopg.Connection[Any]) -> Callable[[str, str], list[str]]:
    """A primary-key lookup on ``conn`` for :func:`test_decoding_transactions`."""

    def lookup(schema: str, table: str) -> list[str]:
        rows = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY (i.indkey) WHERE i.indisprimary AND i.indrelid ="
            " (quote_ident(%s) || '.' || quote_ident(%s))::regclass", (schema, table),
        ).fetchall()
        return [str(name) for (name,) in rows]

    return lookup


def transactions(conn: psycopg.Connection[Any], plugin: str, slot: str,
                 publication: str) -> Iterator[Txn]:
    """The committed transactions of ``slot``, peeked and decoded on ``conn``."""
    rows = peek_rows(conn, plugin, slot, publication)
    if plugin == "pgoutput":
        return pgoutput_transactions(rows)
    return test_decoding_transactions(rows, catalog_keys(conn))


def count_rows(dsn: str, plugin: str, slot: str, publication: str) -> int:
    """The source baseline: every change decoded and made into an output row, then counted
    (the counterpart of ``pg_cdc`` into a no-op sink)."""
    count = 0
    row: Row | None = None
    with connect(dsn) as conn:
        for xid, commit_lsn, commit_ts, changes in transactions(conn, plugin, slot, publication):
            for lsn, seq, schema, table, op, key, before, after in changes:
                row = (lsn, commit_lsn, xid, commit_ts, seq, schema, table, op, key, before,
                       after)
                count += 1
        conn.rollback()
    assert count == 0 or row is not None
    return count


# -- sending ------------------------------------------------------------------------------------

async def sdk_client(address: str) -> IggyClient:
    client = IggyClient(address)
    await client.connect()
    await client.login_user("iggy", "iggy")
    return client


async def send_rows(client: IggyClient,
                    rows: Iterable[tuple[str, str, bytes, int]]) -> int:
    """Send ``(stream, topic, payload, id)`` rows in batches of :data:`BATCH` per destination,
    each batch awaited before the next; returns how many were sent."""
    balanced = Partitioning.balanced()
    pending: dict[tuple[str, str], list[SendMessage]] = {}
    sent = 0
    for stream, topic, payload, message_id in rows:
        batch = pending.get((stream, topic))
        if batch is None:
            batch = pending[stream, topic] = []
        batch.append(SendMessage(payload.decode(), None, message_id))  # str: see above
        if len(batch) == BATCH:
            await client.send_messages(stream, topic, balanced, batch)
            sent += BATCH
            pending[stream, topic] = []
    for (stream, topic), batch in pending.items():
        if batch:
            await client.send_messages(stream, topic, balanced, batch)
            sent += len(batch)
    return sent


def encode_rows(
    rows: Iterable[Sequence[Any]], fields: Sequence[str]
) -> Iterator[tuple[str, str, bytes, int]]:
    """Prepared ``(stream, topic, id, *values)`` rows as ``(stream, topic, payload, id)``: the
    values as a JSON object of ``fields``, the string id hashed to xxh3-128 (what
    ``iggy_routed`` does with an ``id`` column)."""
    dumps = orjson.dumps
    for stream, topic, row_id, *values in rows:
        payload = dumps(dict(zip(fields, values, strict=True)))
        yield stream, topic, payload, xxh3_128_intdigest(row_id.encode())


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def pipeline_payload(
    txns: Iterable[Txn], stream: str
) -> Iterator[tuple[str, str, bytes, int]]:
    """``(stream, topic, payload, id)`` per change, the payload being the JSON object of the
    change's columns (key/before/after embedded as JSON), the id the xxh3-128 of
    ``<commit_lsn>:<seq>``: what ``pg_cdc`` → ``iggy_routed`` sends."""
    dumps, fragment = orjson.dumps, orjson.Fragment
    for xid, commit_lsn, commit_ts, changes in txns:
        commit_text = lsn_text(commit_lsn)
        stamp = commit_ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for lsn, seq, schema, table, op, key, before, after in changes:
            payload = dumps({
                "lsn": lsn_text(lsn), "commit_lsn": commit_text, "xid": xid,
                "commit_ts": stamp, "seq": seq, "schema": schema, "table": table, "op": op,
                "key": None if key is None else fragment(key),
                "before": None if before is None else fragment(before),
                "after": None if after is None else fragment(after), "unchanged": [],
            })
            yield stream, table, payload, xxh3_128_intdigest(f"{commit_text}:{seq}".encode())
