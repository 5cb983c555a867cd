"""The two protocol lines the broker speaks: Iggy server 0.9 (binary protocol 0.11.0, the
``apache-iggy`` 0.9.0 SDK) and server 0.10 (protocol 0.12.0, the SDK's 0.10-line pre-releases).

A broker speaks one line, chosen when it starts, and refuses a client of the other at login
as the real server does: an ``IncompatibleProtocol`` eviction carrying the protocol window it
accepts. Where the lines' layouts differ, the codecs ask the broker's :class:`Dialect`; what is
not named here is the same on both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["DIALECTS", "IGGY_0_9", "IGGY_0_10", "SERVER_ENV", "Dialect", "dialect",
           "pack_version", "version_text"]

SERVER_ENV = "IGGY_LOCAL_SERVER"
"""The server line a broker started without one speaks (``0.9``, the default, or ``0.10``)."""


def pack_version(major: int, minor: int, patch: int) -> int:
    """A protocol version as the wire carries it: ``major << 20 | minor << 10 | patch``.

    ``iggy_spark.sdk`` packs versions too: the broker shares no code with the clients it
    validates, so a mistake on one side cannot hide on the other."""
    return major << 20 | minor << 10 | patch


def version_text(packed: int) -> str:
    """``0.12.0`` for a packed protocol version."""
    return f"{packed >> 20}.{packed >> 10 & 1023}.{packed & 1023}"


@dataclass(frozen=True, slots=True)
class Dialect:
    """One server line's protocol window and the layouts that set it apart."""

    server: str
    """The server line, as users name it (``0.9``, ``0.10``)."""
    protocol: int
    """The newest packed protocol version it accepts at login."""
    protocol_min: int
    """The oldest one."""
    server_version: str
    """What its login reply says the server is."""
    bind_secret: bool
    """A login carries a 32-byte session bind secret after the client's version."""
    stamped_requests: bool
    """A metadata request's ``request_checksum`` is the XXH3-64 of its body (0.9); on 0.10 it is
    a random identifier of the request, kept across retries, and nothing to verify."""
    partition_context: bool
    """Poll replies and partition records carry a 24-byte partition context (incarnation,
    owner generation, metadata op), and reply headers mark committed results."""
    options_metadata: bool
    """Topic records carry their settings as options only (no fixed expiry, compression and
    size fields), stream records a derived-options block, roster nodes a replica id."""
    later_patches: bool
    """A client of a later patch of the newest accepted protocol logs in too (0.9's rule; 0.10
    accepts its window exactly)."""

    def accepts(self, protocol: int) -> bool:
        """Whether a client announcing ``protocol`` may log in."""
        newest = self.protocol | 1023 if self.later_patches else self.protocol
        return self.protocol_min <= protocol <= newest


IGGY_0_9 = Dialect(
    server="0.9", protocol=pack_version(0, 11, 0), protocol_min=pack_version(0, 11, 0),
    server_version="0.9.0-local", bind_secret=False, stamped_requests=True,
    partition_context=False, options_metadata=False, later_patches=True,
)
IGGY_0_10 = Dialect(
    server="0.10", protocol=pack_version(0, 12, 0), protocol_min=pack_version(0, 12, 0),
    server_version="0.10.0-local", bind_secret=True, stamped_requests=False,
    partition_context=True, options_metadata=True, later_patches=False,
)
DIALECTS = {d.server: d for d in (IGGY_0_9, IGGY_0_10)}


def dialect(server: str | None = None) -> Dialect:
    """The dialect of server line ``server``; ``None`` reads :data:`SERVER_ENV` (default 0.9).

    Raises :class:`ValueError` for a line the broker does not speak.
    """
    name = server if server is not None else os.environ.get(SERVER_ENV) or IGGY_0_9.server
    try:
        return DIALECTS[name]
    except KeyError:
        known = ", ".join(DIALECTS)
        raise ValueError(f"unknown Iggy server line {name!r}: the local broker speaks {known}"
                         ) from None
