"""Choosing the Iggy server tests run against: the local broker, or the one ``IGGY_URL`` names."""

from __future__ import annotations

import pytest
from support.broker_fixtures import connect, run

from iggy_local import LocalIggy
from iggy_spark_testing.brokers import URL_ENV, ExternalIggy, FaultUnavailable, iggy_server

pytestmark = [pytest.mark.services, pytest.mark.iggy_line]


def test_without_iggy_url_a_local_broker_is_started_and_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    with iggy_server() as server:
        assert isinstance(server, LocalIggy) and server.running
    assert not server.running


def test_iggy_url_names_a_server_that_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalIggy(username="alice", password="p@ss word") as theirs:
        monkeypatch.setenv(URL_ENV, theirs.url)
        with iggy_server() as server:
            assert isinstance(server, ExternalIggy)
            assert (server.address, server.port, server.username) == (
                theirs.address, theirs.port, "alice")
            assert server.url == theirs.url
            assert "p@ss" not in repr(server) and "word" not in repr(server)

            async def streams() -> list[object]:
                client = await connect(server.address, "alice", "p@ss word")
                return list(await client.get_streams())

            assert run(streams()) == []
            # the local broker manages no users: no session user, no fault switch
            with pytest.raises(FaultUnavailable, match="needs a server that manages users"):
                server.refuse_sends("s", "t")
            with pytest.raises(FaultUnavailable, match="kill needs the local broker"):
                server.kill()
        assert theirs.running  # not ours to stop
