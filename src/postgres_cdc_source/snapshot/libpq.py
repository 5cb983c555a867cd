"""The rows of a ``COPY ... TO STDOUT`` read by the compiled core straight from the libpq that
psycopg uses, a fetch's worth at a time.

libpq hands COPY out one row per ``PQgetCopyData`` call, and psycopg's :class:`~psycopg.Copy`
makes each a Python object: about as costly per row as the core writing the row's JSON. So
where the core is installed the COPY is started and finished through psycopg's own low-level
connection (:class:`psycopg.pq.PGconn`: its results, and its errors raised as psycopg raises
them), and the rows in between are read and written by the core's
:meth:`iggy_spark_core.CopyRows.read` with that libpq's ``PQgetCopyData`` on the connection's
``pgconn_ptr``: each row where libpq put it, the GIL released while they arrive.

The libpq is found once per process, by its path among the files the process maps (psycopg's
binary package bundles its own; its C and Python implementations load the system's), and used
for a connection only when that library's ``PQbackendPID`` of the connection is the
connection's own backend PID. Anywhere else (no such file, two of them, no ``/proc``) the rows
are read through :class:`~psycopg.Copy` and handed to :meth:`~iggy_spark_core.CopyRows.rows`
joined.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import psycopg
from psycopg import errors, pq

__all__ = ["CopyReader", "copy_out"]

log = logging.getLogger(__name__)

_LIBPQ = re.compile(r"libpq(-[0-9a-f]+)?\.so(\.[0-9]+)*")
_MAPS = "/proc/self/maps"


@dataclass(frozen=True)
class _Libpq:
    """The addresses the core calls, and the check that a connection is this library's."""

    get_copy_data: int
    freemem: int
    backend_pid: Callable[[int], int]


class CopyReader(Protocol):
    """What turns COPY's rows into a result (:class:`iggy_spark_core.CopyRows`): from the
    connection itself, or from whole lines read through psycopg."""

    def read(self, conn: int, get_copy_data: int, freemem: int, max_rows: int
             ) -> tuple[Any, ...]:
        """Up to ``max_rows`` rows read from the ``PGconn *`` ``conn`` with its libpq's
        ``PQgetCopyData`` and ``PQfreemem``: the result's items, then the state after them
        (0: more may follow, -1: the COPY ended, -2: libpq failed)."""
        ...

    def rows(self, data: bytes) -> tuple[Any, ...]:
        """The result's items for ``data``, whole lines."""
        ...


def copy_out(
    conn: psycopg.Connection[Any], statement: str, rows: int, reader: CopyReader
) -> Iterator[tuple[Any, ...]]:
    """What ``reader`` makes of the rows of ``statement`` (a ``COPY ... TO STDOUT``), about
    ``rows`` rows at a time: read from the connection by the core where this process's libpq
    is found and vouches for it, else through psycopg."""
    found = _libpq()
    pgconn = conn.pgconn
    # documented on psycopg's PGconn, though not on its protocol (pq.abc)
    pointer: int | None = pgconn.pgconn_ptr  # type: ignore[attr-defined]
    if found is None or pointer is None or found.backend_pid(pointer) != pgconn.backend_pid:
        for lines in _through_psycopg(conn, statement, rows):
            yield reader.rows(lines)
        return
    encoding = conn.info.encoding
    nonblocking = pgconn.nonblocking
    pgconn.nonblocking = 0  # sending flushes and results wait, as psycopg's own waits do
    try:
        pgconn.send_query(statement.encode(encoding))
        _expect(pgconn, pgconn.get_result(), pq.ExecStatus.COPY_OUT, encoding)
        state = 0
        while state == 0:
            *result, state = reader.read(pointer, found.get_copy_data, found.freemem, rows)
            yield tuple(result)
        if state != -1:  # libpq's own failure: the connection, not the statement
            raise psycopg.OperationalError(
                f"reading COPY failed: {pgconn.get_error_message(encoding)}")
        _expect(pgconn, pgconn.get_result(), pq.ExecStatus.COMMAND_OK, encoding)
        while pgconn.get_result() is not None:  # the end of the statement's results
            pass
    finally:
        pgconn.nonblocking = nonblocking


def _expect(
    pgconn: pq.abc.PGconn, result: pq.abc.PGresult | None, status: pq.ExecStatus, encoding: str
) -> None:
    """Raise the error ``result`` carries, as psycopg raises it, unless it has ``status``;
    after an error the connection's results are all taken, so that it is idle again."""
    if result is not None and result.status == status:
        return
    while pgconn.get_result() is not None:
        pass
    if result is None:
        raise psycopg.OperationalError("the server sent no result for the COPY")
    if result.status == pq.ExecStatus.FATAL_ERROR:
        raise errors.error_from_result(result, encoding=encoding)
    raise psycopg.ProgrammingError(
        f"COPY gave {pq.ExecStatus(result.status).name}, not {status.name}")


def _through_psycopg(conn: psycopg.Connection[Any], statement: str, rows: int) -> Iterator[bytes]:
    """The same lines through :class:`~psycopg.Copy`: COPY out sends one row per message."""
    with conn.cursor() as cur, cur.copy(statement) as copy:
        pending: list[bytes] = []
        for data in copy:
            pending.append(bytes(data))
            if len(pending) >= rows:
                yield b"".join(pending)
                pending = []
        if pending:
            yield b"".join(pending)


@cache
def _libpq() -> _Libpq | None:
    """The libpq this process loaded, if exactly one and of psycopg's libpq version."""
    try:
        with open(_MAPS, encoding="utf-8", errors="replace") as maps:
            paths = {line.split(maxsplit=5)[5].strip() for line in maps
                     if line.count(" ") >= 5 and "/" in line}
    except OSError:
        return None
    found = sorted(p for p in paths if _LIBPQ.fullmatch(os.path.basename(p)))
    if len(found) != 1:
        log.debug("pg_cdc: %d libpq libraries mapped (%s): COPY read through psycopg",
                  len(found), found)
        return None
    lib = ctypes.CDLL(found[0])  # loaded already: the same library, not a second copy
    if lib.PQlibVersion() != pq.version():
        return None
    backend_pid = lib.PQbackendPID
    backend_pid.argtypes, backend_pid.restype = [ctypes.c_void_p], ctypes.c_int
    return _Libpq(_address(lib.PQgetCopyData), _address(lib.PQfreemem), backend_pid)


def _address(function: Any) -> int:
    address = ctypes.cast(function, ctypes.c_void_p).value
    assert address is not None
    return address
