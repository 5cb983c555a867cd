"""The local broker's state: streams, topics, partitions, message batches, consumer offsets.

Everything lives in memory. Given a data directory, every change is first written to the
:class:`~.journal.Journal` (fsynced) and only then applied, and :meth:`Store.open` rebuilds the
state by replaying the journal through the same ``_apply_*`` methods the live path uses, so a
restarted broker has exactly what it acknowledged before.

Partitions keep each batch as the bytes the producer sent, stamped with partition, base offset
and append timestamp (:func:`~.batches.stamp_batch`), plus parallel lists of base offsets and
timestamps for bisecting. A poll hands stored batches back untouched and only cuts a new batch
when a read starts or stops inside one.

Ids are numbered from 0 (streams, topics, partitions), as on the real server. Nothing expires
and no size cap is enforced: a topic's ``message_expiry`` and ``max_topic_size`` are reported
back as configured, never acted on.
"""

from __future__ import annotations

import os
import struct
import time
from bisect import bisect_left, bisect_right
from itertools import count as counter

import xxhash

from .batches import batch_location, batch_message_count, slice_batch, stamp_batch
from .codes import (
    MAX_PARTITIONS_PER_REQUEST,
    BrokerError,
    ErrorCode,
    Identifier,
    PartitioningKind,
    encode_name,
)
from .journal import Journal, RecordKind
from .replies import PartitionSummary, StreamSummary, TopicSummary
from .requests import Reader, check_topic_options, parse_options

NEVER_EXPIRE = 2**64 - 1
UNLIMITED_SIZE = 2**64 - 1
_COMPRESSION = {b"none": 1, b"gzip": 2}
_ID_PAIR = struct.Struct("<II")


def _now_micros() -> int:
    return time.time_ns() // 1000


class Partition:
    """One partition's log: stamped batches in offset order, and its consumers' offsets."""

    __slots__ = (
        "bases",
        "batches",
        "consumer_offsets",
        "created_at",
        "id",
        "next_offset",
        "size_bytes",
        "timestamps",
    )

    def __init__(self, partition_id: int, created_at: int) -> None:
        self.id = partition_id
        self.created_at = created_at
        self.batches: list[bytes | bytearray] = []
        self.bases: list[int] = []
        self.timestamps: list[int] = []
        self.next_offset = 0
        self.size_bytes = 0
        self.consumer_offsets: dict[tuple[int, int], int] = {}

    @property
    def current_offset(self) -> int:
        """Offset of the newest message, 0 while the partition is empty (as the server says)."""
        return self.next_offset - 1 if self.next_offset else 0

    def next_timestamp(self) -> int:
        """Append time for a new batch, never older than the previous one, so timestamp polls
        can bisect."""
        return max(_now_micros(), self.timestamps[-1] if self.timestamps else 0)

    def append(self, batch: bytes | bytearray) -> None:
        """Add a batch already stamped with this partition's next offset."""
        _, base_offset, base_timestamp = batch_location(batch)
        self.batches.append(batch)
        self.bases.append(base_offset)
        self.timestamps.append(base_timestamp)
        self.next_offset = base_offset + batch_message_count(batch)
        self.size_bytes += len(batch)

    def first_offset_at(self, timestamp: int) -> int | None:
        """Offset of the first message appended at or after ``timestamp`` (µs), if any."""
        index = bisect_left(self.timestamps, timestamp)
        return self.bases[index] if index < len(self.bases) else None

    def read(self, start: int, count: int) -> tuple[list[bytes | bytearray], int]:
        """Batches covering up to ``count`` messages from offset ``start``, and how many."""
        if count == 0 or start >= self.next_offset:
            return [], 0
        # The first batch starts at offset 0, so a start below next_offset always has a batch.
        index = bisect_right(self.bases, start) - 1
        chunks: list[bytes | bytearray] = []
        remaining = count
        while remaining and index < len(self.batches):
            batch = self.batches[index]
            size = batch_message_count(batch)
            skip = start - self.bases[index] if not chunks else 0
            take = min(size - skip, remaining)
            chunks.append(batch if skip == 0 and take == size else slice_batch(batch, skip, take))
            remaining -= take
            index += 1
        return chunks, count - remaining

    def summary(self) -> PartitionSummary:
        return PartitionSummary(
            self.id, self.created_at, self.current_offset, self.size_bytes, self.next_offset
        )


