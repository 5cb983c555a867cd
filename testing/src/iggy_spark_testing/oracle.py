"""The consistency oracle: read back everything the pipeline put in Iggy and judge it.

The pipeline promises at-least-once delivery with stable ids: every committed Postgres change
reaches Iggy, nothing is invented, duplicates carry the id of their original, and the changes
of one row stay in one partition in commit order. Nothing inside the pipeline can vouch for
that; this module checks it from the outside, as a consumer would:

1. :func:`read_back` polls every partition of every topic of the given streams by offset,
   over the real SDK (:mod:`iggy_spark_testing.readback`, no broker internals), so it works against
   any Iggy server;
2. :func:`check` dedupes by message id and compares with the ground truth a
   :class:`~iggy_spark_testing.workload.Workload` recorded: missing, invented and altered
   changes, duplicates, ids that are not ``xxh3_128("<commit_lsn>:<seq>")``, transactions out
   of commit order, a row's changes split over partitions or out of order in one;
3. it replays the deduped changes into an in-memory model of the tables and compares it row
   for row with the source tables as :func:`read_tables` finds them in Postgres.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from connector_common.lsn import parse_lsn
from iggy_spark.sink.encoding import message_id
from iggy_spark_testing import readback
from iggy_spark_testing.records import Change, Key, Row, TableSpec, Transaction
from iggy_spark_testing.workload import Workload

__all__ = [
    "ChangeMessage",
    "OracleReport",
    "check",
    "read_back",
    "read_tables",
    "verify",
]

_EXAMPLES = 5  # problems of each kind quoted in the report


# -- reading back ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeMessage:
    """A message of the pipeline, where it was found and what it says (``None`` if not JSON)."""

    stream: str
    topic: str
    partition: int
    offset: int
    id: int
    change: dict[str, Any] | None

    @property
    def position(self) -> tuple[int, int]:
        """``(commit LSN, seq)``: the change's place in commit order."""
        assert self.change is not None
        return parse_lsn(self.change["commit_lsn"]), int(self.change["seq"])


def _parse(payload: bytes) -> dict[str, Any] | None:
    try:
        change = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    needed = ("commit_lsn", "seq", "xid", "table", "op")
    return change if isinstance(change, dict) and all(k in change for k in needed) else None


def read_back(url: str, streams: Iterable[str]) -> list[ChangeMessage]:
    """Every message in every topic of ``streams`` (a missing stream has none), as a consumer
    reads them: over the SDK, partition by partition, by offset."""

    async def main() -> list[ChangeMessage]:
        client = await readback.connect(url)
        found: list[ChangeMessage] = []
        for stream in streams:
            if await client.get_stream(stream) is None:
                continue
            for topic in sorted(t.name for t in await client.get_topics(stream)):
                found.extend(
                    ChangeMessage(stream, topic, m.partition, m.offset, m.id, _parse(m.payload))
                    for m in await readback.aread_topic(client, stream, topic)
                )
        return found

    return asyncio.run(main())


def read_tables(dsn: str, schema: str, tables: Iterable[TableSpec]) -> dict[str, dict[Key, Row]]:
    """The source tables now, table -> primary key -> row, in ``pg_cdc``'s JSON form.

    Values are read as text in the session settings the reader uses and converted by the
    reader's own converters, so a row compares equal to its replayed changes exactly when the
    changes carried every committed value.
    """
    import psycopg
    from psycopg import sql

    from postgres_cdc_source.pg_types import SESSION_SETTINGS
    from postgres_cdc_source.rows.json.values import converter_for_oid

    session = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())
    found: dict[str, dict[Key, Row]] = {}
    with psycopg.connect(dsn, autocommit=True, options=session) as conn:
        for spec in tables:
            table = sql.Identifier(schema, spec.name)
            columns = conn.execute(
                "SELECT attname, atttypid::int8 FROM pg_attribute WHERE attrelid = %s::regclass"
                " AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                (table.as_string(conn),),
            ).fetchall()
            select = sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(
                    sql.SQL("{}::text").format(sql.Identifier(n)) for n, _ in columns
                ),
                table,
            )
            converters = [(name, converter_for_oid(int(oid))) for name, oid in columns]
            rows: dict[Key, Row] = {}
            for values in conn.execute(select):
                converted = {
                    n: None if v is None else c(v)
                    for (n, c), v in zip(converters, values, strict=True)
                }
                row = orjson.loads(orjson.dumps(converted))  # json/jsonb Fragments -> objects
                rows[spec.key_of(row)] = row
            found[spec.name] = rows
    return found


