"""How the sink tells a lost connection from a failing destination, and shares its client.

The exceptions classified here are the ones the real ``apache-iggy`` SDK raises against the
local broker over TCP (a missing destination, a stopped server), not hand-made look-alikes.
"""

from __future__ import annotations

import asyncio
import gc

import apache_iggy
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from iggy_local import LocalIggy
from iggy_spark import sdk
from iggy_spark.connection import IggyConnection
from iggy_spark.errors import DestinationError, SendError
from iggy_spark.failures import is_disconnection
from iggy_spark.iggy_url import IggyUrl

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]


async def _raised(coro: object, timeout: float = 10.0) -> BaseException:
    try:
        await asyncio.wait_for(coro, timeout)  # type: ignore[arg-type]
    except BaseException as exc:  # the exception is the result
        return exc
    raise AssertionError("the call succeeded")


def test_a_destination_named_like_a_disconnection_is_not_one_but_a_stopped_server_is() -> None:
    async def scenario(broker: LocalIggy) -> tuple[BaseException, BaseException]:
        client = apache_iggy.IggyClient(IggyUrl.parse(broker.url).to_tcp_config())
        await client.connect()
        missing = await _raised(client.send_messages(
            "disconnected", "connection closed", apache_iggy.Partitioning.balanced(),
            [apache_iggy.SendMessage("x")]))
        broker.kill()
        # the SDK notices on a timeout, or at once when the closed socket reaches it first
        hung = await _raised(client.get_topic("s", "t"), 1.0)
        assert is_disconnection(hung), repr(hung)
        gone = await _raised(client.get_topic("s", "t"))  # then says so itself
        return missing, gone

    with LocalIggy() as broker:
        missing, gone = asyncio.run(scenario(broker))
    assert "disconnected" in str(missing)  # the SDK names the stream in its message...
    assert not is_disconnection(missing)  # ...which is not a disconnection
    # the 0.9 SDK's own "Disconnected"; the 0.10 SDK's calls keep timing out
    assert is_disconnection(gone) and (sdk.is_sdk_error(gone) or isinstance(gone, TimeoutError))
    assert not is_disconnection(SendError("s", "t", "failed"))
    wrapped = SendError("s", "t", "failed")
    wrapped.__cause__ = gone
    assert is_disconnection(wrapped)


@given(st.text(max_size=40), st.text(max_size=40))
def test_our_own_errors_are_never_read_as_disconnections(stream: str, topic: str) -> None:
    for name in (stream, "disconnected", "Disconnected", "connection closed"):
        assert not is_disconnection(DestinationError(name, topic, "Disconnected"))
        assert not is_disconnection(SendError(name, topic, "Not connected"))


def _connections(port: int) -> int:
    return sum(1 for c in psutil.Process().net_connections("tcp")
               if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED")


def test_one_client_at_a_time_and_a_reset_one_is_closed() -> None:
    # A broker of its own: connections are counted, and the session's broker has others.
    with LocalIggy() as broker:
        _one_client_at_a_time(broker)


def _one_client_at_a_time(broker: LocalIggy) -> None:
    conn = IggyConnection(IggyUrl.parse(broker.url))

    async def many() -> apache_iggy.IggyClient:
        clients = await asyncio.gather(*(conn.client() for _ in range(8)))
        assert all(c is clients[0] for c in clients)
        return clients[0]

    # Objects, not id()s, are compared: a freed client's address can be reused by the next.
    first = conn.run(many(), timeout=30)
    assert _connections(broker.port) == 1
    conn.reset(first)
    second = conn.run(many(), timeout=30)
    assert second is not first
    del first
    gc.collect()
    assert _connections(broker.port) == 1  # the old client's connection is closed
    conn.reset(apache_iggy.IggyClient("127.0.0.1:1"))  # not the current client: kept
    assert conn.run(many(), timeout=30) is second
