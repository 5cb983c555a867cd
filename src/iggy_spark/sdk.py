"""The installed ``apache-iggy`` SDK: which Iggy server line it speaks, how to install the SDK of
each line, and where the two lines' SDK APIs differ, so the rest of the package is written once.

Iggy servers 0.9 speak binary protocol 0.11 and servers 0.10 protocol 0.12, and each refuses a
client of the other at login; there is no SDK that speaks both. ``apache-iggy`` 0.9.0 is the
0.9 line's SDK; the 0.10 line's is the pre-release 0.9.1.dev5 (0.9.1 was 0.10's planned name)
until a stable release. The package's extras install one each: ``iggy`` the 0.9 line's (it
keeps the 0.9.1 pre-releases out), ``iggy-0-10`` the 0.10 line's. The package's own requests
go through the SDK's connection, so once the SDK has logged in, the server speaks the SDK's
protocol: the layouts of the package's own requests and poll replies follow :func:`installed`.

Where the APIs differ for this package: errors. The 0.9 SDK raises a bare ``RuntimeError``
carrying its error's text; the 0.10 SDK an ``IggyError`` (a ``RuntimeError``) with the numeric
Iggy error code. :func:`error_code` reads the code from both, and nothing else in the package
looks at an SDK error's text.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "ALREADY_EXISTS", "DISCONNECTED", "INCOMPATIBLE_PROTOCOL", "INSTALL_ANY", "LINES", "SDK_0_9",
    "SDK_0_10", "SdkLine", "error_code", "installed", "is_sdk_error", "line_of", "protocol_text",
]


def _pack(major: int, minor: int, patch: int) -> int:
    return major << 20 | minor << 10 | patch


def protocol_text(packed: int) -> str:
    """``0.12.0`` for a protocol version packed as the wire carries it."""
    return f"{packed >> 20}.{packed >> 10 & 1023}.{packed & 1023}"


@dataclass(frozen=True, slots=True)
class SdkLine:
    """One Iggy server line, as this package meets it through that line's SDK."""

    server: str
    """The server line, as users name it (``0.9``, ``0.10``)."""
    protocol: int
    """The binary protocol its servers and SDK speak, packed ``major << 20 | minor << 10 |
    patch``; a client of another ``major.minor`` is refused at login."""
    install: str
    """The command that installs the SDK of this line."""
    poll_reply_header: int
    """Bytes before a poll reply's first batch: ``[partition u32][current_offset u64]
    [count u32]``, and on 0.10 the partition context it was served under (three u64)."""
    topic_name_at: int
    """Bytes of a topic's header before its name: ``[id u32][created u64][partitions u32]``,
    on 0.9 then its expiry, compression and maximum size (0.10 carries them in its options),
    then ``[size u64][messages u64]``."""

    def speaks(self, protocol: int) -> bool:
        """Whether ``protocol`` is this line's (same major and minor)."""
        return protocol >> 10 == self.protocol >> 10


SDK_0_9 = SdkLine("0.9", _pack(0, 11, 0), 'pip install "iggy-spark[iggy]"', 16, 49)
SDK_0_10 = SdkLine("0.10", _pack(0, 12, 0), 'pip install "iggy-spark[iggy-0-10]"', 40, 32)
LINES = (SDK_0_9, SDK_0_10)
INSTALL_ANY = "; ".join(f"Iggy {line.server}: {line.install}" for line in LINES)
"""What to install when the SDK that fits is not known: the command of each line, for the user
to pick their server's."""

_SDK_0_10_PRERELEASE = "0.9.1.dev5"
"""The one pre-release of the 0.10 line supported, the one checked against protocol 0.12.0 (the
earlier ones were not checked)."""