# -- judging ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleReport:
    """The verdict. Everything but ``duplicates`` must be zero for a run to be correct."""

    changes: int
    """Changes the workload committed."""
    messages: int
    """Messages read back, duplicates included."""
    delivered: int
    """Distinct changes among them (by message id)."""
    missing: int
    invented: int
    """Messages that are no committed change: rolled back, malformed, or from elsewhere."""
    duplicates: int
    """Messages beyond the first with the same id."""
    order_violations: int
    """Transactions out of commit order, and row changes split over partitions or out of order."""
    table_mismatches: int
    """Rows that differ between the replayed changes and the source tables."""
    content_mismatches: int = 0
    """Changes delivered with other values than committed, or replayed differently."""
    bad_ids: int = 0
    """Messages whose id is not ``xxh3_128("<commit_lsn>:<seq>")``, or one change under two ids."""
    duplicated_commits: tuple[int, ...] = field(default=(), repr=False)
    """The commit LSN of each change delivered more than once (to explain duplicates)."""
    commits: tuple[int, ...] = field(default=(), repr=False)
    """Every distinct commit LSN delivered, sorted (batch ranges are judged against them)."""
    problems: tuple[str, ...] = field(default=(), repr=False)
    """A few examples of each problem found, for failure messages."""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.invented or self.order_violations
                    or self.table_mismatches or self.content_mismatches or self.bad_ids)

    def figures(self) -> dict[str, int]:
        """The counts alone, for results files."""
        return {k: v for k, v in asdict(self).items() if isinstance(v, int)}

    def __str__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.figures().items())
        return counts + "".join(f"\n  {p}" for p in self.problems)


class _Findings:
    """Counters plus a few quoted examples per kind."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.examples: dict[str, list[str]] = defaultdict(list)

    def add(self, kind: str, example: str, count: int = 1) -> None:
        self.counts[kind] += count
        if len(self.examples[kind]) < _EXAMPLES:
            self.examples[kind].append(f"{kind}: {example}")

    def problems(self) -> tuple[str, ...]:
        return tuple(e for examples in self.examples.values() for e in examples)


def _pk(spec: TableSpec, values: Mapping[str, Any] | None) -> Key | None:
    if values is None or any(k not in values for k in spec.primary_key):
        return None
    return spec.key_of(values)


def check(
    delivered: Sequence[ChangeMessage],
    transactions: Sequence[Transaction],
    tables: Iterable[TableSpec],
    *,
    source: Mapping[str, Mapping[Key, Row]],
) -> OracleReport:
    """Judge ``delivered`` against the committed ``transactions`` and the ``source`` tables."""
    specs = {spec.name: spec for spec in tables}
    found = _Findings()
    firsts = _dedupe(delivered, found)
    by_change: dict[tuple[int, int], ChangeMessage] = {}
    for message in firsts:
        if message.change is None:
            found.add("invented", f"message {message.id:032x} is not a pg_cdc change")
            continue
        payload = message.change
        key = (int(payload["xid"]), int(payload["seq"]))
        if key in by_change:
            found.add("bad_ids", f"change xid={key[0]} seq={key[1]} arrived under two ids")
            continue
        by_change[key] = message
        if message.id != message_id(f"{payload['commit_lsn']}:{payload['seq']}"):
            found.add("bad_ids", f"{_where(message)} has id {message.id:032x}")

    expected = {(c.xid, c.seq): (c, t.index) for t in transactions for c in t.changes}
    for key in expected.keys() - by_change.keys():
        change, index = expected[key]
        found.add("missing", f"transaction #{index} xid={key[0]} seq={key[1]} {change.op} on "
                  f"{change.table} {change.identity}")
    for key in by_change.keys() - expected.keys():
        found.add("invented", f"{_where(by_change[key])}: xid={key[0]} seq={key[1]}")
    for key in by_change.keys() & expected.keys():
        _compare(by_change[key], expected[key][0], specs[expected[key][0].table], found)

    known = sorted((m for k, m in by_change.items() if k in expected), key=lambda m: m.position)
    _check_commit_order(known, expected, found)
    _check_row_order(known, specs, found)
    _replay_and_compare(known, specs, source, found)

    copies = Counter(m.id for m in delivered)
    duplicated = [
        parse_lsn(m.change["commit_lsn"]) for m in firsts
        if m.change is not None and copies[m.id] > 1
    ]
    counts = found.counts
    return OracleReport(
        changes=len(expected),
        messages=len(delivered),
        delivered=len(firsts),
        missing=counts["missing"],
        invented=counts["invented"],
        duplicates=len(delivered) - len(firsts),
        order_violations=counts["order"],
        table_mismatches=counts["table"],
        content_mismatches=counts["content"],
        bad_ids=counts["bad_ids"],
        duplicated_commits=tuple(sorted(duplicated)),
        commits=tuple(sorted({m.position[0] for m in known})),
        problems=found.problems(),
    )


def _dedupe(delivered: Sequence[ChangeMessage], found: _Findings) -> list[ChangeMessage]:
    """The first copy of every id; a later copy must say exactly the same."""
    first: dict[int, ChangeMessage] = {}
    for message in delivered:
        original = first.setdefault(message.id, message)
        if original is not message and original.change != message.change:
            found.add("content", f"{_where(message)} differs from its first copy at "
                      f"{_where(original)}")
    return list(first.values())


def _where(message: ChangeMessage) -> str:
    return f"{message.stream}/{message.topic} partition {message.partition} offset {message.offset}"


def _compare(message: ChangeMessage, change: Change, spec: TableSpec, found: _Findings) -> None:
    """The delivered change says what was committed (TOAST-unchanged columns aside)."""
    got = message.change
    assert got is not None
    problems = []
    if got["table"] != change.table or got["op"] != change.op:
        problems.append(f"{got['table']}/{got['op']} instead of {change.table}/{change.op}")
    if change.key is not None and _pk(spec, got.get("key")) != change.key:
        problems.append(f"key {got.get('key')!r} instead of {change.key}")
    if change.row is not None:
        after = got.get("after") or {}
        unchanged = set(got.get("unchanged") or ())
        if set(after) | unchanged != set(change.row) or unchanged & set(after):
            problems.append(f"columns {sorted(after)} + unchanged {sorted(unchanged)}")
        elif any(after[name] != change.row[name] for name in after):
            wrong = [name for name in after if after[name] != change.row[name]]
            problems.append(f"values of {wrong} differ from what was committed")
        elif any(name in spec.primary_key for name in unchanged):
            problems.append("a key column is marked unchanged")
    if problems:
        found.add("content", f"{_where(message)} ({change.table} {change.identity}): "
                  + "; ".join(problems))


def _check_commit_order(
    known: Sequence[ChangeMessage], expected: Mapping[tuple[int, int], tuple[Change, int]],
    found: _Findings,
) -> None:
    """ChangeMessage commit LSNs order the transactions as the workload saw them commit."""
    previous = -1
    for message in known:
        assert message.change is not None
        index = expected[(int(message.change["xid"]), int(message.change["seq"]))][1]
        if index < previous:
            found.add("order", f"transaction #{index} has a later commit LSN than #{previous}")
        previous = max(previous, index)


def _identity(spec: TableSpec, change: Mapping[str, Any]) -> Key | None:
    """The row a change leaves behind: its key after the change (before it, for a delete)."""
    return _pk(spec, change.get("after")) or _pk(spec, change.get("key"))


def _check_row_order(
    known: Sequence[ChangeMessage], specs: Mapping[str, TableSpec], found: _Findings
) -> None:
    """A row's changes share one partition and sit there in commit order (first copies)."""
    rows: dict[tuple[str, Key | None], list[ChangeMessage]] = defaultdict(list)
    for message in known:  # already in commit order
        assert message.change is not None
        table = message.change["table"]
        rows[(table, _identity(specs[table], message.change))].append(message)
    for (table, key), messages in rows.items():
        places = {(m.stream, m.topic, m.partition) for m in messages}
        if len(places) > 1:
            found.add("order", f"{table} {key}: changes spread over partitions {sorted(places)}")
            continue
        for earlier, later in itertools.pairwise(messages):
            if later.offset < earlier.offset:
                found.add("order", f"{table} {key}: commit-order change at offset {later.offset}"
                          f" precedes offset {earlier.offset}")


