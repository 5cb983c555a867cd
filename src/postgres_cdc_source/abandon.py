"""Skip a stuck micro-batch: the one data-loss path, for a long outage downstream.

While the sink cannot deliver (Iggy unreachable for hours), the batch Spark planned last is
never committed: every restart replays it, the slot never moves, and Postgres keeps every WAL
segment since, until its disk fills. This command lets an operator choose to lose that batch
instead::

    PG_CDC_DSN="host=db dbname=shop user=cdc" python -m postgres_cdc_source.abandon \\
        --checkpoint /checkpoints/shop_orders --slot shop_orders

With the query **stopped**, it finds the last batch in ``<checkpoint>/offsets/`` that has no
``commits/`` entry, logs exactly what it skips (batch id, LSN range, and with ``--slot`` the
number of changes, counted by decoding the range exactly as the query would), and writes the
batch's ``commits/N`` file as Spark would have, so the restarted query plans the next batch
from the end of the skipped one. With ``--slot`` it also advances the slot to that end at once,
releasing the WAL without waiting for the restart; the order (commit record first, then the
slot) keeps the slot from ever being ahead of the checkpoint. The DSN comes from
``$PG_CDC_DSN`` unless ``--dsn`` gives one: a password on the command line shows in every
process listing. Every abandon is appended to
``<checkpoint>/pg_cdc_abandoned.jsonl``.

The checkpoint may be a local path or a remote URI (``s3a://``, ``s3://``, ``gs://``,
``hdfs://``, ``abfs://``), opened with ``pyarrow.fs``: production keeps checkpoints in object
stores. An object is written whole by one PUT, so a remote ``commits/N`` is never half there
either. Credentials and endpoint come from the store's usual environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...), never from the command line.

Spark's log files: ``offsets/N`` is ``v1``, a batch-metadata JSON line, then one offset per
source (``{"lsn": "0/1534DC8"}`` for ``pg_cdc``); ``commits/N`` is ``v1`` and a JSON line
(``{"nextBatchWatermarkMs":0}``). Both are written whole (temporary file, rename).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from connector_common.checkpoints import local_checkpoint
from connector_common.lsn import format_lsn
from connector_common.options import option_pair
from postgres_cdc_source import connections
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.replication import positions, slots
from postgres_cdc_source.stream.offset import StreamOffset

if TYPE_CHECKING:
    from pyarrow import fs

__all__ = ["Abandoned", "abandon_batch", "main"]

log = logging.getLogger("postgres_cdc_source")

RECORD_FILE = "pg_cdc_abandoned.jsonl"
DSN_ENV = "PG_CDC_DSN"
"""The DSN's environment variable, as ``pg-cdc-backfill`` and ``pg-to-iggy`` read it."""
_COMMIT_TEXT = 'v1\n{"nextBatchWatermarkMs":0}'


@dataclass(frozen=True)
class Abandoned:
    """What was skipped: batch ``batch_id``, changes with commit LSN in ``(start, end]``."""

    batch_id: int
    start: str | None
    end: str
    changes: int | None
    at: float

    def describe(self) -> str:
        count = "an uncounted number of" if self.changes is None else str(self.changes)
        return (f"abandoned pg_cdc batch {self.batch_id}: LSN ({self.start or 'slot start'}, "
                f"{self.end}], {count} changes; they will never reach the sink")


class _Checkpoint:
    """The few file operations abandon needs, on a local path or through ``pyarrow.fs``."""

    def __init__(self, location: str) -> None:
        self.local = local_checkpoint(location)
        self.remote: fs.FileSystem | None = None
        if self.local is not None:
            self.root, self.name = str(self.local), str(self.local)
            return
        from pyarrow import fs

        parts = urlsplit(location)

        scheme = "s3" if parts.scheme in ("s3a", "s3n") else parts.scheme  # Spark's names
        self.remote, self.root = fs.FileSystem.from_uri(
            f"{scheme}://{parts.netloc}{parts.path}")
        self.name = f"{parts.scheme}://{parts.netloc}{parts.path}"  # no query: it may hold keys

    def path(self, *names: str) -> str:
        return "/".join([self.root.rstrip("/"), *names])

    def logs(self, directory: str) -> dict[int, str]:
        """Batch id -> path of the files of ``offsets/`` or ``commits/``."""
        if self.local is not None:
            folder = self.local / directory
            names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
        else:
            from pyarrow import fs

            assert self.remote is not None
            infos = self.remote.get_file_info(fs.FileSelector(self.path(directory),
                                                              allow_not_found=True))
            names = [i.base_name for i in infos if i.type == fs.FileType.File]
        return {int(n): self.path(directory, n) for n in names if n.isdigit()}

    def read_text(self, path: str) -> str:
        if self.remote is None:
            return Path(path).read_text()
        with self.remote.open_input_stream(path) as f:
            return bytes(f.read()).decode()

    def exists(self, path: str) -> bool:
        if self.remote is None:
            return Path(path).exists()
        from pyarrow import fs

        return bool(self.remote.get_file_info(path).type != fs.FileType.NotFound)

    def write_whole(self, path: str, text: str) -> None:
        """Write ``path`` so that a reader sees the old version or the new one, never half."""
        if self.remote is not None:
            with self.remote.open_output_stream(path) as f:  # one object, visible at close
                f.write(text.encode())
            return
        target = Path(path)
        target.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def append_line(self, path: str, line: str) -> None:
        """Append one line (an object store cannot append: the object is written anew)."""
        if self.remote is None:
            with open(path, "a") as f:
                f.write(line + "\n")
            return
        before = self.read_text(path) if self.exists(path) else ""
        self.write_whole(path, before + line + "\n")