class Topic:
    """A topic's settings and partitions; also the round-robin cursor for Balanced sends."""

    __slots__ = (
        "_balanced",
        "compression",
        "created_at",
        "id",
        "max_topic_size",
        "message_expiry",
        "name",
        "options",
        "partitions",
        "stream_id",
    )

    def __init__(
        self, stream_id: int, topic_id: int, name: str, created_at: int, options: bytes
    ) -> None:
        self.stream_id = stream_id
        self.id = topic_id
        self.name = name
        self.created_at = created_at
        self.options = options
        settings = parse_options(options)
        self.compression = _COMPRESSION.get(settings.get(b"compression_algorithm", b""), 1)
        self.message_expiry = _u64_option(settings, b"message_expiry", NEVER_EXPIRE)
        self.max_topic_size = _u64_option(settings, b"max_topic_size", UNLIMITED_SIZE)
        self.partitions: list[Partition] = []
        self._balanced = counter()

    def partition(self, partition_id: int) -> Partition:
        if partition_id >= len(self.partitions):
            raise BrokerError(
                ErrorCode.PARTITION_NOT_FOUND,
                f"partition {partition_id} not in topic {self.name!r} "
                f"({len(self.partitions)} partitions, numbered from 0)",
            )
        return self.partitions[partition_id]

    def choose_partition(self, kind: PartitioningKind, value: bytes) -> Partition:
        """Resolve a send's partitioning the way the server does.

        Balanced is round robin per topic, MessagesKey is XXH32 of the key modulo the
        partition count, PartitionId is taken as given.
        """
        if not self.partitions:
            raise BrokerError(ErrorCode.PARTITION_NOT_FOUND, f"topic {self.name!r} has none")
        if kind is PartitioningKind.PARTITION_ID:
            return self.partition(int.from_bytes(value, "little"))
        if kind is PartitioningKind.MESSAGES_KEY:
            # The server's rule, written here apart from the sink's copy so that tests comparing
            # the two compare independent implementations.
            return self.partitions[xxhash.xxh32_intdigest(value) % len(self.partitions)]
        return self.partitions[next(self._balanced) % len(self.partitions)]

    def summary(self) -> TopicSummary:
        return TopicSummary(
            self.id, self.name, self.created_at, self.message_expiry, self.compression,
            self.max_topic_size, self.options, tuple(p.summary() for p in self.partitions),
        )


class Stream:
    """A named group of topics, looked up by id or by name."""

    __slots__ = ("created_at", "id", "name", "options", "topic_ids", "topics")

    def __init__(self, stream_id: int, name: str, created_at: int, options: bytes) -> None:
        self.id = stream_id
        self.name = name
        self.created_at = created_at
        self.options = options
        self.topics: dict[int, Topic] = {}
        self.topic_ids: dict[str, int] = {}

    def find_topic(self, ident: Identifier) -> Topic | None:
        topic_id = self.topic_ids.get(ident) if isinstance(ident, str) else ident
        return self.topics.get(topic_id) if topic_id is not None else None

    def topic(self, ident: Identifier) -> Topic:
        topic = self.find_topic(ident)
        if topic is None:
            code = (
                ErrorCode.TOPIC_NAME_NOT_FOUND if isinstance(ident, str)
                else ErrorCode.TOPIC_ID_NOT_FOUND
            )
            raise BrokerError(code, f"topic {ident!r} not in stream {self.name!r}")
        return topic

    def summary(self) -> StreamSummary:
        return StreamSummary(
            self.id, self.name, self.created_at, self.options,
            tuple(topic.summary() for topic in self.topics.values()),
        )


