"""``snapshot=initial`` of 100,000 rows under writes, with the driver ``kill -9``-ed twice while
a snapshot batch is being sent, and rows deleted and inserted inside that batch's key range
before it is replayed; the state rebuilt from Iggy must equal the tables.

    python -m bench.bench_snapshot_faults [--rows 100000] [--kills 2] [--rate 100]
        [--chunk-rows 5000] [--max-rows-per-trigger 10000] [--seed 31]
        [--range-deletes 300] [--range-inserts 300] [--skip-batches 6] [--kill-delay 0]
        [--mid-send-tries 3] [--max-batch-bytes 64KB]

The heavy variant of tests/test_snapshot_e2e.py. One throwaway Postgres, one local Iggy broker
in its own process, the pipeline job (``python -m pg_to_iggy``, ``local[2]``) as a child
process group. A seeded workload first inserts ``--rows`` rows into its three tables (hostile
values, TOAST, composite keys, one table under ``REPLICA IDENTITY FULL``), then the job starts
with ``snapshot=initial`` (``--chunk-rows`` per chunk, so many chunks,
``--max-rows-per-trigger`` per batch, so many batches; the sink's ``max_batch_bytes`` 64KB, so
a task sends its chunk's rows as it reads them, many sends per destination partition) and the
workload goes on inserting, updating (keys too) and deleting the same keys at ``--rate``
changes per second.

``--kills`` times: once the job has committed 1 + random 0-``--skip-batches`` batches since its
(re)start, the next batch is watched (its ``offsets/N`` written, no ``commits/N``) and the stream's
message count polled over the SDK every 20 ms; once the count rises while that batch is in flight
(its messages are landing), a random 0-``--kill-delay`` s later the job is SIGKILLed whole (driver,
JVM, workers: the exported snapshot dies with it). If the batch commits before its messages were
seen landing, the next one is watched, up to ``--mid-send-tries`` batches; then the job is killed
as soon as a batch is planned. The rows of the batch's pinned chunks (``"planned"`` in its end
offset) that landed are found among the messages read back once the broker's count stopped moving
(sends it had received when the job died still land); the kill is recorded as *mid-send* when the
batch was not committed, some of its rows had landed and more than 1% (at least 10) of the rows in
its range with ids given before it was planned (so rows it had read) had not. Then, with the job
dead and the workload paused, inside that batch's chunks: up to ``--range-deletes`` rows are
deleted (half of them rows that had landed, half rows that had not, evenly spread over each set),
and up to ``--range-inserts`` rows are inserted with keys inside the chunks (between each chunk's
first and last rows, evenly spread: keys no row of that table has, with ids below the workload's
next one, so it never makes them itself); at most a tenth of a chunk's rows each. The workload's
model learns both changes, so its later updates and deletes keep hitting real rows. The workload
resumes, the job restarts from the checkpoint and replays the batch, reading the chunks as they are
now. Each kill must land while the snapshot is still running (recorded, and the verdict fails
otherwise).

Then the writes stop, the job catches up and stops, every message is read back over the SDK and
replayed as a consumer does (:mod:`iggy_spark_testing.replay`, upsert per key, changes in
commit order), and the result is compared with the tables row by row: ``missing`` (a row of the
table the messages lack), ``extra`` (a row the messages keep that the table does not have),
``wrong`` (a row whose values differ); any of them, or a snapshot row delivered twice (same
message id), fails the verdict. What the sink's replays found landed (``found landed by a
replay N`` in the job's log) is summed from the job's log.

Writes ``bench/results/snapshot_faults.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg import sql

from bench.common import log, write_result
from iggy_local import LocalIggy
from iggy_spark_testing.chaos import (
    committed_end,
    flush_lsn,
    read_checkpoint,
    slot_exists,
    snapshot_finished,
    wait_until,
)
from iggy_spark_testing.harness import LocalPostgres
from iggy_spark_testing.job import PipelineJob
from iggy_spark_testing.oracle import read_back, read_tables
from iggy_spark_testing.readback import connect
from iggy_spark_testing.replay import replay
from iggy_spark_testing.workload import Key, Mix, RunStats, TableSpec, Workload

NAME = "snapfaults"
SINK = {"topic_defaults.partitions_count": "3"}
MAX_BATCH_BYTES = "64KB"
"""The sink's buffer here: its default (32MB) holds a whole chunk, so a task sends each of its
groups (destination partitions) in one send, which lands whole or not at all; with 64KB a task
sends as it reads, so a kill leaves groups landed in part, the first part of their rows."""
POLL = 0.02  # seconds between looks at the checkpoint and the broker while a kill is aimed


def populate(work: Workload, rows: int) -> float:
    """Insert ``rows`` rows with the workload (so its later changes hit the same keys)."""
    started = time.monotonic()
    work.mix = Mix(insert=1.0, update=0.0, delete=0.0, rollback=0.0, multi_row=1.0)
    work.run(changes=rows)
    work.mix = Mix()
    return time.monotonic() - started


# -- aiming a kill ---------------------------------------------------------------------------


class MessageCount:
    """The stream's message count, polled over the SDK on one connection (as a consumer or a
    monitor would see it: a send counts once the broker acknowledged it)."""

    def __init__(self, url: str, stream: str) -> None:
        self.stream = stream
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(connect(url))

    def __call__(self) -> int:
        async def messages() -> int:  # the SDK's calls need the loop running when made
            details = await self.client.get_stream(self.stream)
            return 0 if details is None else int(details.messages_count)

        return self.loop.run_until_complete(messages())

    def close(self) -> None:
        self.loop.close()


def end_offset(checkpoint: Path, batch: int) -> dict[str, Any]:
    """The source's end offset of ``batch`` (the last line of ``offsets/<batch>``)."""
    return dict(orjson.loads((checkpoint / "offsets" / str(batch)).read_text()
                             .splitlines()[-1]))


