"""``iggy://`` URL parsing: every accepted form round-trips, every bad one names ``url``, and
the password never shows up in text meant for people."""

from __future__ import annotations

import pickle
from datetime import timedelta
from urllib.parse import quote

import apache_iggy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from iggy_spark.errors import ConfigError
from iggy_spark.iggy_url import DEFAULT_PORT, IggyUrl

SECRET = "s3cr3t-PW"


def test_minimal_url() -> None:
    url = IggyUrl.parse(f"iggy://iggy:{SECRET}@localhost")
    assert (url.host, url.port, url.username, url.password) == (
        "localhost",
        DEFAULT_PORT,
        "iggy",
        SECRET,
    )
    assert not url.tls and url.tls_validate_certificate


def test_all_query_parameters() -> None:
    url = IggyUrl.parse(
        f"iggy+tcp://u:{SECRET}@broker.example:9090?tls=true&tls_domain=iggy.example"
        "&tls_ca_file=/etc/ca.pem&reconnection_retries=3&reconnection_interval=500ms"
        "&heartbeat_interval=2s&nodelay=true"
    )
    assert url.tls and url.tls_domain == "iggy.example" and url.tls_ca_file == "/etc/ca.pem"
    assert url.reconnection_retries == 3
    assert url.reconnection_interval == timedelta(milliseconds=500)
    assert url.heartbeat_interval == timedelta(seconds=2)
    assert url.nodelay


def test_percent_encoded_credentials() -> None:
    url = IggyUrl.parse("iggy://us%40er:p%40ss%2Fw%3Fo%23rd%3A@h:1")
    assert (url.username, url.password) == ("us@er", "p@ss/w?o#rd:")


def test_ipv6_host() -> None:
    url = IggyUrl.parse(f"iggy://u:{SECRET}@[::1]:8091")
    assert url.host == "::1" and url.server_address == "[::1]:8091"


@pytest.mark.iggy_line
def test_tcp_config_carries_every_setting() -> None:
    url = IggyUrl.parse(
        f"iggy://u:{SECRET}@h:9000?tls=true&tls_domain=d&tls_ca_file=/ca"
        "&reconnection_retries=2&reconnection_interval=3s&heartbeat_interval=4s"
    )
    config = url.to_tcp_config()
    assert isinstance(config, apache_iggy.TcpConfig)
    assert config.server_address == "h:9000"
    assert config.auto_login.enabled and config.auto_login.username == "u"
    assert config.tls_enabled and config.tls_domain == "d" and config.tls_ca_file == "/ca"
    assert config.reconnection.max_retries == 2
    assert config.reconnection.interval == timedelta(seconds=3)
    assert config.heartbeat_interval == timedelta(seconds=4)
    assert SECRET not in repr(config)


@pytest.mark.iggy_line
def test_tcp_config_keeps_sdk_defaults() -> None:
    config = IggyUrl.parse(f"iggy://u:{SECRET}@h").to_tcp_config()
    assert config.reconnection.max_retries is None and not config.tls_enabled
    assert config.tls_validate_certificate


def test_password_is_redacted_but_survives_pickle() -> None:
    url = IggyUrl.parse(f"iggy://u:{SECRET}@h:1?tls=true")
    for text in (str(url), repr(url), url.format(), repr([url]), f"{url}"):
        assert SECRET not in text and "***" in text
    assert SECRET in url.format(reveal_password=True)
    assert pickle.loads(pickle.dumps(url)) == url


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("", "must look like"),
        ("localhost:8090", "must look like"),
        (f"http://u:{SECRET}@h", "TCP"),
        (f"quic://u:{SECRET}@h", "TCP"),
        ("iggy://h:8090", "missing"),
        (f"iggy://:{SECRET}@h", "both required"),
        ("iggy://u:@h", "both required"),
        ("iggy://u@h", "both required"),
        (f"iggy://u:{SECRET}@", "host is missing"),
        (f"iggy://u:{SECRET}@h:0", "port"),
        (f"iggy://u:{SECRET}@h:65536", "port"),
        (f"iggy://u:{SECRET}@h:port", "port"),
        (f"iggy://u:{SECRET}@h:-1", "port"),
        (f"iggy://u:{SECRET}@[zz::1]:1", "host"),
        (f"iggy://u:{SECRET}@[::1:1", "host"),
        (f"iggy://u:{SECRET}@bad host:1", "host"),
        (f"iggy://u:{SECRET}@h/db", "path"),
        (f"iggy://u:{SECRET}@h#frag", "path"),
        (f"iggy://u:{SECRET}@h?tls", "malformed"),
        (f"iggy://u:{SECRET}@h?tsl=true", "did you mean 'tls'"),
        (f"iggy://u:{SECRET}@h?zzz=1", "known:"),
        (f"iggy://u:{SECRET}@h?tls=yes", "true or false"),
        (f"iggy://u:{SECRET}@h?tls=true&tls=true", "twice"),
        (f"iggy://u:{SECRET}@h?tls=", "no value"),
        (f"iggy://u:{SECRET}@h?tls_domain=x", "only applies with tls=true"),
        (f"iggy://u:{SECRET}@h?tls_ca_file=/x", "only applies with tls=true"),
        (f"iggy://u:{SECRET}@h?tls=true&tls_ca_file=/x&tls_validate_certificate=false",
         "ignored"),
        (f"iggy://u:{SECRET}@h?reconnection_retries=-1", "whole number"),
        (f"iggy://u:{SECRET}@h?reconnection_retries=4294967296", "between"),
        (f"iggy://u:{SECRET}@h?heartbeat_interval=0s", "greater than zero"),
        (f"iggy://u:{SECRET}@h?reconnection_interval=soon", "duration"),
    ],
)
def test_bad_urls_name_the_option_and_hide_the_password(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="option 'url'") as caught:
        IggyUrl.parse(url)
    assert fragment in str(caught.value)
    assert caught.value.option == "url"
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)


@pytest.mark.parametrize("char", list("/?#"))
def test_unencoded_special_characters_do_not_leak(char: str) -> None:
    leaky = f"iggy://u:{SECRET}{char}tail{SECRET}@h:1?tls=true"
    with pytest.raises(ConfigError, match="percent-encoded") as caught:
        IggyUrl.parse(leaky)
    assert SECRET not in str(caught.value) and "tail" not in str(caught.value)


_host = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,18}[a-z0-9])?", fullmatch=True)
_any_text = st.text(min_size=1, max_size=30).filter(lambda s: s.strip() == s)


@given(
    username=_any_text,
    password=_any_text,
    host=_host,
    port=st.integers(1, 65535),
    tls=st.booleans(),
    retries=st.none() | st.integers(0, 2**32 - 1),
    interval=st.none() | st.integers(1, 10**9).map(lambda us: timedelta(microseconds=us)),
)
def test_format_parse_round_trip(
    username: str,
    password: str,
    host: str,
    port: int,
    tls: bool,
    retries: int | None,
    interval: timedelta | None,
) -> None:
    url = IggyUrl(
        host=host,
        port=port,
        username=username,
        password=password,
        tls=tls,
        tls_domain="d.example" if tls else None,
        reconnection_retries=retries,
        reconnection_interval=interval,
    )
    assert IggyUrl.parse(url.format(reveal_password=True)) == url
    if password != "***":
        assert f":{quote(password, safe='')}@" not in str(url) + repr(url)
