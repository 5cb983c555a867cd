"""The Iggy server a test, the demo or a benchmark talks to: the local broker, or ``IGGY_URL``.

By default everything runs against :class:`~iggy_local.LocalIggy`, started on a free loopback
port. With ``IGGY_URL`` set (``iggy://user:password@host:port``, the sink's ``url`` grammar) the
same code talks to that server instead, which is how the suite is checked against a real Apache
Iggy server. Such a server is someone else's: it is never started, stopped or killed here.

One fault switch works there too. :meth:`ExternalIggy.start` logs in with ``IGGY_URL`` (a user
that manages users, e.g. root), creates a user of its own for the session and hands that
user's URL to the tests; :meth:`ExternalIggy.refuse_sends` then takes that user's permission to
send to one topic, which the server enforces on every send (``Unauthorized``), and gives it back
on heal. What cannot be done to a server of someone else (``kill``, ``refuse_sends(after=N)``)
raises :class:`FaultUnavailable`, so a fault test fails loudly instead of passing without its
fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from iggy_local import LocalIggy
from iggy_spark import sdk
from iggy_spark.iggy_url import IggyUrl

__all__ = ["URL_ENV", "ExternalIggy", "FaultUnavailable", "iggy_server"]

URL_ENV = "IGGY_URL"
"""Environment variable naming an external Iggy server for tests, demos and benchmarks."""

class FaultUnavailable(RuntimeError):
    """A test asked an external server for a fault only the local broker can inject."""


class ExternalIggy:
    """A server someone else runs (``IGGY_URL``), with the surface tests use of
    :class:`~iggy_local.LocalIggy`: ``url``, ``address``, ``username``, ``refuse_sends``.

    Until :meth:`start` (or when the server has no user management) ``url`` is ``IGGY_URL``
    itself and ``refuse_sends`` is unavailable.
    """

    def __init__(self, url: str) -> None:
        self._admin = IggyUrl.parse(url)
        self._user: IggyUrl | None = None
        self._refused: set[tuple[str, str]] = set()

    @property
    def url(self) -> str:
        return (self._user or self._admin).format(reveal_password=True)

    @property
    def address(self) -> str:
        return self._admin.server_address

    @property
    def port(self) -> int:
        return self._admin.port

    @property
    def username(self) -> str:
        return (self._user or self._admin).username

    @property
    def running(self) -> bool:
        return True

    def start(self) -> ExternalIggy:
        """Create this session's user, if the server manages users; else keep ``IGGY_URL``."""
        if self._user is not None:
            return self
        import apache_iggy

        user = replace(self._admin, username=f"iggy-spark-{secrets.token_hex(4)}",
                       password=secrets.token_hex(16))

        async def create(admin: apache_iggy.IggyClient) -> None:
            await admin.create_user(user.username, user.password, None, _permissions({}, set()))

        try:
            self._as_admin(create)
        except RuntimeError as exc:  # the SDK's error: no user management, or not allowed
            if not sdk.is_sdk_error(exc):
                raise
            return self
        self._user = user
        return self

    def stop(self) -> None:
        """Delete this session's user; the server itself is not ours to stop."""
        if self._user is None:
            return
        name, self._user = self._user.username, None

        async def delete(admin: Any) -> None:
            await admin.delete_user(name)

        self._as_admin(delete)

    def kill(self) -> None:
        raise FaultUnavailable(f"kill needs the local broker; unset {URL_ENV}")

    def refuse_sends(self, stream: str, topic: str, refuse: bool = True, *,
                     after: int = 0) -> None:
        """Take (``refuse=False``: give back) the session user's right to send to one topic."""
        if after or self._user is None:
            reason = "after=N" if after else "a server that manages users"
            raise FaultUnavailable(f"refuse_sends needs {reason} here; unset {URL_ENV}")
        if refuse:
            self._refused.add((stream, topic))
        else:
            self._refused.discard((stream, topic))
        name, refused = self._user.username, set(self._refused)

        async def update(admin: Any) -> None:
            streams = {s.name: await admin.get_stream(s.id) for s in await admin.get_streams()}
            await admin.update_permissions(name, _permissions(streams, refused))

        self._as_admin(update)

    def _as_admin(self, call: Any) -> None:
        async def main() -> None:
            import apache_iggy

            admin = apache_iggy.IggyClient(self._admin.server_address)
            await admin.connect()
            await admin.login_user(self._admin.username, self._admin.password)
            await call(admin)

        asyncio.run(main())

    def __repr__(self) -> str:
        return f"ExternalIggy({self._admin!r}, user={self.username!r})"


def _permissions(streams: dict[str, Any], refused: set[tuple[str, str]]) -> Any:
    """Everything the suite needs, except sending to the ``refused`` topics.

    Iggy's permissions only add up (a right at any level grants it, and managing grants
    sending), so refusing one topic means granting stream by stream, and topic by topic in a
    stream with a refused topic; meanwhile no new stream, nor topic in that stream, can be made.
    """
    import apache_iggy as iggy

    read = {"read_servers": True, "read_streams": True, "read_topics": True,
            "poll_messages": True}
    if not refused:
        return iggy.Permissions(iggy.GlobalPermissions(
            **read, manage_streams=True, manage_topics=True, send_messages=True))
    per_stream = {}
    for name, details in streams.items():
        shut = {topic for stream, topic in refused if stream == name}
        if not shut:
            per_stream[details.id] = iggy.StreamPermissions(
                manage_stream=True, read_stream=True, manage_topics=True, read_topics=True,
                poll_messages=True, send_messages=True)
            continue
        per_stream[details.id] = iggy.StreamPermissions(
            read_stream=True, read_topics=True, poll_messages=True, topics={
                t.id: iggy.TopicPermissions(manage_topic=True, read_topic=True,
                                            poll_messages=True, send_messages=True)
                for t in details.topics if t.name not in shut})
    return iggy.Permissions(iggy.GlobalPermissions(**read), per_stream)


@contextlib.contextmanager
def iggy_server() -> Iterator[LocalIggy | ExternalIggy]:
    """The server to use: ``IGGY_URL`` when set, else a fresh in-process local broker."""
    url = os.environ.get(URL_ENV)
    if not url:
        with LocalIggy() as local:
            yield local
        return
    external = ExternalIggy(url).start()
    try:
        yield external
    finally:
        external.stop()
