"""Streams and topics found by their names, whatever the names read as.

The SDK's calls take a stream or topic as ``str | int`` and read text of digits as a numeric
id: ``get_topic("1", "2")`` is the topic with id 2 of the stream with id 1, whatever those are
named, and ``send_messages("1", ...)`` sends there. A name that comes from data (the sink's rows
name their destinations) must therefore never reach those calls as text. These lookups send the
name as a name (:func:`~iggy_spark.identifiers.name_identifier`, which the server looks up by
name), read back the numeric id the server gave it, and every later call is made with that id,
an ``int``, which the SDK cannot misread.

Each reply is checked to carry the name asked for, so a reply laid out otherwise than expected
fails loudly instead of handing back another stream's id. The layouts read are the installed
SDK's line's (:func:`iggy_spark.connection.sdk_line`): a stream's header is ``[id u32]
[created u64][topics u32][size u64][messages u64][name]`` on both lines, a topic's starts with
``[id u32][created u64][partitions u32]`` and has its name at
:attr:`~iggy_spark.sdk.SdkLine.topic_name_at`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from iggy_spark.connection import sdk_line
from iggy_spark.identifiers import identifier, name_identifier

if TYPE_CHECKING:
    import apache_iggy

__all__ = ["GET_STREAM", "GET_TOPIC", "FoundTopic", "NameMismatch", "stream_id", "topic"]

GET_STREAM, GET_TOPIC = 200, 300
"""Command codes of get-stream and get-topic: a reply is the header, or empty for none."""
_STREAM_NAME_AT = 32


@dataclass(frozen=True, slots=True)
class FoundTopic:
    """A topic the server holds under the name asked for."""

    id: int
    partitions_count: int


class NameMismatch(RuntimeError):
    """The server's reply names another stream or topic than the one asked for."""


def _name_at(reply: bytes, at: int) -> str | None:
    if len(reply) <= at or len(reply) < at + 1 + reply[at]:
        return None
    return reply[at + 1:at + 1 + reply[at]].decode(errors="replace")


def _checked(reply: bytes, at: int, name: str, what: str) -> None:
    found = _name_at(reply, at)
    if found != name:
        raise NameMismatch(f"the server answered for {what} {name!r} with {found!r}")


async def stream_id(client: apache_iggy.IggyClient, name: str) -> int | None:
    """The id of the stream named ``name``; ``None`` when there is none."""
    reply = await client.send_binary_request(GET_STREAM, name_identifier(name, "stream name"))
    if not reply:
        return None
    _checked(reply, _STREAM_NAME_AT, name, "stream")
    found: int = struct.unpack_from("<I", reply)[0]
    return found


async def topic(client: apache_iggy.IggyClient, stream: int, name: str) -> FoundTopic | None:
    """The topic named ``name`` in the stream with id ``stream``; ``None`` when there is none."""
    reply = await client.send_binary_request(
        GET_TOPIC, identifier(stream, "stream id") + name_identifier(name, "topic name"))
    if not reply:
        return None
    _checked(reply, sdk_line().topic_name_at, name, "topic")
    topic_id, _, partitions = struct.unpack_from("<IQI", reply)
    return FoundTopic(topic_id, partitions)
