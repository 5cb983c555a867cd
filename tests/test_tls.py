"""TLS end to end: the sink writes and the source reads through a broker that speaks only TLS,
with the URL's ``tls_ca_file`` and ``tls_domain``; a certificate the client cannot trust, or a
name it does not carry, fail at once, saying so, instead of timing out as unreachable."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from test_iggy_routed import Feed

from iggy_local import LocalIggy
from iggy_spark.errors import ServerError
from iggy_spark.source import catalog
from iggy_spark.source.options import SourceOptions

pytestmark = pytest.mark.iggy_line


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path]:
    """A certificate authority and the folder its PEM files go to."""
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    trustme.CA().cert_pem.write_to_path(str(folder / "other-ca.pem"))
    return ca, folder


@pytest.fixture(scope="module")
def tls_broker(authority: tuple[trustme.CA, Path]) -> Iterator[LocalIggy]:
    ca, _ = authority
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("iggy.test", "127.0.0.1").configure_cert(context)
    with LocalIggy(tls=context, password="tls secret") as broker:
        yield broker


def tls_url(broker: LocalIggy, folder: Path, ca: str = "ca.pem",
            domain: str = "iggy.test") -> str:
    return f"{broker.url}?tls=true&tls_ca_file={folder / ca}&tls_domain={domain}"


def test_the_sink_writes_and_the_source_reads_over_tls(
    spark: Any, tls_broker: LocalIggy, authority: tuple[trustme.CA, Path], name: str,
    tmp_path: Path,
) -> None:
    url = tls_url(tls_broker, authority[1])
    feed = Feed(spark, tmp_path, "stream string, topic string, n int")
    feed.add([(name, "events", n) for n in range(50)])
    query = feed.run(url)
    assert query.exception() is None
    rows = (spark.read.format("iggy").option("url", url).option("stream", name)
            .option("topics", "events").load().collect())
    assert sorted(json.loads(r.payload)["n"] for r in rows) == list(range(50))


@pytest.mark.parametrize(("ca", "domain", "problem"), [
    ("other-ca.pem", "iggy.test", "CERTIFICATE_VERIFY_FAILED"),
    ("ca.pem", "elsewhere.test", "CERTIFICATE_VERIFY_FAILED"),
])
def test_a_certificate_the_client_cannot_trust_fails_at_once_saying_tls(
    tls_broker: LocalIggy, authority: tuple[trustme.CA, Path], ca: str, domain: str,
    problem: str,
) -> None:
    options = SourceOptions.from_options({
        "url": tls_url(tls_broker, authority[1], ca, domain), "stream": "s", "topics": "t"})
    with pytest.raises(ServerError, match=f"TLS handshake failed: {problem}") as raised:
        catalog.latest(options)
    assert "tls secret" not in str(raised.value)
    assert raised.value.address == tls_broker.address
