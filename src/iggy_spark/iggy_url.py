"""``iggy://user:password@host:port?tls=true``: where the sink connects and as whom.

One string carries everything the SDK's ``TcpConfig`` needs, in the same shape as the Iggy
SDKs' own connection strings, so it fits in a single Spark option. The password must reach the
executors (the URL is pickled with the options) but must never reach a log line, a Spark UI
page or an error message: ``repr``/``str`` redact it, and no error raised while parsing quotes
the URL or any piece of it that could hold the password.

Special characters in the user name or password (``@ : / ? # %``) must be percent-encoded,
as in any URL.

Query parameters (all optional; they map one-to-one onto ``apache_iggy.TcpConfig``):

=========================  ==================================================================
``tls``                    ``true`` to connect over TLS (default ``false``)
``tls_domain``             name the server certificate must carry (default: the host)
``tls_ca_file``            CA bundle to validate the server certificate against
``tls_validate_certificate``  ``false`` accepts any certificate (development only)
``reconnection_retries``   reconnect passes before a call fails (default: unlimited, which
                           makes calls wait for as long as the server is down)
``reconnection_interval``  pause between reconnect passes (duration, default 1s)
``heartbeat_interval``     client heartbeat period (duration, default 5s)
``nodelay``                ``false`` re-enables Nagle's algorithm (default ``true``: the sink
                           waits for every acknowledgement, and Nagle plus delayed ACKs would
                           add up to 40 ms to each request)
=========================  ==================================================================
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode, urlsplit

from connector_common.units import parse_bool, parse_int, parse_positive_duration
from iggy_spark.errors import ConfigError

if TYPE_CHECKING:
    import apache_iggy

__all__ = ["DEFAULT_PORT", "IggyUrl"]

DEFAULT_PORT = 8090
_SCHEMES = ("iggy", "iggy+tcp")
_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252}[A-Za-z0-9_])?")
_EXAMPLE = "iggy://user:password@localhost:8090"
_REDACTED = "***"


def _retries(text: str) -> int:
    return parse_int(text, minimum=0, maximum=2**32 - 1)


# Query parameter -> parser; the order is the canonical order used by IggyUrl.format().
_PARAMS: dict[str, Callable[[str], Any]] = {
    "tls": parse_bool,
    "tls_domain": str,
    "tls_ca_file": str,
    "tls_validate_certificate": parse_bool,
    "reconnection_retries": _retries,
    "reconnection_interval": parse_positive_duration,
    "heartbeat_interval": parse_positive_duration,
    "nodelay": parse_bool,
}


def _fail(problem: str) -> ConfigError:
    return ConfigError("url", problem)


def _format_duration(value: timedelta) -> str:
    micros = value // timedelta(microseconds=1)
    if micros % 1000 == 0:
        return f"{micros // 1000}ms"
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}s"


@dataclass(frozen=True)
class IggyUrl:
    """A parsed ``iggy://`` URL. ``None`` query settings leave the SDK's default in place."""

    host: str
    port: int
    username: str
    password: str
    tls: bool = False
    tls_domain: str | None = None
    tls_ca_file: str | None = None
    tls_validate_certificate: bool = True
    reconnection_retries: int | None = None
    reconnection_interval: timedelta | None = None
    heartbeat_interval: timedelta | None = None
    nodelay: bool = True

    @classmethod
    def parse(cls, url: str) -> IggyUrl:
        """Parse and validate ``url``; raises :class:`ConfigError` for option ``url``."""
        scheme, sep, rest = url.strip().partition("://")
        if not sep or scheme.lower() not in _SCHEMES:
            raise _fail(f"must look like {_EXAMPLE} (only the TCP transport is supported)")
        userinfo, at, _ = rest.rpartition("@")
        if not at:
            raise _fail(f"user name and password are missing; use {_EXAMPLE}")
        if any(ch in userinfo for ch in "/?#"):
            # Without this check urlsplit would cut the password at that character and later
            # messages could echo the remainder as a host or a query parameter.
            raise _fail("characters / ? # in the user name or password must be percent-encoded")
        try:
            parts = urlsplit(f"iggy://{rest}")
            hostname = parts.hostname
        except ValueError:  # bracketed host that is not an IPv6 address
            raise _fail("the host is not a valid host name or IP address") from None
        username, password = unquote(parts.username or ""), unquote(parts.password or "")
        if not username or not password:
            raise _fail("user name and password are both required")
        if parts.path not in ("", "/") or parts.fragment:
            raise _fail("a path or #fragment is not allowed after host:port")
        settings = _parse_query(parts.query)
        _check_tls(settings)
        return cls(_host(hostname), _port(parts), username, password, **settings)

    @property
    def server_address(self) -> str:
        """``host:port`` as ``TcpConfig`` wants it (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def format(self, *, reveal_password: bool = False) -> str:
        """The canonical URL; the password is ``***`` unless ``reveal_password`` is set."""
        secret = quote(self.password, safe="") if reveal_password else _REDACTED
        query = urlencode(self._non_default_params())
        user = quote(self.username, safe="")
        return f"iggy://{user}:{secret}@{self.server_address}" + (f"?{query}" if query else "")

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"IggyUrl({self.format()!r})"

    def to_tcp_config(self) -> apache_iggy.TcpConfig:
        """The SDK configuration, logging in as the URL's user on every (re)connect."""
        import apache_iggy  # lazily: the driver parses options without needing the SDK loaded

        reconnection = None
        if self.reconnection_retries is not None or self.reconnection_interval is not None:
            reconnection = apache_iggy.TcpReconnectionConfig(
                max_retries=self.reconnection_retries, interval=self.reconnection_interval
            )
        return apache_iggy.TcpConfig(
            server_address=self.server_address,
            auto_login=apache_iggy.AutoLogin.username_password(self.username, self.password),
            reconnection=reconnection,
            heartbeat_interval=self.heartbeat_interval,
            tls_enabled=self.tls,
            tls_domain=self.tls_domain,
            tls_ca_file=self.tls_ca_file,
            tls_validate_certificate=self.tls_validate_certificate,
            nodelay=self.nodelay,
        )

    def _non_default_params(self) -> list[tuple[str, str]]:
        defaults = {f.name: f.default for f in fields(self)}
        pairs = []
        for name in _PARAMS:
            value = getattr(self, name)
            if value == defaults[name]:
                continue
            if isinstance(value, bool):
                text = str(value).lower()
            elif isinstance(value, timedelta):
                text = _format_duration(value)
            else:
                text = str(value)
            pairs.append((name, text))
        return pairs


