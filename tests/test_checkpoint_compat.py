"""A checkpoint written by the current release (2, commit d500c23) goes on without loss.

Issue 22: users keep the checkpoint, offset, ledger and marker formats. The fixture in
``fixtures/checkpoint_v2/`` is what release 2's ``python -m pg_to_iggy`` left when it was
``kill -9``-ed in the middle of sending a stream batch (made by ``make_fixture.py`` there):

* its checkpoint: ``metadata``, ``offsets/0..N`` (LSN offsets), ``commits/0..N-1``, the
  ``iggy_routed`` ledger (``destinations.json``) and the "started" marker of batch N, the batch
  planned but never committed;
* what it left in Iggy: every message of the committed batches and the prefix of batch N that
  landed before the broker stopped taking sends, with release 2's four-part origin header
  (``<query>:<batch>:<task>:<seq>``) on the last message of each send.

What depends on the cluster (LSNs, transaction ids, commit times, the schema and stream name)
is a placeholder. The test writes the same transactions to a fresh schema, reads their LSNs
from a ``test_decoding`` slot of its own, fills the placeholders in (an LSN offset becomes
the end of the commit record of the last transaction the batch held), puts the pipeline's slot
where release 2 had moved it, and sends release 2's messages to the broker as they were. Then
it writes more transactions, runs this release's job on that checkpoint until it caught up,
and judges what Iggy holds with the consistency oracle.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
import psycopg
import pytest
from psycopg import sql
from support.sink_state import ledger_of

from connector_common.lsn import parse_lsn
from iggy_local import LocalIggy
from iggy_spark.sink import topic_request
from iggy_spark.sink.encoding import message_id
from iggy_spark.sink.options import TopicDefaults
from iggy_spark_testing import readback
from iggy_spark_testing.chaos import (
    committed_end,
    flush_lsn,
    read_checkpoint,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.job import PipelineJob
from iggy_spark_testing.oracle import check, read_back, read_tables
from iggy_spark_testing.records import Change, Column, Row, TableSpec, Transaction

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_v2"
RELEASE = "d500c23"
"""The commit of release 2, which wrote the fixture."""

ORIGIN_HEADER = "iggy_spark.origin"

TABLES: tuple[TableSpec, ...] = (
    TableSpec("accounts", (Column("id", "integer", "int"), Column("owner", "text", "text"),
                           Column("balance", "numeric(10,2)", "numeric")), ("id",)),
    TableSpec("orders", (Column("id", "integer", "int"), Column("account", "integer", "int"),
                         Column("note", "text", "text")), ("id",), replica_identity_full=True),
)

SINK = {
    "topic_defaults.partitions_count": "2",
    "max_batch_bytes": "1500B",  # a send every few messages: several sends per group
    "circuit_breaker.failure_threshold": "1000",  # a refused send is retried, not given up
}


def source_options(schema: str) -> dict[str, str]:
    return {"include_tables": f"{schema}\\..*", "topic_from": "table",
            "partition_key_from": "id", "default_stream": schema}


# -- the transactions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    """One row change: ``key`` is the row's id before it (update, delete), ``row`` the whole
    row after it (insert, update)."""

    table: str
    op: Literal["insert", "update", "delete"]
    key: int | None
    row: Row | None


def planned_transactions(count: int) -> list[list[Statement]]:
    """The same ``count`` transactions every time: inserts into both tables, updates (one in
    seven changes the key) and deletes, one to three changes each."""
    accounts: dict[int, Row] = {}
    orders: dict[int, Row] = {}
    planned = []
    for i in range(count):
        txn = []
        row = {"id": i + 1, "owner": f"owner {i + 1}", "balance": f"{i + 1}0.50"}
        accounts[i + 1] = row
        txn.append(Statement("accounts", "insert", None, row))
        if i % 2 == 1:
            order = {"id": i + 1, "account": i, "note": f"order {i + 1} of account {i}"}
            orders[i + 1] = order
            txn.append(Statement("orders", "insert", None, order))
        if i % 3 == 2 and i - 1 in accounts:
            updated = {**accounts[i - 1], "balance": f"{i}1.25"}
            accounts[i - 1] = updated
            txn.append(Statement("accounts", "update", i - 1, updated))
        if i % 4 == 3 and i - 1 in orders:
            del orders[i - 1]
            txn.append(Statement("orders", "delete", i - 1, None))
        if i % 7 == 6 and i in accounts:
            moved = {**accounts.pop(i), "id": i + 1000}
            accounts[i + 1000] = moved
            txn.append(Statement("accounts", "update", i, moved))
        planned.append(txn)
    return planned


def create_tables(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for spec in TABLES:
            table = sql.Identifier(schema, spec.name)
            columns = sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.sql_type))
                for c in spec.columns)
            conn.execute(sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (id))").format(table, columns))
            if spec.replica_identity_full:
                conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(table))


def write_transactions(
    dsn: str, schema: str, planned: Sequence[Sequence[Statement]], first: int = 0
) -> list[Transaction]:
    """Commit ``planned`` one transaction each; what committed, as the oracle wants it."""
    specs = {spec.name: spec for spec in TABLES}
    done = []
    with psycopg.connect(dsn) as conn:
        for index, statements in enumerate(planned, start=first):
            row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
            assert row is not None
            xid = int(row[0]) & 0xFFFF_FFFF
            changes = []
            for seq, s in enumerate(statements):
                table = sql.Identifier(schema, s.table)
                if s.op == "insert":
                    assert s.row is not None
                    conn.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                        table, sql.SQL(", ").join(map(sql.Identifier, s.row)),
                        sql.SQL(", ").join(sql.Placeholder() * len(s.row))), list(s.row.values()))
                elif s.op == "update":
                    assert s.row is not None
                    conn.execute(sql.SQL("UPDATE {} SET {} WHERE id = %s").format(
                        table, sql.SQL(", ").join(
                            sql.SQL("{} = %s").format(sql.Identifier(c)) for c in s.row)),
                        [*s.row.values(), s.key])
                else:
                    conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(table), [s.key])
                key = (s.key,) if s.key is not None else None
                new_key = specs[s.table].key_of(s.row) if s.row is not None else None
                changes.append(Change(xid, seq, s.table, s.op, key, new_key, s.row))
            conn.commit()
            done.append(Transaction(index, xid, tuple(changes)))
    return done


# -- what a test_decoding slot says about them -----------------------------------------------------


@dataclass(frozen=True)
class Decoded:
    """One committed transaction as logical decoding reports it."""

    xid: int
    changes: tuple[str, ...]
    """The LSN of each change, in order."""
    commit_lsn: str
    """The end of its commit record: what pg_cdc calls ``commit_lsn``."""
    commit_ts: str
    """Its commit time in pg_cdc's JSON form."""