class Store:
    """All streams; the single writer of the journal. Not thread-safe: one event loop owns it."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal
        self.streams: dict[int, Stream] = {}
        self.stream_ids: dict[str, int] = {}

    @classmethod
    def open(cls, data_dir: str | os.PathLike[str] | None) -> Store:
        """An in-memory store, or one persisted in ``data_dir`` and rebuilt from it."""
        if data_dir is None:
            return cls()
        journal, records = Journal.open(data_dir)
        store = cls(journal)
        replay = {
            RecordKind.STREAM: store._apply_stream,
            RecordKind.TOPIC: store._apply_topic,
            RecordKind.PARTITIONS: store._apply_partitions,
            RecordKind.BATCH: store._apply_batch,
            RecordKind.CONSUMER_OFFSET: store._apply_consumer_offset,
            RecordKind.TOPIC_DELETED: store._apply_topic_deleted,
            RecordKind.CONSUMER_OFFSET_DELETED: store._apply_consumer_offset_deleted,
        }
        for kind, payload in records:
            replay[kind](payload)
        return store

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()

    def _record(self, kind: RecordKind, *parts: bytes | bytearray | memoryview) -> None:
        if self.journal is not None:
            self.journal.append(kind, *parts)

    # -- lookups ------------------------------------------------------------------------------

    def find_stream(self, ident: Identifier) -> Stream | None:
        stream_id = self.stream_ids.get(ident) if isinstance(ident, str) else ident
        return self.streams.get(stream_id) if stream_id is not None else None

    def find_topic(self, stream: Identifier, topic: Identifier) -> Topic | None:
        found = self.find_stream(stream)
        return found.find_topic(topic) if found is not None else None

    def stream(self, ident: Identifier) -> Stream:
        stream = self.find_stream(ident)
        if stream is None:
            code = (
                ErrorCode.STREAM_NAME_NOT_FOUND if isinstance(ident, str)
                else ErrorCode.STREAM_ID_NOT_FOUND
            )
            raise BrokerError(code, f"stream {ident!r} does not exist")
        return stream

    def topic(self, stream: Identifier, topic: Identifier) -> Topic:
        return self.stream(stream).topic(topic)

    # -- changes: validate, journal, apply ------------------------------------------------------

    def create_stream(self, name: str, options: bytes) -> Stream:
        if name in self.stream_ids:
            raise BrokerError(ErrorCode.STREAM_NAME_ALREADY_EXISTS, f"stream {name!r} exists")
        parse_options(options)
        stream_id = max(self.streams, default=-1) + 1
        payload = struct.pack("<IQ", stream_id, _now_micros()) + encode_name(name) + options
        self._record(RecordKind.STREAM, payload)
        self._apply_stream(payload)
        return self.streams[stream_id]

    def create_topic(
        self, stream_ident: Identifier, name: str, partitions_count: int, options: bytes
    ) -> Topic:
        found = self.find_stream(stream_ident)
        if found is None:  # the server answers StreamIdNotFound here, whatever the identifier
            raise BrokerError(ErrorCode.STREAM_ID_NOT_FOUND, f"stream {stream_ident!r} not found")
        stream = found
        if name in stream.topic_ids:
            raise BrokerError(
                ErrorCode.TOPIC_NAME_ALREADY_EXISTS, f"topic {name!r} exists in {stream.name!r}"
            )
        _check_partitions_count(partitions_count, allow_zero=True)
        check_topic_options(parse_options(options))
        topic_id = max(stream.topics, default=-1) + 1
        payload = (
            struct.pack("<IIQI", stream.id, topic_id, _now_micros(), partitions_count)
            + encode_name(name) + options
        )
        self._record(RecordKind.TOPIC, payload)
        self._apply_topic(payload)
        return stream.topics[topic_id]

    def create_partitions(self, stream: Identifier, topic: Identifier, count: int) -> Topic:
        found = self.topic(stream, topic)
        _check_partitions_count(count, allow_zero=False)
        payload = struct.pack("<IIIQ", found.stream_id, found.id, count, _now_micros())
        self._record(RecordKind.PARTITIONS, payload)
        self._apply_partitions(payload)
        return found

    def append(
        self, topic: Topic, partition: Partition, batch: bytearray, message_checksums: bytes
    ) -> int:
        """Stamp a verified batch, make it durable, append it; return its base offset."""
        base_offset = partition.next_offset
        stamp_batch(
            batch, partition.id, base_offset, partition.next_timestamp(), message_checksums
        )
        self._record(RecordKind.BATCH, _ID_PAIR.pack(topic.stream_id, topic.id), batch)
        partition.append(batch)
        return base_offset

    def store_consumer_offset(
        self, topic: Topic, partition: Partition, consumer: tuple[int, int], offset: int
    ) -> None:
        payload = struct.pack(
            "<IIIBIQ", topic.stream_id, topic.id, partition.id, consumer[0], consumer[1], offset
        )
        self._record(RecordKind.CONSUMER_OFFSET, payload)
        self._apply_consumer_offset(payload)

    def delete_consumer_offset(
        self, topic: Topic, partition: Partition, consumer: tuple[int, int]
    ) -> None:
        """Forget a stored offset; :class:`BrokerError` (consumer offset not found, as the
        server answers) when there is none."""
        if consumer not in partition.consumer_offsets:
            raise BrokerError(ErrorCode.CONSUMER_OFFSET_NOT_FOUND,
                              f"no offset stored for consumer {consumer[1]}")
        payload = struct.pack("<IIIBI", topic.stream_id, topic.id, partition.id, *consumer)
        self._record(RecordKind.CONSUMER_OFFSET_DELETED, payload)
        self._apply_consumer_offset_deleted(payload)

    # -- appliers, shared by the live path and journal replay --------------------------------

    def delete_topic(self, stream_ident: Identifier, topic_ident: Identifier) -> None:
        """Drop a topic with its partitions and messages (an operator's ``delete_topic``)."""
        topic = self.topic(stream_ident, topic_ident)
        payload = _ID_PAIR.pack(topic.stream_id, topic.id)
        self._record(RecordKind.TOPIC_DELETED, payload)
        self._apply_topic_deleted(payload)

    def _apply_stream(self, payload: bytes) -> None:
        reader = Reader(payload)
        stream_id, created_at = reader.u32("stream id"), reader.u64("created at")
        name = reader.name("stream name")
        self.streams[stream_id] = Stream(stream_id, name, created_at, bytes(reader.rest()))
        self.stream_ids[name] = stream_id

    def _apply_topic(self, payload: bytes) -> None:
        reader = Reader(payload)
        stream = self.stream(reader.u32("stream id"))
        topic_id, created_at = reader.u32("topic id"), reader.u64("created at")
        partitions_count = reader.u32("partitions count")
        name = reader.name("topic name")
        topic = Topic(stream.id, topic_id, name, created_at, bytes(reader.rest()))
        topic.partitions.extend(Partition(i, created_at) for i in range(partitions_count))
        stream.topics[topic_id] = topic
        stream.topic_ids[name] = topic_id

    def _apply_partitions(self, payload: bytes) -> None:
        stream_id, topic_id, count, created_at = struct.unpack("<IIIQ", payload)
        topic = self.topic(stream_id, topic_id)
        first = len(topic.partitions)
        topic.partitions.extend(Partition(i, created_at) for i in range(first, first + count))

    def _apply_batch(self, payload: bytes) -> None:
        stream_id, topic_id = _ID_PAIR.unpack_from(payload)
        batch = payload[_ID_PAIR.size:]
        partition_id = batch_location(batch)[0]
        self.topic(stream_id, topic_id).partition(partition_id).append(batch)

    def _apply_topic_deleted(self, payload: bytes) -> None:
        stream_id, topic_id = _ID_PAIR.unpack(payload)
        stream = self.stream(stream_id)
        del stream.topic_ids[stream.topics.pop(topic_id).name]

    def _apply_consumer_offset(self, payload: bytes) -> None:
        stream_id, topic_id, partition_id, kind, consumer, offset = struct.unpack(
            "<IIIBIQ", payload
        )
        partition = self.topic(stream_id, topic_id).partition(partition_id)
        partition.consumer_offsets[(kind, consumer)] = offset

    def _apply_consumer_offset_deleted(self, payload: bytes) -> None:
        stream_id, topic_id, partition_id, kind, consumer = struct.unpack("<IIIBI", payload)
        partition = self.topic(stream_id, topic_id).partition(partition_id)
        partition.consumer_offsets.pop((kind, consumer), None)


def _check_partitions_count(count: int, *, allow_zero: bool) -> None:
    if count > MAX_PARTITIONS_PER_REQUEST or (count == 0 and not allow_zero):
        raise BrokerError(
            ErrorCode.TOO_MANY_PARTITIONS,
            f"partitions count {count} outside {0 if allow_zero else 1}.."
            f"{MAX_PARTITIONS_PER_REQUEST}",
        )


def _u64_option(values: dict[bytes, bytes], key: bytes, default: int) -> int:
    raw = values.get(key)
    return int.from_bytes(raw, "little") if raw is not None and len(raw) == 8 else default