def _host(hostname: str | None) -> str:
    if not hostname:
        raise _fail("the host is missing")
    if ":" in hostname:
        try:
            return str(ipaddress.IPv6Address(hostname))
        except ValueError:
            raise _fail("the host is not a valid IPv6 address") from None
    if not _HOST_NAME.fullmatch(hostname):
        raise _fail(f"the host {hostname!r} is not a valid host name or IP address")
    return hostname


def _port(parts: SplitResult) -> int:
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port is None:
        return DEFAULT_PORT
    if not 1 <= port <= 65535:
        raise _fail("the port must be a number between 1 and 65535")
    return int(port)


def _parse_query(query: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise _fail("the query string is malformed; use ?name=value&name=value") from None
    for name, text in pairs:
        parser = _PARAMS.get(name)
        if parser is None:
            close = difflib.get_close_matches(name, _PARAMS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(_PARAMS)}"
            raise _fail(f"unknown query parameter {name!r}{hint}")
        if name in settings:
            raise _fail(f"query parameter {name!r} is given twice")
        if not text:
            raise _fail(f"query parameter {name!r} has no value")
        try:
            settings[name] = parser(text)
        except ValueError as exc:
            raise _fail(f"query parameter {name!r}: {exc}") from None
    return settings


def _check_tls(settings: dict[str, Any]) -> None:
    """Refuse TLS settings the SDK would keep but never consult: they would pin nothing."""
    for name in ("tls_domain", "tls_ca_file", "tls_validate_certificate"):
        if name in settings and not settings.get("tls", False):
            raise _fail(f"query parameter {name!r} only applies with tls=true")
    if "tls_ca_file" in settings and not settings.get("tls_validate_certificate", True):
        raise _fail("tls_ca_file is ignored when tls_validate_certificate=false; drop one of them")