def is_snapshot_batch(offset: dict[str, Any]) -> bool:
    """A batch reading the snapshot: its end offset is inside it, or pins the last chunks."""
    return "snapshot" in offset or "planned" in offset


def aim_and_kill(job: PipelineJob, checkpoint: Path, count: MessageCount, work: Workload,
                 rng: random.Random, args: argparse.Namespace) -> dict[str, Any]:
    """Wait for 1 + random 0-``skip_batches`` committed batches since the (re)start, then for
    the next batch's messages to be seen landing (the stream's count rising between two looks
    while that batch is planned and not committed); kill the job a random 0-``kill_delay`` s
    after that. What the aim saw."""
    started_at = job.started_at or 0
    skip = rng.randint(0, args.skip_batches)
    wait_until(lambda: sum(1 for b in read_checkpoint(checkpoint)
                           if (b.committed_at or 0) > started_at) > skip,
               600, f"{skip + 1} committed batches", alive=lambda: job.running)
    watched = max(b.id for b in read_checkpoint(checkpoint) if b.committed_at is not None)
    missed = 0
    before: tuple[int, int] | None = None  # (uncommitted batch, count) at the previous look
    next_ids: dict[int, int] = {}  # batch -> the workload's next id when it was first seen
    landing: dict[int, float] = {}  # batch -> when its messages were first seen landing
    delay = rng.uniform(0.0, args.kill_delay)
    while True:
        if not job.running:
            raise RuntimeError(f"the job died while a kill was aimed:\n{job.log_tail()}")
        last = read_checkpoint(checkpoint)[-1]
        messages = count()
        if last.committed_at is not None:
            before = None
            if last.id > watched:  # it committed before a kill could land in its sends
                missed += last.id - watched
                watched = last.id
                log(f"batch {last.id} committed before its sends were caught ({missed} missed)")
            time.sleep(POLL)
            continue
        now = time.time()
        # ids the workload gave before the batch was planned (about: seen within POLL): rows
        # with a later id cannot be in what the batch read
        next_ids.setdefault(last.id, work._next_id)
        rising = before is not None and before[0] == last.id and messages > before[1]
        before = (last.id, messages)
        if missed >= args.mid_send_tries:
            reason = "fallback: killed as soon as a batch was planned"
        elif rising or last.id in landing:
            first = landing.setdefault(last.id, now)
            if now - first < delay:
                time.sleep(POLL)
                continue
            reason = "the batch's messages were landing"
        elif not is_snapshot_batch(end_offset(checkpoint, last.id)):
            reason = "the snapshot's batches are over"
        else:
            time.sleep(POLL)
            continue
        job.kill()
        at_kill = count()
        return {
            "aim": reason,
            "batches_let_commit_first": skip + 1,
            # sends the broker had received when the job died still land after the kill
            "messages_landed_after_the_kill": settled(count) - at_kill,
            "batches_committed_before_the_sends_were_caught": missed,
            "seconds_after_planned": round(now - last.planned_at, 2),
            "seconds_after_messages_seen_landing": round(now - landing[last.id], 2)
            if last.id in landing else None,
            "next_id_when_planned": next_ids[last.id],
        }


