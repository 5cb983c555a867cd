"""A consumer of ``snapshot=initial`` messages: rebuild the tables from them.

``strict`` replay is the exact-consistency check (every change applies to exactly the state the
snapshot plus earlier changes left: an insert never meets an existing row, an update or delete
always finds one); lenient replay is upsert semantics, what a consumer of a resumed snapshot
relies on. Used by the snapshot tests and by ``bench.bench_snapshot_faults``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from connector_common.lsn import parse_lsn
from iggy_spark_testing.records import Key, Row, TableSpec

__all__ = ["Message", "in_stream_order", "ordered", "replay"]

Message = dict[str, Any]
READ = "read"


def _json(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str) else value


def _pk(spec: TableSpec, values: Mapping[str, Any] | None) -> Key | None:
    if values is None or any(k not in values for k in spec.primary_key):
        return None
    return spec.key_of(values)


def ordered(messages: Iterable[Message]) -> list[Message]:
    """A consumer's order: the snapshot's rows (as delivered), then the changes in commit order,
    each change once (by id, as Iggy consumers deduplicate)."""
    reads, changes, seen = [], [], set()
    for message in messages:
        if message["op"] == READ:
            reads.append(message)
        elif message["id"] not in seen:
            seen.add(message["id"])
            changes.append(message)
    changes.sort(key=lambda m: (parse_lsn(m["commit_lsn"]), int(m["seq"])))
    return reads + changes


def in_stream_order(messages: Iterable[Message]) -> list[Message]:
    """A consumer's order when ``read`` rows come in the middle of the stream (a backfill):
    every message once (by id) in commit order, a chunk's rows at their marker's position."""
    unique = list({m["id"]: m for m in reversed(list(messages))}.values())[::-1]
    return sorted(unique, key=lambda m: (parse_lsn(m["commit_lsn"]),
                                         -1 if m["seq"] is None else int(m["seq"])))


def replay(
    messages: Sequence[Message], specs: Mapping[str, TableSpec], *, strict: bool,
    order: Callable[[Iterable[Message]], list[Message]] = ordered,
) -> tuple[dict[str, dict[Key, Row]], list[str]]:
    """The tables the messages rebuild (in ``order``, by default :func:`ordered`), and with
    ``strict`` every change that did not apply to exactly the state before it."""
    model: dict[str, dict[Key, Row]] = {name: {} for name in specs}
    problems: list[str] = []
    for message in order(messages):
        spec = specs[message["table"]]
        rows = model[spec.name]
        op = message["op"]
        after = _json(message.get("after"))
        if op == "truncate":
            rows.clear()
            continue
        old_key = _pk(spec, _json(message.get("key")))
        old = rows.pop(old_key, None) if old_key is not None and op != READ else None
        if strict and op in ("update", "delete") and old is None:
            problems.append(f"{op} of {spec.name} {old_key} missing from the snapshot")
        if op == "delete":
            continue
        row = dict(after or {})
        for name in message.get("unchanged") or ():
            row[name] = (old or {}).get(name)
        new_key = _pk(spec, row)
        assert new_key is not None, message
        if strict and new_key in rows:
            problems.append(f"{op} of {spec.name} {new_key} meets a row already there")
        rows[new_key] = row
    return model, problems
