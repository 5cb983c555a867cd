"""Append-only record log that lets a restarted local broker come back with its data.

One file, ``broker.log``, in the data directory. Each record is ``[payload_len u32][kind u8]
[xxh3-64 of payload u64][payload]``, written with one ``write`` and made durable with ``fsync``
before :meth:`Journal.append` returns, so the broker acknowledges nothing the disk does not
hold. What a payload means is the store's business (:mod:`.storage`); the journal only frames,
checksums and replays.

A crash can leave a torn last record. :meth:`Journal.open` replays every intact record, cuts
the file at the first damaged one (nothing after it was ever acknowledged) and appends from
there.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path

import xxhash

log = logging.getLogger(__name__)

FILE_NAME = "broker.log"
_RECORD = struct.Struct("<IBQ")


class RecordKind(IntEnum):
    STREAM = 1
    TOPIC = 2
    PARTITIONS = 3
    BATCH = 4
    CONSUMER_OFFSET = 5
    TOPIC_DELETED = 6
    CONSUMER_OFFSET_DELETED = 7


_KINDS = frozenset(RecordKind)


class Journal:
    """An fsynced append-only log; open it with :meth:`open`, which also replays it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._size = os.fstat(fd).st_size

    @classmethod
    def open(
        cls, data_dir: str | os.PathLike[str]
    ) -> tuple[Journal, list[tuple[RecordKind, bytes]]]:
        """Open (or create) the log in ``data_dir``; return it with every intact record."""
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / FILE_NAME
        existed = path.exists()
        records = list(_read_records(path)) if existed else []
        intact = sum(_RECORD.size + len(payload) for _, payload in records)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if existed and os.fstat(fd).st_size != intact:
            log.warning("%s: dropping a torn tail after byte %d", path, intact)
            os.ftruncate(fd, intact)
            os.fsync(fd)
        if not existed:
            # The new directory entry must be durable too, or a crash loses the whole file.
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return cls(path, fd), records

    def append(self, kind: RecordKind, *parts: bytes | bytearray | memoryview) -> None:
        """Write one record made of ``parts`` and return once it is on stable storage."""
        digest = xxhash.xxh3_64()
        for part in parts:
            digest.update(part)
        size = sum(len(part) for part in parts)
        data = memoryview(b"".join([_RECORD.pack(size, kind, digest.intdigest()), *parts]))
        try:
            remaining = data
            while remaining:
                remaining = remaining[os.write(self._fd, remaining):]
            os.fsync(self._fd)
        except OSError:
            # Never leave a torn record mid-log: replay stops at the first one, which would
            # hide every record appended after it.
            os.ftruncate(self._fd, self._size)
            raise
        self._size += len(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _read_records(path: Path) -> Iterator[tuple[RecordKind, bytes]]:
    with path.open("rb") as file:
        while True:
            head = file.read(_RECORD.size)
            if len(head) < _RECORD.size:
                return
            size, kind, checksum = _RECORD.unpack(head)
            payload = file.read(size)
            if (
                len(payload) != size
                or xxhash.xxh3_64_intdigest(payload) != checksum
                or kind not in _KINDS
            ):
                return
            yield RecordKind(kind), payload