def settled(count: MessageCount, quiet: float = 1.0, timeout: float = 60.0) -> int:
    """The stream's message count once it stopped changing for ``quiet`` seconds."""
    last, since, started = count(), time.monotonic(), time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() - started < timeout:
        time.sleep(0.1)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
    return last


# -- the interrupted batch's range -----------------------------------------------------------


def bound(values: Sequence[str] | None) -> Key | None:
    return None if values is None else tuple(int(v) for v in values)


def inside(key: Key, lo: Key | None, hi: Key | None) -> bool:
    return (lo is None or key > lo) and (hi is None or key <= hi)


def key_of(spec: TableSpec, values: Any) -> Key | None:
    values = orjson.loads(values) if isinstance(values, str) else values
    if not values or any(k not in values for k in spec.primary_key):
        return None
    return spec.key_of(values)


def landed_in(url: str, chunks: list[tuple[str, Key | None, Key | None]],
              specs: dict[str, TableSpec]) -> dict[int, set[Key]]:
    """Per chunk (index in ``chunks``), the keys of its rows whose snapshot read landed in
    Iggy: every read message of the chunk's table with its key in the chunk's range (ranges of
    different batches never overlap)."""
    found: dict[int, set[Key]] = {i: set() for i in range(len(chunks))}
    for m in read_back(url, [NAME]):
        change = m.change or {}
        table = change.get("table")
        if change.get("op") != "read" or table not in specs:
            continue
        key = key_of(specs[table], change.get("after"))
        if key is None:
            continue
        for i, (name, lo, hi) in enumerate(chunks):
            if name == table and inside(key, lo, hi):
                found[i].add(key)
    return found


def spread(items: Sequence[Any], n: int) -> list[Any]:
    """``n`` of ``items`` evenly spaced over them (all of them if there are no more)."""
    if n >= len(items):
        return list(items)
    if n <= 0:
        return []
    step = len(items) / n
    return [items[int(i * step + step / 2)] for i in range(n)]


def _where(spec: TableSpec, lo: Key | None, hi: Key | None) -> tuple[sql.Composable, list[int]]:
    """``lo < key <= hi`` on the primary key, as the snapshot's chunks are cut."""
    columns = sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Identifier, spec.primary_key)))
    parts: list[sql.Composable] = []
    params: list[int] = []
    for op, value in ((">", lo), ("<=", hi)):
        if value is not None:
            parts.append(sql.SQL("{} {} ({})").format(columns, sql.SQL(op), sql.SQL(", ").join(
                sql.Placeholder() * len(value))))
            params.extend(value)
    if not parts:
        return sql.SQL(""), params
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(parts), params


