"""The Iggy TCP protocol's vocabulary, the same on both server lines the broker speaks
(:mod:`.dialects` holds what differs): sizes, the codes of commands, operations, reads,
errors and evictions, the kinds request bodies carry, the little-endian integers and names
every body is made of, and the broker's two exceptions.

The layouts follow ``core/binary_protocol`` of apache/iggy; where the wheel disagreed, the wheel
won. Like the other codec modules (:mod:`.frames`, :mod:`.requests`, :mod:`.replies`,
:mod:`.batches`) this one does no I/O, so the server stays a thin loop around them and every
rule is testable on its own.
"""

from __future__ import annotations

import struct
from enum import IntEnum

HEADER_SIZE = 256
# Large enough for any batch the SDK builds (it caps a send at 1,000,000 messages of modest
# size), small enough that a garbage size field cannot make the broker allocate gigabytes.
MAX_FRAME_SIZE = 256 * 1024 * 1024
MAX_PARTITIONS_PER_REQUEST = 1000

BATCH_HEADER_SIZE = 256
MESSAGE_HEADER_SIZE = 48


class Command(IntEnum):
    """Frame kinds (header byte 60) the client boundary uses."""

    REQUEST = 5
    REPLY = 8
    EVICTION = 13


class Operation(IntEnum):
    """Operation byte (header byte 176) of the requests the broker implements."""

    REGISTER = 1
    NON_REPLICATED = 2
    LOGOUT = 3
    CREATE_STREAM = 128
    CREATE_TOPIC = 132
    DELETE_TOPIC = 134
    CREATE_PARTITIONS = 136
    SEND_MESSAGES = 160
    STORE_CONSUMER_OFFSET = 161
    DELETE_CONSUMER_OFFSET = 162


class ReadCode(IntEnum):
    """Command codes carried at header byte 196 by non-replicated requests."""

    PING = 1
    GET_CLUSTER_METADATA = 12
    POLL_MESSAGES = 100
    GET_PARTITION_ROUTE = 105
    """0.10 only: where a partition lives, asked before its first send or poll."""
    GET_CONSUMER_OFFSET = 120
    GET_STREAM = 200
    GET_STREAMS = 201
    GET_TOPIC = 300
    GET_TOPICS = 301


class ErrorCode(IntEnum):
    """The subset of ``IggyError`` codes the broker replies with; the SDK maps them back."""

    ERROR = 1
    INVALID_COMMAND = 3
    INVALID_FORMAT = 4
    FEATURE_UNAVAILABLE = 5
    INVALID_IDENTIFIER = 6
    RESOURCE_NOT_FOUND = 20
    UNAUTHENTICATED = 40
    INVALID_CREDENTIALS = 42
    STREAM_ID_NOT_FOUND = 1009
    STREAM_NAME_NOT_FOUND = 1010
    STREAM_NAME_ALREADY_EXISTS = 1012
    TOPIC_ID_NOT_FOUND = 2010
    TOPIC_NAME_NOT_FOUND = 2011
    TOPIC_NAME_ALREADY_EXISTS = 2013
    TOO_MANY_PARTITIONS = 2015
    INVALID_TOPIC_SIZE = 1019
    PARTITION_NOT_FOUND = 3007
    CONSUMER_OFFSET_NOT_FOUND = 3021
    INVALID_MESSAGES_COUNT = 4009
    INVALID_MESSAGE_CHECKSUM = 4027
    INVALID_BATCH_CHECKSUM = 4039
    UNSUPPORTED_OPTION_KEY = 4041


class EvictionReason(IntEnum):
    """Reason byte of a session-terminal eviction frame (header byte 255)."""

    NO_SESSION = 1
    INVALID_CREDENTIALS = 9
    INCOMPATIBLE_PROTOCOL = 14
    MALFORMED_LOGIN = 15


class PartitioningKind(IntEnum):
    """How a send picks its partition (``[kind u8][len u8][value]`` in the request)."""

    BALANCED = 1
    PARTITION_ID = 2
    MESSAGES_KEY = 3


class PollingKind(IntEnum):
    """Where a poll starts reading."""

    OFFSET = 1
    TIMESTAMP = 2
    FIRST = 3
    LAST = 4
    NEXT = 5


class ConsumerKind(IntEnum):
    """Whose offset a poll or offset request reads and writes."""

    CONSUMER = 1
    CONSUMER_GROUP = 2


class BrokerError(Exception):
    """A request the broker refuses; ``code`` travels to the client, ``detail`` to the log."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(f"{code.name} ({int(code)}): {detail}")
        self.code = code
        self.detail = detail

    def __reduce__(self) -> tuple[type[BrokerError], tuple[ErrorCode, str]]:
        return (BrokerError, (self.code, self.detail))


class FrameError(Exception):
    """The byte stream is not a request frame; the connection cannot be resynchronised."""


def is_result_framed(operation: int) -> bool:
    """Whether replies to ``operation`` lead with the ``[count u32]`` result section.

    Metadata operations (64..149) and the consumer-offset writes are; reads, sends, login and
    logout are not. The SDK strips the section only for these, so getting it wrong makes a
    rejection decode as success or a payload decode as a count.
    """
    return 64 <= operation < 160 or operation in (
        Operation.STORE_CONSUMER_OFFSET,
        Operation.DELETE_CONSUMER_OFFSET,
    )


Identifier = int | str
"""A stream, topic or consumer identifier: numeric id or name."""

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")


def encode_name(name: str) -> bytes:
    raw = name.encode()
    return bytes((len(raw),)) + raw