def decoded(dsn: str, slot: str) -> dict[int, Decoded]:
    """Every transaction the ``test_decoding`` slot ``slot`` holds, by xid (peeked, not
    consumed)."""
    found: dict[int, Decoded] = {}
    changes: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        rows = conn.execute(
            "SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_changes("
            "%s, NULL, NULL, 'include-timestamp', '1', 'skip-empty-xacts', '1')", (slot,))
        for lsn, xid, data in rows:
            if data.startswith("BEGIN"):
                changes = []
            elif data.startswith("table "):
                changes.append(lsn)
            elif data.startswith("COMMIT"):
                match = re.search(r"\(at (.+)\)$", data)
                assert match, data
                found[int(xid)] = Decoded(int(xid), tuple(changes), lsn, _json_time(match[1]))
    return found


def _json_time(text: str) -> str:
    """``2026-11-24 00:46:54.1234+00`` (test_decoding, UTC) as pg_cdc's JSON writes it."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d+))?\+00", text)
    assert match, text
    moment = datetime.fromisoformat(f"{match[1]}T{match[2]}.{(match[3] or '').ljust(6, '0')}")
    return moment.replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- Iggy ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Landed:
    """A message in a partition, with the origin header it carries, if any."""

    topic: str
    partition: int
    offset: int
    id: int
    payload: bytes
    origin: str | None


def read_iggy(url: str, stream: str, topics: Iterable[str]) -> list[Landed]:
    async def main() -> list[Landed]:
        client = await readback.connect(url)
        found = []
        for topic in topics:
            if await client.get_topic(stream, topic) is None:
                continue
            for m in await readback.aread_topic(client, stream, topic):
                origin = m.headers.get(ORIGIN_HEADER)
                found.append(Landed(topic, m.partition, m.offset, m.id, m.payload,
                                    None if origin is None else str(origin)))
        return found

    return asyncio.run(main())


# -- the fixture, made concrete --------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\$[A-Z]+(?:_[A-Z]+)*(?:_-?\d+)*")


def placeholders(
    schema: str, written: Sequence[Transaction], found: Mapping[int, Decoded]
) -> dict[str, Any]:
    """What each placeholder of the fixture stands for on this cluster."""
    values: dict[str, Any] = {"$STREAM": schema}
    for txn in written:
        d = found[txn.xid]
        assert len(d.changes) == len(txn.changes), (txn, d)
        i = txn.index
        values |= {f"$LSN_AFTER_TXN_{i}": d.commit_lsn, f"$COMMIT_LSN_{i}": d.commit_lsn,
                   f"$XID_{i}": txn.xid, f"$COMMIT_TS_{i}": d.commit_ts}
        values |= {f"$LSN_OF_CHANGE_{i}_{seq}": lsn for seq, lsn in enumerate(d.changes)}
    return values


def fill(text: str, values: Mapping[str, Any]) -> str:
    def value(match: re.Match[str]) -> str:
        if match[0] not in values:
            raise KeyError(f"the fixture names {match[0]}, which the test cannot fill in")
        return str(values[match[0]])

    return _PLACEHOLDER.sub(value, text)


def fill_json(template: Any, values: Mapping[str, Any]) -> Any:
    """A JSON value with its placeholders filled in, typed (``$XID_3`` becomes a number)."""
    if isinstance(template, dict):
        return {k: fill_json(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill_json(v, values) for v in template]
    if isinstance(template, str) and template in values:
        return values[template]
    return fill(template, values) if isinstance(template, str) else template


def instantiate(fixture: Path, checkpoint: Path, values: Mapping[str, Any]) -> None:
    """Release 2's checkpoint, at ``checkpoint``, with this cluster's LSNs and names."""
    for path in sorted(fixture.rglob("*")):
        target = checkpoint / path.relative_to(fixture)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(fill(path.read_text(), values))


def send_as_release_2(url: str, messages: Sequence[Mapping[str, Any]], partitions: int) -> None:
    """Put release 2's messages where it left them: same partitions and offsets, ids, payloads
    and origin headers (one send each, so no message is given a header it did not have)."""
    import apache_iggy

    async def main() -> None:
        client = await readback.connect(url)
        next_offset: Counter[tuple[str, int]] = Counter()
        for m in messages:  # in partition and offset order, from offset 0
            place = (m["topic"], m["partition"])
            assert m["offset"] == next_offset[place], m
            next_offset[place] += 1
            stream, topic = m["payload"]["schema"], m["topic"]
            if await client.get_stream(stream) is None:
                await client.create_stream(stream)
            if await client.get_topic(stream, topic) is None:
                await topic_request.create_topic(client, stream, topic,
                                                 TopicDefaults(partitions))
            payload = m["payload"]
            headers = {ORIGIN_HEADER: m["origin"]} if m["origin"] else None
            mid = message_id(f"{payload['commit_lsn']}:{payload['seq']}")
            await client.send_messages(stream, topic,
                                       apache_iggy.Partitioning.partition_id(m["partition"]),
                                       [apache_iggy.SendMessage(orjson.dumps(payload), headers,
                                                                mid)])

    asyncio.run(main())


# -- the test --------------------------------------------------------------------------------------

MORE = 8
"""Transactions written after release 2 stopped, for this release to deliver."""


def test_a_release_2_checkpoint_killed_mid_batch_goes_on_without_loss(
    pg: LocalPostgres, broker: LocalIggy, name: str, tmp_path: Path
) -> None:
    from postgres_cdc_source.options import CdcOptions
    from postgres_cdc_source.replication.lifecycle import ensure_slot

    described = json.loads((FIXTURE / "fixture.json").read_text())
    assert described["release"] == RELEASE
    interrupted, before = int(described["interrupted_batch"]), int(described["transactions"])
    planned = planned_transactions(before + MORE)

    # The cluster as release 2 left it: its transactions written, its slot where it moved it.
    create_tables(pg.dsn, name)
    ensure_slot(CdcOptions.from_options({"dsn": pg.dsn, "slot": name,
                                              **source_options(name)}))
    helper = f"{name}_lsns"
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (helper,))
    written = write_transactions(pg.dsn, name, planned[:before])
    values = placeholders(name, written, decoded(pg.dsn, helper))
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (helper,))
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                     (name, values[described["slot_confirmed_flush"]]))
    checkpoint = tmp_path / "checkpoint"
    instantiate(FIXTURE / "checkpoint", checkpoint, values)
    left = fill_json(json.loads((FIXTURE / "iggy.json").read_text()), values)
    send_as_release_2(broker.url, left, int(SINK["topic_defaults.partitions_count"]))
    ledger_before = json.loads((checkpoint / "iggy_routed" / "destinations.json").read_text())
    replayed_offset = (checkpoint / "offsets" / str(interrupted)).read_text()
    committed_before = committed_end(checkpoint)
    assert committed_before is not None
    assert [b.id for b in read_checkpoint(checkpoint) if b.committed_at is None] == [interrupted]

    # This release takes over, with more to deliver: an availableNow run, which replays the
    # interrupted batch, delivers everything written before it started, and exits (a job left
    # running would plan a batch whenever the server writes WAL, which a stop can cut short).
    written += write_transactions(pg.dsn, name, planned[before:], before)
    target = flush_lsn(pg.dsn)
    job = PipelineJob(dsn=pg.dsn, slot=name, url=broker.url, checkpoint=checkpoint,
                      log_path=tmp_path / "job.log", source=source_options(name), sink=SINK)
    job.command.append("--available-now")
    try:
        job.start()
        wait_until(lambda: not job.running, 180, "the job to catch up and exit")
        assert job.stop() == 0, job.log_tail()
    finally:
        if job.running:
            job.kill()
    log = job.log_path.read_text(errors="replace")

    # Spark went on from release 2's offsets: the interrupted batch was replayed as planned
    # (same id, same end offset) and committed, and batch ids went on from there.
    assert (checkpoint / "offsets" / str(interrupted)).read_text() == replayed_offset
    batches = read_checkpoint(checkpoint)
    assert all(b.committed_at is not None for b in batches), job.log_tail()
    assert batches[-1].id > interrupted and batches[-1].end >= target
    with psycopg.connect(pg.dsn) as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                           "WHERE slot_name = %s", (name,)).fetchone()
    assert row is not None and committed_before < parse_lsn(row[0]) <= batches[-1].end

    # Nothing lost, nothing invented or altered (a change this release sent again says exactly
    # what release 2's copy says), ids name the change, each row's changes in commit order.
    specs = list(TABLES)
    messages = read_back(broker.url, [name])
    report = check(messages, written, specs, source=read_tables(pg.dsn, name, specs))
    assert report.ok, str(report)
    assert report.delivered == report.changes == sum(len(t.changes) for t in written)
    after = {(t.xid, c.seq) for t in written for c in t.changes
             if t.index >= before or parse_lsn(values[f"$COMMIT_LSN_{t.index}"]) > committed_before}
    arrived = {(int(m.change["xid"]), int(m.change["seq"])) for m in messages if m.change}
    assert after and after <= arrived, f"{len(after - arrived)} changes after the checkpoint lost"

    # The job's log: the sink's first batch was the interrupted one, and ids went on.
    sink_batches = [int(n) for n in re.findall(r"iggy_routed batch (\d+):", log)]
    assert sink_batches and sink_batches[0] == interrupted, sink_batches
    assert sorted(sink_batches) == sink_batches

    # The replay read release 2's four-part marks: each vouched for its own message, which was
    # not sent again; only the unmarked rest of release 2's sends of that batch came twice.
    query = json.loads((checkpoint / "metadata").read_text())["id"].replace("-", "")[:16]
    prefix = f"{query}:{interrupted}:"
    sent = _runs(left).get(interrupted, [])
    marked = {message_id(f"{m['payload']['commit_lsn']}:{m['payload']['seq']}")
              for m in sent if m["origin"]}
    unmarked = {message_id(f"{m['payload']['commit_lsn']}:{m['payload']['seq']}")
                for m in sent if not m["origin"]}
    assert marked and all(m["origin"].startswith(prefix) for m in sent if m["origin"])
    copies = Counter(m.id for m in messages)
    twice = {i for i, n in copies.items() if n > 1}
    assert not twice & marked, "a message release 2's mark vouched for was sent again"
    assert twice <= unmarked, "duplicates outside what the interrupted batch had landed"
    resumed = re.search(rf"iggy_routed batch {interrupted}:.*found landed by a replay (\d+)", log)
    assert resumed and int(resumed[1]) == len(marked), job.log_tail()

    # The ledger kept release 2's history (migrated once into the query's control topic) and
    # added this release's batches to it.
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    ledger = ledger_of(broker, query_id).data
    assert ledger["last_batch"] == batches[-1].id
    for key, old in ledger_before["destinations"].items():
        new = ledger["destinations"][key]
        topic = old["topic"]
        assert new["first_batch"] == old["first_batch"] == 0
        assert new["created"] and new["admitted"]
        assert new["messages"] == sum(1 for t in written for c in t.changes if c.table == topic)
        assert new["messages"] > old["messages"]
    assert ledger["delivery"]["resumed"] == ledger_before["delivery"]["resumed"] + len(marked)
    assert ledger["delivery"]["state_lost"] == 0
    assert "now lives in the control topic" in log


def _runs(messages: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """Release 2's messages by the batch that sent them: a send lands whole, contiguous, with
    the batch's mark on its last message."""
    by_batch: dict[int, list[Mapping[str, Any]]] = {}
    pending: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for m in messages:  # in partition and offset order
        run = pending.setdefault((m["topic"], m["partition"]), [])
        run.append(m)
        if m["origin"]:
            by_batch.setdefault(int(m["origin"].split(":")[1]), []).extend(run)
            run.clear()
    assert not any(pending.values()), "a message of release 2 without a mark after it"
    return by_batch
