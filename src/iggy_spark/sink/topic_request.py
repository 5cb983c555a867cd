"""The create-topic request, laid out by the sink instead of ``IggyClient.create_topic``.

The ``apache-iggy`` 0.9.0 wheel's ``create_topic`` always adds the options ``durability`` and
``consumer_offset_durability``, and an Iggy server whose option catalog predates them (the
apache/iggy ``0.9.0-edge.5`` server, see the compatibility notes in the docs) refuses the whole
request with ``UnsupportedOptionKey`` (4041): the wheel cannot create a topic there at all.
The sink sends only what it sets (partition count, message expiry, maximum size, segment size),
each left out when the server's default applies, so every server of the 0.9 protocol accepts it.

The body is the wheel's own layout (the server reads it, the SDK frames it and raises the
server's error, e.g. *already exists*, exactly as for its own ``create_topic``):
``[stream identifier][partitions_count u32][name: len u8, utf8][options]``, where the options
are ``[kind u8][len u32][bytes]`` key/value pairs in key byte order, keys strings (kind 2) and
the values unsigned 64-bit integers (kind 12: microseconds of expiry, bytes of sizes;
``u64::MAX`` means never / unlimited).
"""

from __future__ import annotations

import struct
from datetime import timedelta
from typing import TYPE_CHECKING

from iggy_spark.identifiers import identifier, name_field

if TYPE_CHECKING:
    import apache_iggy

    from iggy_spark.sink.options import TopicDefaults

__all__ = ["CREATE_TOPIC", "create_topic", "encode_create_topic"]

CREATE_TOPIC = 302
"""Command code of create-topic; the SDK maps it to the replicated metadata operation."""

_STRING_KIND, _UINT64_KIND = 2, 12
_NEVER = 2**64 - 1


def _field(kind: int, value: bytes) -> bytes:
    return struct.pack("<BI", kind, len(value)) + value


def _u64_options(values: dict[str, int]) -> bytes:
    return b"".join(
        _field(_STRING_KIND, key.encode()) + _field(_UINT64_KIND, struct.pack("<Q", value))
        for key, value in sorted(values.items())
    )


def encode_create_topic(stream: str | int, name: str, defaults: TopicDefaults) -> bytes:
    """The create-topic body for topic ``name`` of stream ``stream`` with ``defaults``; the
    stream as the SDK's calls take it (an ``int`` is its id, and so is text of digits)."""
    options: dict[str, int] = {}
    if defaults.message_expiry == "never":
        options["message_expiry"] = _NEVER
    elif isinstance(defaults.message_expiry, timedelta):
        options["message_expiry"] = defaults.message_expiry // timedelta(microseconds=1)
    if defaults.max_size == "unlimited":
        options["max_topic_size"] = _NEVER
    elif isinstance(defaults.max_size, int):
        options["max_topic_size"] = defaults.max_size
    if defaults.segment_size is not None:
        options["segment_size"] = defaults.segment_size
    return (
        identifier(stream, "stream name")
        + struct.pack("<I", defaults.partitions_count) + name_field(name, "topic name")
        + _u64_options(options)
    )


async def create_topic(
    client: apache_iggy.IggyClient, stream: str | int, name: str, defaults: TopicDefaults
) -> None:
    """Create topic ``name`` in ``stream``; raises the SDK's error as ``create_topic`` would."""
    await client.send_binary_request(CREATE_TOPIC, encode_create_topic(stream, name, defaults))
