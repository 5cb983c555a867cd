"""A server of another Iggy line than the installed SDK's fails the first connect at once with
one error that names the server's line, the installed SDK and the install command that fits;
a server's protocol window is learned from its refusal, without credentials."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from iggy_local import LocalIggy
from iggy_local.dialects import IGGY_0_9, IGGY_0_10, Dialect
from iggy_spark import IncompatibleServer, ServerError, UnsupportedSdk, handshake, sdk
from iggy_spark.connection import IggyConnection, sdk_line
from iggy_spark.failures import retrying
from iggy_spark.iggy_url import IggyUrl

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]


def _other_line() -> tuple[sdk.SdkLine, sdk.SdkLine]:
    """The installed SDK's line and the other one."""
    ours = sdk_line()
    return ours, sdk.SDK_0_10 if ours is sdk.SDK_0_9 else sdk.SDK_0_9


@pytest.mark.parametrize("dialect", [IGGY_0_9, IGGY_0_10], ids=lambda d: f"iggy{d.server}")
def test_a_servers_protocol_window_is_learned_from_its_refusal(dialect: Dialect) -> None:
    with LocalIggy(server=dialect.server) as broker:
        url = IggyUrl.parse(broker.url)
        conn = IggyConnection(url)
        window = conn.run(handshake.server_protocols(url), timeout=10)
        assert window == (dialect.protocol_min, dialect.protocol)
    assert conn.run(handshake.server_protocols(url), timeout=10) is None  # nobody listens


def test_a_server_of_the_other_line_fails_the_first_connect_at_once() -> None:
    ours, theirs = _other_line()
    version = sdk.installed()[0]
    with LocalIggy(server=theirs.server) as broker:
        url = IggyUrl.parse(broker.url)
        conn = IggyConnection(url)
        connects: list[None] = []
        client = conn.client

        async def counting() -> Any:
            connects.append(None)
            return await client()

        conn.client = counting  # type: ignore[method-assign]
        with pytest.raises(IncompatibleServer) as refused:
            conn.run(retrying(conn, lambda client: client.get_streams(), 60.0), timeout=30)
        assert len(connects) == 1  # never retried as a lost connection
    error = refused.value
    assert isinstance(error, ServerError)
    assert (error.address, error.server_protocol, error.sdk_version) == (
        url.server_address, theirs.protocol, version)
    assert str(error) == (
        f"cannot use the Iggy server at {url.server_address}: it is an Iggy {theirs.server} "
        f"server (binary protocol {sdk.protocol_text(theirs.protocol)}) and refuses the "
        f"installed apache-iggy {version}, which speaks Iggy {ours.server}'s protocol "
        f"{sdk.protocol_text(ours.protocol)}; install the SDK of its line: {theirs.install}")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy)) == (IncompatibleServer, str(error))


def test_the_message_without_a_window_or_for_an_unknown_protocol() -> None:
    unknown = IncompatibleServer("h:1", None, "0.9.0")
    assert "the server refuses the installed apache-iggy 0.9.0, which speaks Iggy 0.9's protocol" \
        " 0.11.0; install the apache-iggy of the server's Iggy line: Iggy 0.9: " in str(unknown)
    newer = IncompatibleServer("h:1", (0 << 20) | (13 << 10), "0.9.1.dev5")
    assert "speaks binary protocol 0.13.0, which no Iggy line iggy-spark supports" in str(newer)
    assert "apache-iggy 0.9.1.dev4 is not an SDK iggy-spark supports" in str(
        UnsupportedSdk("0.9.1.dev4"))


def test_an_sdk_of_no_supported_line_fails_the_first_connect_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sdk, "installed", lambda: ("0.9.1.dev4", None))
    conn = IggyConnection(IggyUrl.parse("iggy://iggy:iggy@127.0.0.1:1"))
    with pytest.raises(UnsupportedSdk, match=r"apache-iggy 0\.9\.1\.dev4 is not an SDK"):
        conn.run(retrying(conn, lambda client: client.get_streams(), 60.0), timeout=10)