def line_of(version: str) -> SdkLine | None:
    """The server line ``apache-iggy`` ``version`` speaks; ``None`` for one this package does
    not support (the other 0.9.1 pre-releases, anything before 0.9 or from 0.11 on). A 0.10.x
    release is taken for the 0.10 line's SDK; none existed to check when this was written."""
    if version == _SDK_0_10_PRERELEASE:
        return SDK_0_10
    numbers = re.match(r"(\d+)\.(\d+)\.(\d+)(?:\.post\d+)?$", version)
    if numbers is None:
        return None
    release = tuple(int(n) for n in numbers.groups())
    if release[:2] == (0, 9) and release[2] == 0:
        return SDK_0_9
    return SDK_0_10 if release[:2] == (0, 10) else None


@lru_cache(maxsize=1)
def installed() -> tuple[str, SdkLine | None]:
    """The installed ``apache-iggy`` version and its line (``None``: not supported)."""
    version = importlib.metadata.version("apache-iggy")
    return version, line_of(version)


DISCONNECTED = frozenset({8, 9, 30, 31, 32, 61, 63, 206, 4050})
"""Codes meaning the connection, not the request, failed: Disconnected, CannotEstablishConnection,
StaleClient, TcpError, QuicError, NotConnected, ClientShutdown, ConnectionClosed,
CannotSendMessagesDueToClientDisconnection."""
ALREADY_EXISTS = frozenset({1012, 2013})
"""StreamNameAlreadyExists, TopicNameAlreadyExists."""
INCOMPATIBLE_PROTOCOL = 14003
"""IncompatibleProtocolVersion: the server refused the SDK's protocol at login."""

# The 0.9 SDK's texts of the errors above (apache/iggy, core/common/src/error/iggy_error.rs):
# each identifies its variant exactly, and no name from a request can make a parameterless
# one match (the whole text is compared).
_TEXTS_0_9: dict[str, int] = {
    "Disconnected": 8,
    "Cannot establish connection": 9,
    "Stale client": 30,
    "TCP error": 31,
    "QUIC error": 32,
    "Not connected": 61,
    "Client shutdown": 63,
    "Connection closed": 206,
    "Cannot sed messages due to client disconnection": 4050,  # sic, as the SDK spells it
}
_PATTERNS_0_9: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"Stream with name: .* already exists\.", re.DOTALL), 1012),
    (re.compile(r"Topic with name: .* for stream with ID: .* already exists\.", re.DOTALL), 2013),
    (re.compile(r"Incompatible binary protocol version: client \d+\.\d+\.\d+, "
                r"server accepts \[\d+\.\d+\.\d+, \d+\.\d+\.\d+\]"), INCOMPATIBLE_PROTOCOL),
)


@lru_cache(maxsize=1)
def _typed_error() -> type[Exception] | None:
    """The 0.10 SDK's ``IggyError``; ``None`` with the 0.9 SDK (or none installed)."""
    try:
        import apache_iggy
    except ImportError:
        return None
    typed: type[Exception] | None = getattr(apache_iggy, "IggyError", None)
    return typed


def is_sdk_error(exc: BaseException) -> bool:
    """Whether the SDK raised ``exc`` (a bare ``RuntimeError`` on 0.9, an ``IggyError`` on 0.10),
    rather than Python or this package."""
    typed = _typed_error()
    return type(exc) is RuntimeError or (typed is not None and isinstance(exc, typed))


def error_code(exc: BaseException) -> int | None:
    """The Iggy error code of an error the SDK raised, ``None`` for any other exception.

    The 0.10 SDK's ``IggyError`` carries it; the 0.9 SDK's bare ``RuntimeError`` only its text,
    from which the codes this package acts on are read (every other 0.9 error has none here).
    """
    typed = _typed_error()
    if typed is not None and isinstance(exc, typed):
        return int(getattr(exc, "code"))  # noqa: B009 (the typed error is not in the 0.9 stubs)
    if type(exc) is not RuntimeError or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return None
    text = exc.args[0]
    if text in _TEXTS_0_9:
        return _TEXTS_0_9[text]
    return next((c for pattern, c in _PATTERNS_0_9 if pattern.fullmatch(text)), None)
