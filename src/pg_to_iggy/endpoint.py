"""The metrics endpoint's HTTP server: bounded, timed, with TLS and basic auth.

``prometheus_client.start_http_server`` starts a thread per connection without a bound and
never times a client out, and it has no basic auth (only its Pushgateway client has), so
:func:`~pg_to_iggy.metrics.serve_metrics` serves prometheus_client's WSGI app on this server:
at most :data:`WORKERS` requests at once (a connection past them is closed at accept), each
socket read or write, the TLS handshake included, given up after :data:`CLIENT_TIMEOUT`
seconds.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

__all__ = ["CLIENT_TIMEOUT", "WORKERS", "BoundedServer", "tls_context", "with_basic_auth"]

log = logging.getLogger(__name__)

WORKERS = 4
"""Requests served at once: Prometheus scrapes one at a time; more are closed at accept."""
CLIENT_TIMEOUT = 10.0
"""Seconds a client may take for each read or write of its request and reply (and for the TLS
handshake) before its connection is closed."""


class _QuietHandler(WSGIRequestHandler):
    """A request handler that logs nothing per request (a scrape every few seconds)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class BoundedServer(WSGIServer):
    """A WSGI server that serves at most :data:`WORKERS` requests at once, each in a thread of
    its own, and closes a connection past them at accept; every client socket gets
    :data:`CLIENT_TIMEOUT` before the TLS handshake (done in that thread, not in the accepting
    one, so a client that never finishes it holds one worker for that long at most, never the
    port)."""

    def __init__(self, addr: str, port: int, tls: ssl.SSLContext | None) -> None:
        # as prometheus_client does: the address's family, so "::" binds IPv6
        self.address_family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM,
                                                 flags=socket.AI_PASSIVE)[0][0]
        super().__init__((addr, port), _QuietHandler)
        self.workers = WORKERS
        self.slots = threading.BoundedSemaphore(WORKERS)
        self.timeout_seconds = CLIENT_TIMEOUT
        self.tls = tls

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning("serve_metrics: %d requests in progress, closing a connection from %s",
                        self.workers, client_address[0])
            self.shutdown_request(request)
            return
        threading.Thread(target=self._serve, args=(request, client_address),
                         name="serve_metrics", daemon=True).start()

    def _serve(self, request: socket.socket, client_address: Any) -> None:
        conn = request
        try:
            request.settimeout(self.timeout_seconds)
            if self.tls is not None:
                conn = self.tls.wrap_socket(request, server_side=True)
            self.finish_request(conn, client_address)
        except OSError as exc:  # a slow, gone or non-TLS client (ssl.SSLError too): its loss
            log.debug("serve_metrics: connection from %s: %s", client_address[0], exc)
        finally:
            self.shutdown_request(conn)
            self.slots.release()


def with_basic_auth(app: Callable[..., Iterable[bytes]], user: str, password: str
                ) -> Callable[..., Iterable[bytes]]:
    """``app`` behind HTTP basic auth (prometheus_client serves TLS but not this): a request
    without ``user:password`` gets 401; compared in constant time."""
    expected = f"{user}:{password}".encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        try:
            given = base64.b64decode(token, validate=True)
        except (binascii.Error, ValueError):
            given = b""
        if scheme.lower() == "basic" and hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="metrics"'),
                                            ("Content-Type", "text/plain")])
        return [b"401 Unauthorized\n"]

    return guarded


def tls_context(certfile: str, keyfile: str | None, client_cafile: str | None
                 ) -> ssl.SSLContext:
    """A server context with the certificate; with ``client_cafile``, clients must present a
    certificate it signed (mutual TLS)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    if client_cafile is not None:
        context.load_verify_locations(client_cafile)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
