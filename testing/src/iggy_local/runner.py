"""``LocalIggy``: start and stop the local broker from tests, notebooks and demos.

Two ways to run it, same wire behaviour:

* ``process=False`` (default) serves from a daemon thread of the calling process, with its own
  event loop. Cheapest to start; :meth:`LocalIggy.kill` is the same as :meth:`LocalIggy.stop`.
* ``process=True`` runs ``python -m iggy_local`` as a child (``sys.executable``), so a
  test can SIGKILL it mid-stream and start it again on the same port and data directory: the
  fault a real deployment sees when its broker dies.

The port is fixed on the first :meth:`LocalIggy.start` (``port=0`` lets the OS pick) and kept
across restarts, so clients with reconnection enabled find the broker again.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO
from urllib.parse import quote

from .dialects import dialect
from .server import BrokerServer, run_broker

PASSWORD_ENV = "IGGY_LOCAL_PASSWORD"
"""The child reads the password from here, so it never shows up in a process listing."""

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
_LISTENING = re.compile(rb"listening on (\S+):(\d+)")
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


class LocalIggy:
    """A local Iggy-protocol broker on ``host:port``, driven by the real ``apache-iggy`` SDK.

    ``with LocalIggy() as broker:`` starts it and stops it; ``broker.address`` is what
    ``IggyClient`` takes and ``broker.url`` what the sink's ``url`` option takes. With
    ``data_dir`` every acknowledged write is fsynced there and survives restarts; with ``tls``
    (an ``ssl.SSLContext`` holding the server's certificate) it speaks TLS. ``server`` is the
    Iggy server line it speaks (``0.9`` or ``0.10``; default ``$IGGY_LOCAL_SERVER``, else
    ``0.9``): it refuses SDKs of the other line at login, as that server does.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        username: str = "iggy",
        password: str = "iggy",
        process: bool = False,
        tls: ssl.SSLContext | None = None,
        server: str | None = None,
    ) -> None:
        if tls is not None and process:
            raise ValueError("tls works with the in-process broker (process=False)")
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.username = username
        self._password = password
        self.process = process
        self.tls = tls
        """Serves TLS with this context (thread mode); clients need ``tls=true`` in the URL."""
        self.dialect = dialect(server)
        """The protocol line it speaks (:mod:`iggy_local.dialects`)."""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._child_log: IO[bytes] | None = None
        self._refused_sends: dict[tuple[str, str], int] = {}
        self._server: BrokerServer | None = None

    # -- public surface -----------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` for ``IggyClient``; a wildcard bind is reached through loopback."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        host = "::1" if host == "::" else host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """``iggy://user:password@host:port``, the form the sink's ``url`` option takes."""
        return f"iggy://{quote(self.username, safe='')}:{quote(self._password, safe='')}@" + (
            self.address
        )

    @property
    def running(self) -> bool:
        if self.process:
            return self._child is not None and self._child.poll() is None
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> LocalIggy:
        """Start serving (no-op if already running); return once the port accepts connections."""
        if self.running:
            return self
        self._reap()
        if self.process:
            self._start_child()
        else:
            self._start_thread()
        return self

    def stop(self) -> None:
        """Stop serving and drop every client connection; idempotent."""
        if self._child is not None:
            self._child.send_signal(signal.SIGTERM)
            try:
                self._child.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._child.kill()
        if self._thread is not None and self._loop is not None and self._stop is not None:
            if self._thread.is_alive():
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(STOP_TIMEOUT)
        self._reap()

    def refuse_sends(
        self, stream: str, topic: str, refuse: bool = True, *, after: int = 0
    ) -> None:
        """Test-only fault switch: make sends to ``stream/topic`` fail with a server error
        once the topic holds ``after`` messages (``refuse=False`` heals it), so a test can break
        one destination while others flow, or stop a batch part way through its sends.

        Thread mode only; the map is read by the broker's loop on every send (a dict lookup,
        atomic under the GIL).
        """
        if self.process:
            raise RuntimeError("refuse_sends works with the in-process broker (process=False)")
        if refuse:
            self._refused_sends[stream, topic] = after
        else:
            self._refused_sends.pop((stream, topic), None)

    def accepted(self) -> int:
        """Client connections accepted so far: a mark for :meth:`open_since` (thread mode)."""
        return self._thread_server().accepted

    def open_since(self, mark: int) -> int:
        """Connections accepted after ``mark`` still being served (thread mode). The broker reads
        a connection's end after every frame sent on it, so once a killed client's connections
        are gone, all it had sent has been read: a test heals a fault (:meth:`refuse_sends`)
        only then, or frames still in a socket would be taken after it."""
        return self._thread_server().open_since(mark)

    def messages(self, stream: str, topic: str) -> int:
        """Messages topic ``stream/topic`` (names) holds, 0 while it does not exist (thread
        mode): read off the broker's store, so counting opens no connection of its own."""
        found = self._thread_server().store.find_topic(stream, topic)
        return 0 if found is None else sum(p.next_offset for p in found.partitions)

    def _thread_server(self) -> BrokerServer:
        if self._server is None:
            raise RuntimeError("connection counts work with the in-process broker "
                               "(process=False)")
        return self._server

    def kill(self) -> None:
        """Crash the broker: SIGKILL in process mode (no flush, no goodbye); else :meth:`stop`."""
        if self._child is None:
            self.stop()
            return
        self._child.kill()
        self._reap()

    def __enter__(self) -> LocalIggy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        mode = "process" if self.process else "thread"
        return (
            f"LocalIggy(address={self.address!r}, server={self.dialect.server!r}, "
            f"mode={mode!r}, data_dir={self.data_dir!r}, username={self.username!r}, "
            f"running={self.running})"
        )

    # -- thread mode ----------------------------------------------------------------------------

    def _start_thread(self) -> None:
        ready = threading.Event()
        failures: list[BaseException] = []

        def on_ready(server: BrokerServer) -> None:
            self.port = server.port
            self._server = server
            ready.set()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await run_broker(
                data_dir=self.data_dir, host=self.host, port=self.port, username=self.username,
                password=self._password, stop=self._stop, on_ready=on_ready,
                refused_sends=self._refused_sends, tls=self.tls, dialect=self.dialect,
            )

        def target() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:  # reported to start(); the thread must not die silently
                failures.append(exc)
                ready.set()

        self._thread = threading.Thread(target=target, name="local-iggy", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT) or failures:
            self._thread.join(STOP_TIMEOUT)
            self._reap()
            raise RuntimeError(f"local Iggy broker on {self.address} did not start") from (
                failures[0] if failures else None
            )

    # -- process mode ---------------------------------------------------------------------------

    def _start_child(self) -> None:
        command = [
            sys.executable, "-m", "iggy_local", "--host", self.host,
            "--port", str(self.port), "--username", self.username,
            "--server", self.dialect.server,
        ]
        if self.data_dir is not None:
            command += ["--data-dir", str(self.data_dir)]
        python_path = os.pathsep.join(
            filter(None, [str(_SOURCE_ROOT), os.environ.get("PYTHONPATH")])
        )
        env = {**os.environ, "PYTHONPATH": python_path, PASSWORD_ENV: self._password}
        # Lives as long as the child (closed by _reap), so no context manager.
        self._child_log = tempfile.TemporaryFile(prefix="local-iggy-")  # noqa: SIM115
        self._child = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self._child_log,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            match = _LISTENING.search(self._read_child_log())
            if match:
                self.port = int(match.group(2))
                return
            if self._child.poll() is not None:
                break
            time.sleep(0.02)
        output = self._read_child_log().decode(errors="replace")[-4000:]
        self.kill()
        raise RuntimeError(f"local Iggy broker process did not start; its log:\n{output}")

    def _read_child_log(self) -> bytes:
        assert self._child_log is not None
        self._child_log.seek(0)
        return self._child_log.read()

    def _reap(self) -> None:
        """Forget a finished thread or child so the next start begins clean."""
        if self._child is not None:
            self._child.wait()
            self._child = None
        if self._child_log is not None:
            self._child_log.close()
            self._child_log = None
        self._thread = self._loop = self._stop = None