def _free_keys(work: Workload, spec: TableSpec, lo: Key | None, hi: Key | None,
               keys: Sequence[Key], taken: set[Key]) -> list[Key]:
    """Keys inside ``(lo, hi]`` and between the chunk's first and last rows that the table
    holds in no row of the workload's model and that are not ``taken``, in key order. Every
    id is below the workload's next one, so it never makes them itself (a key it deleted and
    may reuse is one it will see as live once the model learns the insert)."""
    rows = work._rows[spec.name]  # the model's rows; see apply_to_model
    first, last = keys[0][0], keys[-1][0]
    lines = range(1, 10) if len(spec.primary_key) == 2 else (None,)
    free = []
    for ident in range(first, last + 1):
        for line in lines:
            key: Key = (ident,) if line is None else (ident, line)
            if inside(key, lo, hi) and key not in rows and key not in taken:
                free.append(key)
    return free


def apply_to_model(work: Workload, table: str, deleted: Sequence[Key],
                   inserted: dict[Key, dict[str, Any]]) -> None:
    """Tell the paused workload what was changed behind its back, as its own commits do
    (``Workload._apply``): deleted keys become dead, inserted rows live, so its later updates
    and deletes find what they expect and its inserts never collide."""
    for key in deleted:
        work._rows[table].pop(key, None)
        work._live[table].discard(key)
        work._dead[table].add(key)
    for key, row in inserted.items():
        work._rows[table][key] = row
        work._live[table].add(key)
        work._dead[table].discard(key)