def _end_lsn(checkpoint: _Checkpoint, offsets_file: str) -> int:
    """The ``pg_cdc`` end offset of one ``offsets/N`` file (its only source)."""
    lines = checkpoint.read_text(offsets_file).splitlines()
    if len(lines) != 3:
        raise ValueError(f"{offsets_file} has {len(lines) - 2} source offsets; abandon works "
                         "for queries with one pg_cdc source")
    return StreamOffset.from_json(json.loads(lines[2])).lsn


def abandon_batch(
    checkpoint: str | os.PathLike[str],
    source_options: Mapping[str, str] | None = None,
) -> Abandoned:
    """Mark the stuck batch of a stopped query as committed, without delivering it.

    ``source_options`` (the query's ``pg_cdc`` options: ``dsn``, ``slot`` and any filters)
    let it count the skipped changes and advance the slot now. Raises :class:`ValueError`
    when the checkpoint has no uncommitted batch.
    """
    root = _Checkpoint(os.fspath(checkpoint))
    offsets, commits = root.logs("offsets"), root.logs("commits")
    if not offsets:
        raise ValueError(f"{root.name} has no planned batch (no offsets/ files): nothing to "
                         "abandon")
    batch_id = max(offsets)
    if batch_id in commits:
        raise ValueError(f"batch {batch_id}, the last planned one, is committed: no batch is "
                         "stuck; restart the query")
    end = _end_lsn(root, offsets[batch_id])
    start = _end_lsn(root, offsets[batch_id - 1]) if batch_id - 1 in offsets else None
    changes = None
    options: CdcOptions | None = None
    if source_options is not None:
        options = CdcOptions.from_options(source_options)
        changes = _count(options, start, end)
    record = Abandoned(batch_id, None if start is None else format_lsn(start), format_lsn(end),
                       changes, time.time())
    log.warning("%s", record.describe())
    root.write_whole(root.path("commits", str(batch_id)), _COMMIT_TEXT)
    if options is not None:
        with connections.connect(options) as conn:
            positions.advance(conn, options.slot, end)
    root.append_line(root.path(RECORD_FILE), json.dumps(asdict(record)))
    return record


def _count(options: CdcOptions, start: int | None, end: int) -> int:
    """Changes the query would have produced for ``(start, end]``: decoded, filtered, counted.

    Decoding peeks; it never consumes. Without a recorded start (the query's first batch) the
    range starts at the slot's confirmed position, which nothing has moved since.
    """
    from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader

    if start is None:
        with connections.connect(options) as conn:
            state = slots.slot_state(conn, options.slot)
        if state is None:
            raise ValueError(f"replication slot {options.slot!r} does not exist")
        start = state.confirmed_flush
    reader = PgCdcStreamReader(options)
    return sum(batch.num_rows for batch in reader.read(CdcPartition(start, end)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m postgres_cdc_source.abandon",
        description="Skip the stuck micro-batch of a STOPPED pg_cdc query. Its changes are "
        "lost for the sink: use only when a long outage would otherwise fill Postgres's disk "
        "with WAL.",
    )
    parser.add_argument("--checkpoint", required=True,
                        help="the query's checkpointLocation: a path or a URI (s3a://, gs://, "
                        "hdfs://, abfs://; credentials from the environment)")
    parser.add_argument("--dsn", help=f"Postgres conninfo or URI of the primary, to count the "
                        f"skipped changes and advance the slot now (default: ${DSN_ENV}, "
                        "which keeps a password out of the process listing)")
    parser.add_argument("--slot", help=f"the query's slot (with --dsn or ${DSN_ENV})")
    parser.add_argument("--source", action="append", default=[], type=option_pair,
                        metavar="OPTION=VALUE",
                        help="another pg_cdc option of the query (plugin, include_tables...)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s "
                        "%(message)s")
    if args.dsn and not args.slot:
        parser.error("--dsn needs --slot")
    source: dict[str, str] | None = None
    if args.slot:  # $PG_CDC_DSN without --slot leaves the slot alone, as before
        dsn = args.dsn or os.environ.get(DSN_ENV)
        if not dsn:
            parser.error(f"--slot needs --dsn or ${DSN_ENV}")
        source = {"dsn": dsn, "slot": args.slot, **dict(args.source)}
    try:
        record = abandon_batch(args.checkpoint, source)
    except ValueError as exc:
        print(f"abandon: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the checkpoint's store refused or is unreachable
        print(f"abandon: cannot read or write the checkpoint: {exc}", file=sys.stderr)
        return 1
    print(record.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
