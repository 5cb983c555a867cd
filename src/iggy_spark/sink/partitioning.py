"""Which partition a message key lands in: the rule the Iggy server and SDKs apply.

The sink resolves keys to partitions itself (exactly as the SDK would before sending) so that
one destination's messages can be sent as one request per partition while keeping every key's
messages in arrival order; the local broker applies the same rule to keyed sends.
"""

from __future__ import annotations

import xxhash

__all__ = ["partition_for_key"]


def partition_for_key(key: bytes, partitions_count: int) -> int:
    """MessagesKey partitioning: XXH32 (seed 0) of the key bytes modulo the partition count."""
    return xxhash.xxh32_intdigest(key) % partitions_count
