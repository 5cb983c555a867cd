"""A second SparkSession, in a child process with an environment of its own, running the same
Spark reads as the benchmark's session on request.

Why a process: a SparkSession's conf is fixed for its life and a process holds one, and what
decides the decoding path (``IGGY_SPARK_CORE``) is read once per Python process. So "the same
read on the pure-Python path", interleaved round by round with the read on the compiled core in
one benchmark run (:func:`bench.common.paired_rounds`), needs a session in another process::

    with SparkPeer("bench-source-python", PURE_PYTHON) as peer:
        peer.wait()                                          # JVM start-up, never measured
        measure = peer.call("bench.bench_source:spark_read", options={...})

Contract:

* :meth:`SparkPeer.start` runs ``python -m bench.spark_peer SPEC`` from the repository's root;
  :meth:`~SparkPeer.wait` blocks until the child's session is up and its decoding paths are
  probed (:func:`bench.decoding_path.session`, in :attr:`~SparkPeer.paths`), and raises
  :class:`PeerError` if it failed. Start the peer early and wait late: both JVMs then start
  together. ``probe`` names another ``bench`` function ``probe(spark) -> dict[str, str]`` to
  run instead (a peer importing a revision before the compiled core needs one that does not
  import :mod:`postgres_cdc_source.decoding.compiled`: :mod:`bench.bench_pure_path`'s).
* The child puts ``env`` in its own environment (its JVM and the JVM's driver-side Python
  runner inherit it) and sets ``spark.executorEnv.<KEY>`` for each key (the executors' Python
  workers, which run ``read()``, get it from there), then makes its session with
  :func:`bench.common.spark_session` plus ``conf``.
* :meth:`~SparkPeer.call` runs ``module:function`` of ``bench`` in the child as
  ``function(spark, **kwargs)`` (``kwargs`` as JSON) and returns the
  :class:`~bench.common.Measure` it returns. One call at a time; each blocks until the answer
  (or ``call_timeout``). An exception in the child comes back as :class:`PeerError` with the
  child's traceback; the child serves on.
* Protocol: JSON lines, one request on the child's stdin, one answer per request. Answers go
  out on a copy of the child's original stdout taken before anything else runs; the child's
  file descriptor 1 is then pointed at its stderr, so whatever else writes to stdout (``print``,
  the JVM, Spark's logging) lands in the benchmark's stderr with the child's logs and never in
  the answers.
* Lifetime: :meth:`~SparkPeer.close` (the context's exit, also on errors) asks the child to
  stop its session and exit, then terminates and at last kills it. The child also stops when
  its stdin closes, so a benchmark that dies leaves no JVM behind.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict
from importlib import import_module
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from bench import common

if TYPE_CHECKING:
    import psutil

__all__ = ["PROBE", "PURE_PYTHON", "PeerError", "SparkPeer", "serve"]

PURE_PYTHON: Mapping[str, str] = {"IGGY_SPARK_CORE": "python"}
"""The environment of a peer whose pg_cdc decodes on the pure-Python path."""

PROBE = "bench.decoding_path:session"
"""What a peer runs on its session before its hello, for :attr:`SparkPeer.paths`."""

_ROOT = Path(__file__).resolve().parent.parent  # where ``-m bench.spark_peer`` resolves


class PeerError(RuntimeError):
    """The peer failed: did not start, raised in a call, exited or did not answer in time."""


class SparkPeer:
    """The parent's side: starts, calls and stops one child session (see the module's
    docstring for the contract)."""

    def __init__(self, app: str, env: Mapping[str, str], conf: Mapping[str, str] | None = None,
                 *, ready_timeout: float = 600, call_timeout: float = 3600,
                 probe: str = PROBE) -> None:
        self.app = app
        self.env = dict(env)
        self.conf = dict(conf or {})
        self.probe = probe
        self.ready_timeout = ready_timeout
        self.call_timeout = call_timeout
        self._child: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._hello: dict[str, Any] | None = None
        self._jvm: psutil.Process | None = None

    def __enter__(self) -> SparkPeer:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Start the child (it begins making its session); returns at once."""
        if self._child is not None:
            return
        spec = json.dumps({"app": self.app, "env": self.env, "conf": self.conf,
                           "probe": self.probe})
        common.log(f"peer {self.app}: starting a Spark session with {self.env}")
        self._child = subprocess.Popen(
            [sys.executable, "-m", "bench.spark_peer", spec], cwd=_ROOT,
            env={**os.environ, **self.env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def wait(self) -> dict[str, Any]:
        """Block until the child's session is ready; its hello: ``pid``, ``jvm_pid``, ``paths``."""
        if self._hello is None:
            self.start()
            self._hello = self._receive(self.ready_timeout, "to start its session")
            self._jvm = _process(self.jvm_pid)
            common.log(f"peer {self.app}: ready (pid {self.pid}, JVM {self.jvm_pid}), "
                       f"decoding paths {self.paths}")
        return self._hello

    @property
    def pid(self) -> int:
        return int(self.wait()["pid"])

    @property
    def jvm_pid(self) -> int:
        return int(self.wait()["jvm_pid"])

    @property
    def paths(self) -> dict[str, str]:
        """The child's decoding paths (:func:`bench.decoding_path.session`, or ``probe``'s)."""
        return dict(self.wait()["paths"])

    def call(self, function: str, **kwargs: Any) -> common.Measure:
        """``function(spark, **kwargs)`` in the child (``"bench.module:function"``)."""
        self.wait()
        self._send({"call": function, "kwargs": kwargs})
        answer = self._receive(self.call_timeout, f"to run {function}")
        return common.Measure(**answer["measure"])

    def close(self) -> None:
        """Stop the child's session and the child; safe to call twice, or if it never started."""
        child, self._child = self._child, None
        if child is None:
            return
        try:
            if child.poll() is None:
                self._stop(child)
        finally:
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    stream.close()
            self._reap_jvm()

    def _reap_jvm(self) -> None:
        """Wait for the child's JVM to follow it (it exits when its parent's pipe closes);
        kill it if it has not in 30 s. psutil tells a reused pid from the JVM."""
        import psutil

        jvm = self._jvm
        if jvm is None:
            return
        try:
            jvm.wait(timeout=30)
        except psutil.TimeoutExpired:
            common.log(f"peer {self.app}: its JVM {jvm.pid} outlived it; killing it")
            jvm.kill()
        except psutil.Error:
            pass  # gone already

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        try:
            assert child.stdin is not None
            child.stdin.write(b'{"stop": true}\n')
            child.stdin.flush()
        except OSError:
            pass  # already gone
        steps: list[tuple[str, Callable[[], None]]] = [
            ("stop", lambda: None), ("terminate", child.terminate), ("kill", child.kill)]
        for name, step in steps:
            if name != "stop":
                common.log(f"peer {self.app}: did not stop in time; {name}")
            step()
            try:
                child.wait(timeout=60.0 if name == "stop" else 20.0)
                return
            except subprocess.TimeoutExpired:
                continue

    def _send(self, message: Mapping[str, Any]) -> None:
        child = self._running()
        assert child.stdin is not None
        try:
            child.stdin.write(json.dumps(message).encode() + b"\n")
            child.stdin.flush()
        except OSError as exc:
            raise PeerError(f"peer {self.app} is gone (exit status {child.poll()})") from exc

    def _receive(self, timeout: float, doing: str) -> dict[str, Any]:
        """The child's next answer line, raising :class:`PeerError` for an error answer, an
        exit or ``timeout`` seconds of silence."""
        child = self._running()
        assert child.stdout is not None
        fd = child.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerError(f"peer {self.app} took more than {timeout:.0f}s {doing}")
            if select.select([fd], [], [], remaining)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise PeerError(f"peer {self.app} exited (status {child.wait()}) {doing}; "
                                    "its log is above")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise PeerError(f"peer {self.app} failed {doing}:\n{answer['error']}")
        return answer

    def _running(self) -> subprocess.Popen[bytes]:
        if self._child is None:
            raise PeerError(f"peer {self.app} is not running")
        return self._child


def _process(pid: int) -> psutil.Process | None:
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


# -- the child's side ------------------------------------------------------------------------------


def _function(name: str) -> Callable[..., Any]:
    module, _, attribute = name.partition(":")
    if not module.startswith("bench.") or not attribute:
        raise ValueError(f"bad function {name!r}: give 'bench.<module>:<function>'")
    function: Callable[..., Any] = getattr(import_module(module), attribute)
    return function


def serve(spec: Mapping[str, Any], requests: IO[str], answers: IO[str]) -> None:
    """The child's loop: make the session, say hello, answer requests until told to stop or
    ``requests`` ends; the session is stopped in every case."""
    def answer(message: Mapping[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    env: dict[str, str] = dict(spec["env"])
    os.environ.update(env)
    conf = {**{f"spark.executorEnv.{key}": value for key, value in env.items()},
            **spec.get("conf", {})}
    try:
        spark = common.spark_session(str(spec["app"]), conf)
    except Exception as exc:
        answer({"error": "".join(traceback.format_exception(exc))})
        raise
    try:
        answer({"ready": True, "pid": os.getpid(),
                "jvm_pid": int(spark.sparkContext._gateway.proc.pid),  # type: ignore[union-attr]
                "paths": _function(str(spec.get("probe", PROBE)))(spark)})
        for line in requests:
            request = json.loads(line)
            if request.get("stop"):
                break
            try:
                measure = _function(request["call"])(spark, **request.get("kwargs", {}))
                answer({"measure": asdict(measure)})
            except Exception as exc:
                answer({"error": "".join(traceback.format_exception(exc))})
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.spark_peer SPEC``: SPEC is JSON ``{"app", "env", "conf", "probe"}``."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # everything else on stdout -> stderr
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally: stop the JVM
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(main.__doc__, file=sys.stderr)
        return 2
    serve(json.loads(args[0]), sys.stdin, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
