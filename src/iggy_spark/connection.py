"""One SDK client per Python worker process and URL, driven by a private asyncio loop.

The ``apache-iggy`` SDK is asynchronous; Spark calls the writer synchronously, once per task, in
worker processes that are reused across tasks and micro-batches. Connecting and logging in for
every task would cost a round trip or three per batch, so each process keeps one connected
client per URL on a daemon thread's event loop and tasks submit coroutines to it.

A server of another Iggy line than the installed SDK's refuses every login: the first connect
fails at once with :class:`~iggy_spark.errors.IncompatibleServer`, which names the server's
line, the installed SDK and the install command that fits, and is never retried. Once a
client has logged in, the server speaks the installed SDK's line (:mod:`iggy_spark.sdk`),
which is the layout of the package's own requests and poll replies.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from iggy_spark import handshake, sdk
from iggy_spark.errors import IncompatibleServer, ServerError, UnsupportedSdk
from iggy_spark.iggy_url import IggyUrl

if TYPE_CHECKING:
    import apache_iggy

__all__ = ["IggyConnection", "check_tls", "sdk_line"]

T = TypeVar("T")


class IggyConnection:
    """A connected, logged-in ``IggyClient`` plus the event loop it runs on."""

    _pool: ClassVar[dict[IggyUrl, IggyConnection]] = {}
    _pool_lock = threading.Lock()

    def __init__(self, url: IggyUrl) -> None:
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"iggy-{url.server_address}", daemon=True
        )
        self._thread.start()
        self._client: apache_iggy.IggyClient | None = None
        self._connecting = asyncio.Lock()  # one connect at a time: coroutines share its client

    @classmethod
    def shared(cls, url: IggyUrl) -> IggyConnection:
        """The process-wide connection for ``url``, created on first use."""
        with cls._pool_lock:
            conn = cls._pool.get(url)
            if conn is None:
                conn = cls._pool[url] = cls(url)
            return conn

    async def client(self) -> apache_iggy.IggyClient:
        """The client, connected on first use; the URL's credentials log it in on every connect.

        Coroutines that find no client wait for one connect and all get its client, so a
        process holds one connection per URL even right after :meth:`reset`. Raises
        :class:`~iggy_spark.errors.IncompatibleServer` when the server speaks another line.
        """
        client = self._client
        if client is not None:
            return client
        async with self._connecting:
            if self._client is None:
                import apache_iggy

                sdk_line()
                await check_tls(self.url)
                client = apache_iggy.IggyClient(self.url.to_tcp_config())
                try:
                    await client.connect()
                except Exception as exc:  # the SDK's errors are RuntimeErrors
                    if sdk.error_code(exc) == sdk.INCOMPATIBLE_PROTOCOL:
                        window = await handshake.server_protocols(self.url)
                        raise IncompatibleServer(
                            self.url.server_address, None if window is None else window[1],
                            sdk.installed()[0],
                        ) from exc
                    raise
                self._client = client
            return self._client

    def reset(self, stale: apache_iggy.IggyClient) -> None:
        """Drop ``stale`` after a disconnection or a hung call; the next use reconnects.

        Only if it is still the current client: another coroutine that failed on the same
        client may already have replaced it. The SDK has no close call; dropping the last
        reference closes the connection (coroutines still holding it finish with it first).
        """
        if self._client is stale:
            self._client = None

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on this connection's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on this connection's loop and wait for its result."""
        return self.submit(coro).result(timeout)

    def __repr__(self) -> str:
        return f"IggyConnection({self.url})"


def sdk_line() -> sdk.SdkLine:
    """The installed SDK's line: the layout of every reply once its client has logged in.

    Raises :class:`~iggy_spark.errors.UnsupportedSdk` for an SDK of no supported line.
    """
    version, line = sdk.installed()
    if line is None:
        raise UnsupportedSdk(version)
    return line


async def check_tls(url: IggyUrl) -> None:
    """Shake hands with the server as the SDK's client will, and fail at once with the reason
    when its certificate cannot be trusted: the SDK, meeting an untrusted certificate or a wrong
    ``tls_domain``, retries until the call times out and then reports the server as
    unreachable. Nothing to check without ``tls=true`` or with validation switched off.

    Raises :class:`~iggy_spark.errors.ServerError`; a refused or lost connection (a server
    without TLS just closes it) is left to the caller's retries.
    """
    if not url.tls or not url.tls_validate_certificate:
        return
    context = ssl.create_default_context(cafile=url.tls_ca_file)
    try:
        _, writer = await asyncio.open_connection(
            url.host, url.port, ssl=context, server_hostname=url.tls_domain or url.host)
    except ssl.SSLError as exc:
        raise ServerError(url.server_address, f"TLS handshake failed: {exc.reason or exc} "
                          "(the url's tls_ca_file and tls_domain)") from exc
    writer.close()