def change_range(pg: LocalPostgres, work: Workload, url: str, planned: list[Any],
                 next_id: int, args: argparse.Namespace) -> dict[str, Any]:
    """With the job dead and the workload paused: delete and insert rows inside the chunks the
    interrupted batch pinned. What landed of them, and what was changed. ``next_id``: the
    workload's next id when the batch was planned (rows of later ids came after its reads)."""
    chunks = [(str(table), bound(lo), bound(hi)) for _schema, table, lo, hi in planned]
    started = time.monotonic()
    landed = landed_in(url, chunks, work.tables)
    readback_seconds = time.monotonic() - started
    per_chunk: list[dict[str, Any]] = []
    with psycopg.connect(pg.dsn) as conn:
        present: list[list[Key]] = []
        for table, lo, hi in chunks:
            spec = work.tables[table]
            where, params = _where(spec, lo, hi)
            order = sql.SQL(", ").join(map(sql.Identifier, spec.primary_key))
            query = sql.SQL("SELECT {} FROM {}{} ORDER BY {}").format(
                order, sql.Identifier(NAME, table), where, order)
            present.append([tuple(r) for r in conn.execute(query, params)])
        total = sum(len(keys) for keys in present) or 1
        for (table, lo, hi), keys, got in zip(chunks, present, landed.values(), strict=True):
            spec = work.tables[table]
            share = len(keys) / total
            deletes = min(round(args.range_deletes * share), len(keys) // 10)
            inserts = min(round(args.range_inserts * share), len(keys) // 10)
            was_landed = [k for k in keys if k in got]
            not_landed = [k for k in keys if k not in got]
            unsent = sum(1 for k in not_landed if k[0] < next_id)
            half = min(deletes // 2, len(was_landed))
            gone_landed = spread(was_landed, half)
            gone_other = spread(not_landed, deletes - half)
            if len(gone_other) < deletes - half:  # few rows had not landed: more that had
                gone_landed = spread(was_landed, deletes - len(gone_other))
            gone = sorted(gone_landed + gone_other)
            new_keys = spread(_free_keys(work, spec, lo, hi, keys, set(gone)), inserts) \
                if keys else []
            rows = {key: work._values(spec, key) for key in new_keys}
            table_id = sql.Identifier(NAME, table)
            key_columns = sql.SQL(", ").join(map(sql.Identifier, spec.primary_key))
            with conn.cursor() as cur:
                cur.executemany(
                    sql.SQL("DELETE FROM {} WHERE ({}) = ({})").format(
                        table_id, key_columns,
                        sql.SQL(", ").join(sql.Placeholder() * len(spec.primary_key))),
                    gone)
                deleted = cur.rowcount
                names = [c.name for c in spec.columns]
                cur.executemany(
                    sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                        table_id, sql.SQL(", ").join(map(sql.Identifier, names)),
                        sql.SQL(", ").join(sql.Placeholder() * len(names))),
                    [[Workload._param(c, row[c.name]) for c in spec.columns]
                     for row in rows.values()])
            conn.commit()
            apply_to_model(work, table, gone, rows)
            top = max(got) if got else None
            per_chunk.append({
                "table": table, "lo": list(lo) if lo else None, "hi": list(hi) if hi else None,
                "rows_at_kill": len(keys), "rows_landed": len(was_landed),
                "rows_not_landed_of_earlier_ids": unsent,
                "deleted": len(gone), "deleted_landed": len(gone_landed),
                "deleted_not_landed": len(gone_other), "deleted_rowcount": deleted,
                "inserted": len(rows),
                "inserted_below_last_landed_key": sum(1 for k in rows if top and k < top),
                "first_key": list(keys[0]) if keys else None,
                "last_key": list(keys[-1]) if keys else None,
            })
    figures = {k: sum(c[k] for c in per_chunk) for k in (
        "rows_at_kill", "rows_landed", "rows_not_landed_of_earlier_ids", "deleted",
        "deleted_landed", "deleted_not_landed", "inserted", "inserted_below_last_landed_key")}
    return {**figures, "updated": 0, "readback_seconds": round(readback_seconds, 1),
            "chunks": per_chunk}


# -- judging ---------------------------------------------------------------------------------


def compare(model: dict[str, dict[Any, Any]], tables: dict[str, dict[Any, Any]]
            ) -> dict[str, dict[str, int]]:
    """Per table: rows in the table, and the missing / extra / wrong rows of the replay."""
    out = {}
    for name, table in tables.items():
        rebuilt = model.get(name, {})
        out[name] = {
            "rows": len(table),
            "missing": sum(1 for k in table if k not in rebuilt),
            "extra": sum(1 for k in rebuilt if k not in table),
            "wrong": sum(1 for k, row in table.items() if k in rebuilt and rebuilt[k] != row),
        }
    return out


def _histories(messages: list[dict[str, Any]], specs: dict[str, Any]
               ) -> dict[tuple[str, Any], list[str]]:
    """Per (table, key): the ops of its messages in delivery order, with ``unchanged`` lists
    and commit LSNs."""
    history: dict[tuple[str, Any], list[str]] = {}
    for m in messages:
        table = m.get("table")
        if table not in specs:
            continue
        for k in {key_of(specs[table], m.get("key")), key_of(specs[table], m.get("after"))
                  } - {None}:
            unchanged = ",".join(m.get("unchanged") or ())
            history.setdefault((table, k), []).append(
                m["op"] + (f"(unchanged {unchanged})" if unchanged else "")
                + ("" if m["op"] == "read" else f"@{m.get('commit_lsn')}"))
    return history


def explain(model: dict[str, dict[Any, Any]], tables: dict[str, dict[Any, Any]],
            messages: list[dict[str, Any]], specs: dict[str, Any]
            ) -> dict[str, list[dict[str, Any]]]:
    """For each wrong row the columns that differ, for each missing or extra row its key; with
    what the messages held for the key (whether a snapshot read had it, the ops and
    ``unchanged`` lists of its changes). Up to 20 of each."""
    history = _histories(messages, specs)
    out: dict[str, list[dict[str, Any]]] = {"wrong": [], "missing": [], "extra": []}
    for name, table in tables.items():
        rebuilt_table = model.get(name, {})
        for key, row in table.items():
            rebuilt = rebuilt_table.get(key)
            if rebuilt == row:
                continue
            entry: dict[str, Any] = {"table": name, "key": repr(key),
                                     "messages": history.get((name, key), [])[-8:]}
            if rebuilt is None:
                out["missing"].append(entry)
            else:
                entry["columns"] = {c: [repr(rebuilt.get(c))[:40], repr(row.get(c))[:40]]
                                    for c in row if rebuilt.get(c) != row.get(c)}
                out["wrong"].append(entry)
        for key in rebuilt_table.keys() - table.keys():
            out["extra"].append({"table": name, "key": repr(key),
                                 "messages": history.get((name, key), [])[-8:]})
    return {kind: entries[:20] for kind, entries in out.items()}


def duplicated(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Snapshot reads and changes delivered more than once (same message id)."""
    out: dict[str, Any] = {}
    for kind, chosen in (("snapshot", [m for m in messages if m.get("op") == "read"]),
                         ("change", [m for m in messages if m.get("op") != "read"])):
        counts = Counter(m["id"] for m in chosen)
        twice = {i for i, n in counts.items() if n > 1}
        out[f"{kind}_duplicated_ids"] = len(twice)
        out[f"{kind}_duplicate_messages"] = sum(counts[i] - 1 for i in twice)
        out[f"{kind}_duplicate_examples"] = [
            {"table": m.get("table"), "key": m.get("key"), "op": m.get("op"),
             "commit_lsn": m.get("commit_lsn"), "copies": counts[m["id"]]}
            for m in {m["id"]: m for m in chosen if m["id"] in twice}.values()][:10]
    return out


_BATCH_LINE = re.compile(r"iggy_routed batch (\d+): .*found landed by a replay (\d+), "
                         r"sent at-least-once (\d+)")
_SNAPSHOT_GONE = re.compile(r"pg_cdc snapshot: exported snapshot \S+ is gone")


def replays_in_log(text: str) -> dict[str, Any]:
    """What the sink's replays found landed, from its per-batch log lines (the job's log is
    appended across restarts), and its warnings about replays it could not decide."""
    batches = [(int(b), int(found), int(again)) for b, found, again in _BATCH_LINE.findall(text)]
    return {
        "found_landed_by_a_replay": sum(found for _, found, _ in batches),
        "sent_at_least_once": sum(again for _, _, again in batches),
        "batches_with_replay_findings": [
            {"batch": b, "found_landed": found, "sent_at_least_once": again}
            for b, found, again in batches if found or again],
        "warnings_cannot_tell_what_landed": text.count("cannot tell what landed"),
        "warnings_sent_again": text.count("are sent again (at-least-once)"),
        "exported_snapshot_gone_warnings": len(_SNAPSHOT_GONE.findall(text)),
        "batch_lines": len(batches),
    }


def run(args: argparse.Namespace, pg: LocalPostgres, broker: LocalIggy, root: Path
        ) -> dict[str, Any]:
    work = Workload(pg.dsn, NAME, seed=args.seed)
    work.setup()
    populate_seconds = populate(work, args.rows)
    log(f"populated {args.rows:,} rows in {populate_seconds:.0f}s")
    checkpoint = root / "checkpoint"
    sink = {**SINK, "max_batch_bytes": args.max_batch_bytes}
    job = PipelineJob(
        dsn=pg.dsn, slot=NAME, url=broker.url, checkpoint=checkpoint,
        log_path=root / "job.log", sink=sink,
        source={"snapshot": "initial", "include_tables": f"{NAME}\\..*", "topic_from": "table",
                "partition_key_from": "id", "default_stream": NAME,
                "snapshot_chunk_rows": str(args.chunk_rows),
                "snapshot_max_rows_per_trigger": str(args.max_rows_per_trigger)},
    )
    rng = random.Random(args.seed)
    stop = threading.Event()
    kills: list[dict[str, Any]] = []
    runs: list[RunStats] = []
    started = time.monotonic()
    count = MessageCount(broker.url, NAME)
    try:
        job.start()
        wait_until(lambda: slot_exists(pg.dsn, NAME), 300, "the slot", alive=lambda: job.running)
        writer = work.start(stop=stop, rate=args.rate)
        for number in range(args.kills):
            aim = aim_and_kill(job, checkpoint, count, work, rng, args)
            at = time.monotonic() - started
            paused = time.monotonic()
            stop.set()  # the workload pauses (between transactions) while the range changes
            runs.append(writer.join(120))
            batches = read_checkpoint(checkpoint)
            last = batches[-1]
            offset = end_offset(checkpoint, last.id)
            committed = (checkpoint / "commits" / str(last.id)).exists()
            changed = change_range(pg, work, broker.url, offset.get("planned") or [],
                                   aim["next_id_when_planned"], args)
            # mid-send: some rows of the batch had landed, and rows it had read had not (rows
            # with ids the workload gave after the planning do not count: they came later)
            mid_send = (not committed and changed["rows_landed"] > 0
                        and changed["rows_not_landed_of_earlier_ids"]
                        > max(10, changed["rows_at_kill"] // 100))
            kills.append({
                "at_seconds": round(at, 1),
                "batches_planned": len(batches),
                "batches_committed": sum(1 for b in batches if b.committed_at is not None),
                "during_snapshot": is_snapshot_batch(offset),
                "changes_committed_by_then": work.changes,
                "interrupted_batch": last.id,
                "interrupted_batch_committed": committed,
                "mid_send": mid_send,
                **aim,
                "range": changed,
                "writes_paused_seconds": round(time.monotonic() - paused, 1),
            })
            summary = {k: v for k, v in kills[-1].items() if k != "range"}
            summary["range"] = {k: v for k, v in changed.items() if k != "chunks"}
            log(f"kill {number + 1}/{args.kills}: {summary}")
            stop = threading.Event()
            writer = work.start(stop=stop, rate=args.rate)
            job.start()
        wait_until(lambda: snapshot_finished(checkpoint), 900, "the snapshot to finish",
                   alive=lambda: job.running)
        snapshot_seconds = time.monotonic() - started
        stop.set()
        runs.append(writer.join(120))
        target = flush_lsn(pg.dsn)
        wait_until(lambda: (committed_end(checkpoint) or 0) >= target, 600,
                   "the job to catch up", alive=lambda: job.running)
        exit_code = job.stop()
    finally:
        stop.set()
        if job.running:
            job.kill()
        work.close()
        count.close()
    wall = time.monotonic() - started
    log(f"snapshot done after {snapshot_seconds:.0f}s, caught up after {wall:.0f}s; reading back")
    replays = replays_in_log(job.log_path.read_text(errors="replace"))

    messages = [dict(m.change or {}, id=m.id) for m in read_back(broker.url, [NAME])]
    reads = [m for m in messages if m.get("op") == "read"]
    model, _ = replay(messages, work.tables, strict=False)
    tables = read_tables(pg.dsn, NAME, work.tables.values())
    per_table = compare(model, tables)
    totals = {k: sum(t[k] for t in per_table.values()) for k in ("rows", "missing", "extra",
                                                                  "wrong")}
    twice = duplicated(messages)
    explained = explain(model, tables, messages, work.tables)
    range_changes = sum(k["range"]["deleted"] + k["range"]["inserted"] for k in kills)
    ok = (not any(totals[k] for k in ("missing", "extra", "wrong"))
          and not twice["snapshot_duplicated_ids"]
          and len(kills) == args.kills and all(k["during_snapshot"] for k in kills)
          and exit_code == 0)
    return {
        "benchmark": "snapshot=initial under writes with kill -9 of the driver while a snapshot "
                     "batch is sent, rows deleted and inserted inside its range before the "
                     "replay; consumer state rebuilt from Iggy compared with the tables",
        "config": {"rows": args.rows, "kills": args.kills, "rate_per_second": args.rate,
                   "chunk_rows": args.chunk_rows,
                   "max_rows_per_trigger": args.max_rows_per_trigger, "seed": args.seed,
                   "range_deletes": args.range_deletes, "range_inserts": args.range_inserts,
                   "skip_batches": args.skip_batches, "kill_delay_seconds": args.kill_delay,
                   "mid_send_tries": args.mid_send_tries,
                   "sink": sink,
                   "pipeline": "python -m pg_to_iggy --master local[2], default trigger"},
        "rows_at_start": args.rows,
        "kills": kills,
        "kills_mid_send": sum(1 for k in kills if k["mid_send"]),
        "range_deleted": sum(k["range"]["deleted"] for k in kills),
        "range_deleted_landed": sum(k["range"]["deleted_landed"] for k in kills),
        "range_inserted": sum(k["range"]["inserted"] for k in kills),
        "range_updated": 0,
        "messages": len(messages),
        "snapshot_messages": len(reads),
        "snapshot_distinct_ids": len({m["id"] for m in reads}),
        **{k: v for k, v in twice.items() if not k.endswith("_examples")},
        "change_messages": len(messages) - len(reads),
        "changes_during_run": sum(r.changes for r in runs),
        "changes_in_ranges": range_changes,
        "replays": replays,
        "final_rows": totals["rows"],
        "missing": totals["missing"],
        "extra": totals["extra"],
        "wrong": totals["wrong"],
        "per_table": per_table,
        "wrong_rows": explained["wrong"],
        "missing_rows": explained["missing"],
        "extra_rows": explained["extra"],
        "duplicate_examples": twice["snapshot_duplicate_examples"]
        + twice["change_duplicate_examples"],
        "batches": len(read_checkpoint(checkpoint)),
        "snapshot_seconds": round(snapshot_seconds, 1),
        "wall_seconds": round(wall, 1),
        "populate_seconds": round(populate_seconds, 1),
        "job_exit_code": exit_code,
        "verdict": "ok" if ok else "FAILED",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--rate", type=float, default=100.0, help="changes per second")
    parser.add_argument("--chunk-rows", type=int, default=5_000)
    parser.add_argument("--max-rows-per-trigger", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--range-deletes", type=int, default=300,
                        help="rows deleted inside the interrupted batch's chunks at each kill "
                        "(at most a tenth of them)")
    parser.add_argument("--range-inserts", type=int, default=300,
                        help="rows inserted inside the interrupted batch's chunks at each kill "
                        "(at most a tenth of their rows)")
    parser.add_argument("--kill-delay", type=float, default=0.0,
                        help="kill a random 0 to this many seconds after a batch's messages are "
                        "seen landing (0: at once; a task's sends can all land within 50 ms)")
    parser.add_argument("--skip-batches", type=int, default=6,
                        help="before each kill, let 1 + random 0 to this many batches commit "
                        "after the (re)start (so kills fall in different tables)")
    parser.add_argument("--mid-send-tries", type=int, default=3,
                        help="batches that may commit before their sends are caught; then the "
                        "kill comes as soon as a batch is planned")
    parser.add_argument("--max-batch-bytes", default=MAX_BATCH_BYTES,
                        help="the sink's max_batch_bytes (its own default, 32MB, sends each "
                        "chunk's groups whole at the task's end)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-snapfaults-") as tmp, LocalPostgres() as pg:
        broker = LocalIggy(process=True, data_dir=Path(tmp) / "iggy").start()
        try:
            result = run(args, pg, broker, Path(tmp))
        finally:
            broker.stop()
    path = write_result("snapshot_faults", result)
    print(f"snapshot faults: {result['verdict']}: {result['rows_at_start']:,} rows, "
          f"{len(result['kills'])} kills during the snapshot ({result['kills_mid_send']} "
          f"mid-send; {result['range_deleted']} rows deleted, {result['range_inserted']} "
          f"inserted inside interrupted ranges), {result['messages']:,} messages; missing "
          f"{result['missing']}, extra {result['extra']}, wrong {result['wrong']} of "
          f"{result['final_rows']:,} final rows; snapshot ids twice "
          f"{result['snapshot_duplicated_ids']}; found landed by replays "
          f"{result['replays']['found_landed_by_a_replay']} -> {path}")
    return 0 if result["verdict"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
