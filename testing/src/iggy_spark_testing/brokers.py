"""The Iggy server a test, the demo or a benchmark talks to: the local broker, or ``IGGY_URL``.

By default everything runs against :class:`~iggy_local.LocalIggy`, started on a free loopback
port. With ``IGGY_URL`` set (``iggy://user:password@host:port``, the sink's ``url`` grammar) the
same code talks to that server instead, which is how the suite is checked against a real Apache
Iggy server. Such a server is someone else's: it is never started, stopped or killed here, and
the local broker's fault switches (:meth:`~iggy_local.LocalIggy.refuse_sends`,
:meth:`~iggy_local.LocalIggy.kill`) refuse with an error that says so, so a fault test run
against it fails loudly instead of passing without its fault.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from iggy_local import LocalIggy
from iggy_spark.iggy_url import IggyUrl

__all__ = ["URL_ENV", "ExternalIggy", "FaultUnavailable", "iggy_server"]

URL_ENV = "IGGY_URL"
"""Environment variable naming an external Iggy server for tests, demos and benchmarks."""


class FaultUnavailable(RuntimeError):
    """A test asked an external server for a fault only the local broker can inject."""


class ExternalIggy:
    """A server someone else runs (``IGGY_URL``), with the surface tests use of
    :class:`~iggy_local.LocalIggy`: ``url``, ``address``, ``username``; start/stop do nothing."""

    def __init__(self, url: str) -> None:
        self._url = IggyUrl.parse(url)

    @property
    def url(self) -> str:
        return self._url.format(reveal_password=True)

    @property
    def address(self) -> str:
        return self._url.server_address

    @property
    def port(self) -> int:
        return self._url.port

    @property
    def username(self) -> str:
        return self._url.username

    @property
    def running(self) -> bool:
        return True

    def start(self) -> ExternalIggy:
        return self

    def stop(self) -> None:
        """Nothing to do: the server is not ours."""

    def kill(self) -> None:
        raise FaultUnavailable(f"kill needs the local broker; unset {URL_ENV}")

    def refuse_sends(self, stream: str, topic: str, refuse: bool = True, *,
                     after: int = 0) -> None:
        raise FaultUnavailable(f"refuse_sends needs the local broker; unset {URL_ENV}")

    def __repr__(self) -> str:
        return f"ExternalIggy({self._url!r})"


@contextlib.contextmanager
def iggy_server() -> Iterator[LocalIggy | ExternalIggy]:
    """The server to use: ``IGGY_URL`` when set, else a fresh in-process local broker."""
    url = os.environ.get(URL_ENV)
    if url:
        yield ExternalIggy(url)
        return
    with LocalIggy() as server:
        yield server
