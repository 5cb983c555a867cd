"""The structs a ``schema_evolution=add_columns`` query keeps between runs (``schema_location``).

Spark asks a source for its schema at ``load()``, before the query reads its checkpoint, so the
structs an earlier run delivered (which the checkpoint's offsets carry) are not at hand there,
and without them ``load()`` could only give the tables' columns now: a column dropped or renamed
since would lose its field. So ``load()`` reads the earlier structs from ``schema_location``,
evolves them with the tables' columns now
(:meth:`.structs.StructRows.evolved`: the union over time, :func:`.catalog.evolve_kept`) and writes
the result back before the query reads a change. The file therefore always holds structs at
least as wide as those of any offset the checkpoint has, which the reader checks when it starts
(:func:`.structs.checkpoint_difference`). The union only grows, so a
run that fails after writing it leaves nothing a later run cannot take.

The file is read and written on the driver with pyarrow's file systems: ``schema_location`` is
a local directory (or one a file system mounts: ``/dbfs``, ``/Volumes``), or a URI pyarrow
opens (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``; credentials from the environment, as its
SDKs find them), such as the checkpoint's. An object store writes the file in one request, so a
reader sees the old structs or the new, never part of them; a local file is written aside and
renamed over the old one.

Errors name the location as :func:`shown_location` writes it: never its user, password, query
string or fragment, where a user may have put a key (pyarrow refuses them as unknown
parameters, and echoes the whole URI in some of its messages).
"""

from __future__ import annotations

import posixpath
from typing import Any, NoReturn

import orjson
from pyarrow import ArrowException, fs

from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.options import CdcOptions

__all__ = ["keep", "read_kept", "shown_location", "structs_path"]


def shown_location(location: str) -> str:
    """``location`` without what may hold a credential: the user and password of a URI, its
    query string and its fragment (a local path is shown as it is). Plain string cuts, not
    ``urlsplit``, which raises on some malformed hosts."""
    if "://" not in location:
        return location
    scheme, _, rest = location.partition("://")
    netloc, slash, path = rest.split("#", 1)[0].split("?", 1)[0].partition("/")
    return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}"


def _fail(what: str, options: CdcOptions, exc: BaseException) -> NoReturn:
    """Raise a :class:`ConfigError` for ``schema_location`` naming it as shown, with ``exc``'s
    message cleaned of every part :func:`shown_location` leaves out; from ``exc`` unless its
    message held one of them (a traceback prints the cause too)."""
    location = options.schema_location
    assert location is not None
    shown = shown_location(location)
    detail = str(exc).replace(location, shown)
    for hidden in _hidden_parts(location):
        detail = detail.replace(hidden, "***")
    error = ConfigError("schema_location", f"{what} {shown!r}: {detail}")
    if detail == str(exc):
        raise error from exc
    raise error from None


def _hidden_parts(location: str) -> list[str]:
    """The user and password, query string and fragment of a URI ``location``."""
    if "://" not in location:
        return []
    rest = location.partition("://")[2]
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    user = rest.partition("/")[0].rpartition("@")[0]
    return [part for part in (user, query, fragment) if part]


def structs_path(options: CdcOptions) -> tuple[fs.FileSystem, str]:
    """The file system and path of the query's structs: one file per slot, so that queries
    may share a directory."""
    location = options.schema_location
    assert location is not None
    try:
        filesystem, directory = (fs.FileSystem.from_uri(location) if "://" in location
                                 else (fs.LocalFileSystem(), posixpath.abspath(location)))
    except (ArrowException, OSError, ValueError) as exc:
        _fail("cannot open", options, exc)
    return filesystem, posixpath.join(directory, f"pg_cdc_structs_{options.slot}.json")


def read_kept(options: CdcOptions) -> dict[str, Any] | None:
    """The structs kept in the query's file (:meth:`.structs.StructRows.stamp`), ``None`` if
    there is none yet."""
    filesystem, path = structs_path(options)
    try:
        with filesystem.open_input_stream(path) as stream:
            written: dict[str, Any] = orjson.loads(stream.read())
    except FileNotFoundError:
        return None
    except (ArrowException, OSError, orjson.JSONDecodeError) as exc:
        _fail("cannot read the structs in", options, exc)
    return written


def keep(options: CdcOptions, stamp: dict[str, Any]) -> None:
    """Write the structs ``stamp`` (:meth:`.structs.StructRows.stamp`) to the query's file
    (whole: see above), unless it holds them already."""
    if read_kept(options) == stamp:
        return
    filesystem, path = structs_path(options)
    try:
        filesystem.create_dir(posixpath.dirname(path), recursive=True)
        if isinstance(filesystem, fs.LocalFileSystem):
            partial = path + ".partial"
            with filesystem.open_output_stream(partial) as out:
                out.write(orjson.dumps(stamp))
            filesystem.move(partial, path)
        else:
            with filesystem.open_output_stream(path) as out:
                out.write(orjson.dumps(stamp))
    except (ArrowException, OSError) as exc:
        _fail("cannot write the structs to", options, exc)
