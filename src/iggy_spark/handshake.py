"""Ask an Iggy server which binary protocols it accepts, without credentials.

Servers of both lines answer a login whose client version they refuse with an eviction frame
carrying the window they accept, read right after the version and before anything else in
the login (the server's login gate as ``iggy_binary_protocol`` 0.11.1-edge.4 describes it; no
0.10 server was at hand to check it against, the local broker does the same). A login
announcing protocol 0, which no server accepts, therefore learns the window of any server.
The package asks only after the SDK's own login was refused for its protocol,
so that the error can name the server's line; a server that answers otherwise (an older one,
or not an Iggy server) leaves the window unknown.

The frame: a 256-byte request header (``size`` u32 @48, ``command`` u8 @60 = Request,
``client`` u128 @128, ``request_checksum`` u128 @144, ``operation`` u8 @176 = Register) and
the login body ``[protocol u32][sdk name][sdk version][user][password][context len u32]``
(names: ``[len u8][utf8]``). The eviction is a header alone: ``command`` @60 = Eviction, the
newest accepted protocol u32 @144, the oldest @148, ``reason`` u8 @255 = IncompatibleProtocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import struct

from iggy_spark.iggy_url import IggyUrl

__all__ = ["login_request", "server_protocols"]

_HEADER = 256
_REQUEST, _EVICTION = 5, 13
_REGISTER = 1
_INCOMPATIBLE_PROTOCOL = 14
_REQUEST_HEADER = struct.Struct("<48xI8xB67xQQQQ16xB79x")
_WINDOW = struct.Struct("<II")
_TIMEOUT = 5.0


def _name(text: str) -> bytes:
    raw = text.encode()
    return bytes((len(raw),)) + raw


def login_request(client: int) -> bytes:
    """A login frame from ``client`` (non-zero) announcing protocol 0. Its request checksum is
    the XXH3-64 of the body: what a 0.9 server checks, and a request identifier to a 0.10 one."""
    import xxhash

    body = struct.pack("<I", 0) + _name("iggy-spark") + _name("0.0.0") + _name("probe") + (
        _name("probe") + struct.pack("<I", 0))
    stamp = xxhash.xxh3_64_intdigest(body)
    return _REQUEST_HEADER.pack(_HEADER + len(body), _REQUEST, client & (2**64 - 1), client >> 64,
                                stamp, 0, _REGISTER) + body


def _tls(url: IggyUrl) -> ssl.SSLContext | None:
    if not url.tls:
        return None
    context = ssl.create_default_context(cafile=url.tls_ca_file)
    if not url.tls_validate_certificate:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


async def server_protocols(url: IggyUrl) -> tuple[int, int] | None:
    """The ``(oldest, newest)`` packed protocol versions the server at ``url`` accepts, or
    ``None`` when it does not answer with them (within a few seconds)."""
    context = _tls(url)
    try:
        async with asyncio.timeout(_TIMEOUT):
            reader, writer = await asyncio.open_connection(
                url.host, url.port, ssl=context,
                server_hostname=(url.tls_domain or url.host) if context else None)
            try:
                writer.write(login_request(int.from_bytes(os.urandom(16), "little") | 1))
                await writer.drain()
                reply = await reader.readexactly(_HEADER)
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError):
        return None
    if reply[60] != _EVICTION or reply[255] != _INCOMPATIBLE_PROTOCOL:
        return None
    newest, oldest = _WINDOW.unpack_from(reply, 144)
    return (oldest, newest) if 0 < oldest <= newest else None