def _replay_and_compare(
    known: Sequence[ChangeMessage], specs: Mapping[str, TableSpec],
    source: Mapping[str, Mapping[Key, Row]], found: _Findings,
) -> None:
    """Apply the changes in commit order to empty tables; the result must equal the source."""
    model: dict[str, dict[Key, Row]] = {name: {} for name in specs}
    for message in known:
        change = message.change
        assert change is not None
        spec = specs[change["table"]]
        rows = model[spec.name]
        op = change["op"]
        if op == "truncate":
            rows.clear()
            continue
        old_key = _pk(spec, change.get("key"))
        old = rows.pop(old_key, None) if old_key is not None else None
        if op in ("update", "delete") and old is None:
            found.add("table", f"{_where(message)}: {op} of a row the replay does not hold")
        if op == "delete":
            continue
        row = dict(change.get("after") or {})
        for name in change.get("unchanged") or ():
            row[name] = (old or {}).get(name)
        new_key = _pk(spec, row)
        if op == "insert" and new_key in rows:
            found.add("table", f"{_where(message)}: insert over an existing row {new_key}")
        if new_key is not None:
            rows[new_key] = row
    for name, spec in specs.items():
        replayed, actual = model[name], source.get(name, {})
        for key in replayed.keys() | actual.keys():
            if replayed.get(key) != actual.get(key):
                state = ("missing from the replay" if key not in replayed else
                         "not in the source" if key not in actual else "different")
                found.add("table", f"{spec.name} {key}: {state}")


def verify(url: str, streams: Iterable[str], work: Workload) -> OracleReport:
    """Read back ``streams`` and judge them against a :class:`Workload` and its live tables."""
    tables = list(work.tables.values())
    return check(
        read_back(url, streams), work.transactions, tables,
        source=read_tables(work.dsn, work.schema, tables),
    )
