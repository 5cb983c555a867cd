"""How both formats tell a lost connection from a failed request, and wait one out.

A *disconnection* hits every request at once: it says nothing about the stream, topic or
partition asked for, so it is retried until the caller's timeout (the sink's ``send_timeout``)
and never counted against a destination's circuit breaker, nor read as a topic gone. Every
other failure is the request's own and is raised as it is. The line is drawn here and nowhere
else, on the SDK error's Iggy code (:func:`iggy_spark.sdk.error_code`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from iggy_spark import sdk
from iggy_spark.connection import IggyConnection
from iggy_spark.errors import ServerError, UnsupportedSdk

if TYPE_CHECKING:
    import apache_iggy

__all__ = ["Disconnected", "is_disconnection", "retrying"]

T = TypeVar("T")

_RETRY_PAUSE = 0.5
_ATTEMPT_SECONDS = 15.0


class Disconnected(Exception):
    """The server stayed unreachable for longer than the caller's timeout (the sink's
    ``send_timeout``)."""


def is_disconnection(exc: BaseException) -> bool:
    """Whether ``exc`` (or a cause of it) says the connection, not the request, failed.

    Decided by type (Python's connection errors and timeouts: the SDK's calls time out while
    the server is unreachable) and by the SDK error's code; the text of this package's own
    errors is never read.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionError | TimeoutError):
            return True
        if sdk.error_code(seen) in sdk.DISCONNECTED:
            return True
        seen = seen.__cause__
    return False


async def retrying(
    conn: IggyConnection, call: Callable[[apache_iggy.IggyClient], Awaitable[T]], timeout: float
) -> T:
    """Run ``call`` with the connection's client, retrying across disconnections.

    Each attempt gets at most ``_ATTEMPT_SECONDS``: after a server restart the SDK's client can
    keep waiting on its dead connection, so an attempt that times out drops the client and the
    next one connects afresh. A send that timed out may still have landed, so a retry can
    duplicate it: at-least-once, as everywhere else.
    """
    deadline = time.monotonic() + timeout
    while True:
        attempt = max(min(_ATTEMPT_SECONDS, deadline - time.monotonic()), 0.1)
        client: apache_iggy.IggyClient | None = None
        try:
            try:
                client = await asyncio.wait_for(conn.client(), attempt)
            except (ServerError, UnsupportedSdk):  # the connection's verdict: TLS, server line
                raise
            except Exception as exc:  # the SDK raises bare RuntimeErrors
                if is_disconnection(exc):
                    raise
                raise ServerError(conn.url.server_address, str(exc)) from exc
            return await asyncio.wait_for(call(client), attempt)
        except (ServerError, UnsupportedSdk):
            raise
        except Exception as exc:  # the SDK raises bare RuntimeErrors
            if not is_disconnection(exc):
                raise
            if client is not None:
                conn.reset(client)
            if time.monotonic() >= deadline:
                reason = str(exc) or f"no answer within {attempt:g}s"
                raise Disconnected(f"Iggy at {conn.url.server_address} unreachable for "
                                   f"{timeout:g}s: {reason}") from exc
            await asyncio.sleep(_RETRY_PAUSE)
