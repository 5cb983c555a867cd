"""The broker's two protocol lines (Iggy 0.9, protocol 0.11; Iggy 0.10, protocol 0.12): each logs
in its own line's clients and tells them its protocol, and refuses the other line's at login
with the window it accepts, as the real servers do. The rest of the local broker tests run
on the installed SDK's line (``./run test-iggy 0.10`` runs them with the 0.10 SDK)."""

from __future__ import annotations

import struct

import pytest
from apache_iggy import IggyClient
from support.broker_fixtures import RawClient, run

from iggy_local import LocalIggy
from iggy_local.dialects import IGGY_0_9, IGGY_0_10, Dialect, pack_version, version_text
from iggy_spark import sdk

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]

LINES = pytest.mark.parametrize("line", [IGGY_0_9, IGGY_0_10], ids=lambda d: f"iggy{d.server}")
_INCOMPATIBLE_PROTOCOL = 14


def _window(reply_header: bytes) -> tuple[int, int, int]:
    """An eviction's ``(reason, newest, oldest)`` accepted protocol."""
    newest, oldest = struct.unpack_from("<II", reply_header, 144)
    return reply_header[255], newest, oldest


@LINES
def test_a_client_of_its_line_logs_in_and_learns_the_servers_protocol(line: Dialect) -> None:
    with LocalIggy(server=line.server) as broker:
        raw = RawClient(broker.address)
        reply = raw.login(line=line)
        assert (reply.command, reply.status) == (8, 0)
        results, user, session, protocol = struct.unpack_from("<IIQI", reply.body)
        assert (results, user, protocol) == (0, 0, line.protocol) and session > 0
        assert reply.body[21:] == line.server_version.encode() == reply.body[21:21 + reply.body[20]]
        raw.close()


@pytest.mark.parametrize(("server", "client"), [(IGGY_0_9, IGGY_0_10), (IGGY_0_10, IGGY_0_9)],
                         ids=["0.10-client-on-0.9", "0.9-client-on-0.10"])
def test_a_client_of_the_other_line_is_refused_with_the_window(
    server: Dialect, client: Dialect
) -> None:
    """Read right after the client's version, before the rest of a login laid out for another
    line; an impossible version (0) gets the same answer, so a client can learn the window
    without credentials."""
    with LocalIggy(server=server.server) as broker:
        for protocol in (client.protocol, 0):
            raw = RawClient(broker.address)
            reply = raw.login(line=client, protocol=protocol)
            assert reply.command == 13 and reply.body == b""
            assert _window(reply.header) == (
                _INCOMPATIBLE_PROTOCOL, server.protocol, server.protocol_min)
            raw.close()


def test_patch_releases_follow_each_lines_rule() -> None:
    """0.9 takes a later patch of protocol 0.11; 0.10 accepts exactly 0.12.0."""
    assert IGGY_0_9.accepts(pack_version(0, 11, 5)) and not IGGY_0_9.accepts(pack_version(0, 12, 0))
    assert not IGGY_0_10.accepts(pack_version(0, 12, 1))
    assert not IGGY_0_10.accepts(pack_version(0, 11, 0))
    assert version_text(IGGY_0_10.protocol) == "0.12.0"


def test_the_installed_sdk_is_refused_by_the_other_lines_broker() -> None:
    """What the SDK reports, typed on 0.10 (``IggyError`` code 14003), as text on 0.9."""
    line = sdk.installed()[1]
    other = IGGY_0_10 if line is sdk.SDK_0_9 else IGGY_0_9
    expected = (rf"Incompatible binary protocol version: client {version_text(line.protocol)}, "
                rf"server accepts \[{version_text(other.protocol_min)}, "
                rf"{version_text(other.protocol)}\]")
    with LocalIggy(server=other.server) as broker:

        async def main() -> None:
            client = IggyClient(broker.address)
            await client.connect()
            with pytest.raises(RuntimeError, match=expected) as refused:
                await client.login_user("iggy", "iggy")
            assert sdk.error_code(refused.value) == sdk.INCOMPATIBLE_PROTOCOL

        run(main())
