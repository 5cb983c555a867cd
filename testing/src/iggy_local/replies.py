"""Values into reply bodies: results and rejections, login, the cluster roster, streams and
topics, sends, polls and consumer offsets."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .codes import U32, ErrorCode, encode_name
from .dialects import Dialect

RESULT_OK = U32.pack(0)


def result_rejection(code: ErrorCode) -> bytes:
    """A committed rejection in a result-framed reply: one ``{index 0, code}`` entry."""
    return struct.pack("<III", 1, 0, code)


PARTITION_CONTEXT = bytes(24)
"""A partition's context on 0.10 (incarnation, owner generation, metadata op): always zero,
the one incarnation of a partition of a single node without consumer groups."""


def encode_login_reply(user_id: int, session: int, dialect: Dialect) -> bytes:
    """The result-framed login reply; it tells the client the server's protocol and version."""
    return (
        RESULT_OK + struct.pack("<IQI", user_id, session, dialect.protocol)
        + encode_name(dialect.server_version)
    )


def encode_cluster_metadata(ip: str, tcp_port: int, dialect: Dialect) -> bytes:
    """A one-node roster: the node is the healthy leader, so the SDK never redirects."""

    def text(value: str) -> bytes:
        raw = value.encode()
        return U32.pack(len(raw)) + raw

    return (
        text("iggy-spark-local") + U32.pack(1) + (b"\0" if dialect.options_metadata else b"")
        + text("local-0") + text(ip)
        + struct.pack("<HHHHBB", tcp_port, 0, 0, 0, 0, 0)
    )


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    id: int
    created_at: int
    current_offset: int
    size_bytes: int
    messages_count: int


@dataclass(frozen=True, slots=True)
class TopicSummary:
    id: int
    name: str
    created_at: int
    message_expiry: int
    compression: int
    max_topic_size: int
    options: bytes
    partitions: tuple[PartitionSummary, ...]


@dataclass(frozen=True, slots=True)
class StreamSummary:
    id: int
    name: str
    created_at: int
    options: bytes
    topics: tuple[TopicSummary, ...]


def _prefixed(block: bytes) -> bytes:
    return U32.pack(len(block)) + block


def encode_topic_header(topic: TopicSummary, dialect: Dialect) -> bytes:
    """TopicHeader: fixed fields, name, options, derived options (none). On 0.10 the expiry,
    compression and size settings are no fixed fields: they travel in the options."""
    size = sum(p.size_bytes for p in topic.partitions)
    messages = sum(p.messages_count for p in topic.partitions)
    count = len(topic.partitions)
    fixed = struct.pack("<IQIQQ", topic.id, topic.created_at, count, size, messages) if (
        dialect.options_metadata) else struct.pack(
            "<IQIQBQQQ", topic.id, topic.created_at, count, topic.message_expiry,
            topic.compression, topic.max_topic_size, size, messages)
    return fixed + encode_name(topic.name) + _prefixed(topic.options) + _prefixed(b"")


def encode_topic(topic: TopicSummary, dialect: Dialect) -> bytes:
    """TopicHeader followed by one record per partition (get_topic, create_topic)."""
    context = PARTITION_CONTEXT if dialect.partition_context else b""
    return encode_topic_header(topic, dialect) + b"".join(
        struct.pack(
            "<IQIQQQ", p.id, p.created_at, 1, p.current_offset, p.size_bytes, p.messages_count
        ) + context
        for p in topic.partitions
    )


def encode_stream(stream: StreamSummary, dialect: Dialect, *, with_topics: bool) -> bytes:
    """StreamResponse, optionally followed by its topic headers (get_stream); on 0.10 with a
    derived-options block (none)."""
    partitions = [p for topic in stream.topics for p in topic.partitions]
    head = struct.pack(
        "<IQIQQ", stream.id, stream.created_at, len(stream.topics),
        sum(p.size_bytes for p in partitions), sum(p.messages_count for p in partitions),
    ) + encode_name(stream.name) + _prefixed(stream.options)
    if dialect.options_metadata:
        head += _prefixed(b"")
    if not with_topics:
        return head
    return head + b"".join(encode_topic_header(topic, dialect) for topic in stream.topics)


def encode_partition_route(partitions_count: int) -> bytes:
    """``[incarnation u64][metadata_op u64][view u32][partitions_count u32][primary u8]``: the
    partition's zero context (:data:`PARTITION_CONTEXT`) on the one node, which is primary."""
    return struct.pack("<QQIIB", 0, 0, 0, partitions_count, 0)


def encode_send_reply(stream_id: int, topic_id: int, partition_id: int, base_offset: int) -> bytes:
    return struct.pack("<IIIIQ", 1, stream_id, topic_id, partition_id, base_offset)


def encode_poll_header(
    partition_id: int, current_offset: int, messages_count: int, dialect: Dialect
) -> bytes:
    """``[partition u32][current_offset u64][count u32]``, and on 0.10 the partition context
    the poll was served under."""
    context = PARTITION_CONTEXT if dialect.partition_context else b""
    return struct.pack("<IQI", partition_id, current_offset, messages_count) + context


def encode_consumer_offset(partition_id: int, current_offset: int, stored_offset: int) -> bytes:
    return struct.pack("<IQQ", partition_id, current_offset, stored_offset)
