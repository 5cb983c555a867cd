"""The structs a ``schema_evolution=add_columns`` query keeps between runs (``schema_location``).

Spark asks a source for its schema at ``load()``, before the query reads its checkpoint, so the
structs an earlier run delivered (which the checkpoint's offsets carry) are not at hand there,
and without them ``load()`` could only give the tables' columns now: a column dropped or renamed
since would lose its field. So ``load()`` reads the earlier structs from ``schema_location``,
evolves them with the tables' columns now
(:meth:`~postgres_cdc_source.struct_types.StructRows.evolved`: the union over time) and writes
the result back before the query reads a change. The file therefore always holds structs at
least as wide as those of any offset the checkpoint has, which the reader checks when it starts
(:func:`~postgres_cdc_source.struct_types.checkpoint_difference`). The union only grows, so a
run that fails after writing it leaves nothing a later run cannot take.

The file is read and written with plain file I/O on the driver: ``schema_location`` is a local
directory, or one a file system mounts (``/dbfs``, ``/Volumes``), such as the checkpoint's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.struct_types import StructRows

__all__ = ["evolve_kept", "keep", "structs_path"]


def structs_path(options: CdcOptions) -> Path:
    """The file of the query's structs: one per slot, so that queries may share a directory."""
    assert options.schema_location is not None
    return Path(options.schema_location) / f"pg_cdc_structs_{options.slot}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        written: dict[str, Any] = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError("schema_location", f"cannot read {str(path)!r}: {exc}") from exc
    return written


def keep(options: CdcOptions, typed: StructRows) -> None:
    """Write ``typed``'s structs to the query's file (atomically: a rename), unless it holds
    them already."""
    path = structs_path(options)
    stamp = typed.stamp()
    if _read(path) == stamp:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(orjson.dumps(stamp))
        os.replace(partial, path)
    except OSError as exc:
        raise ConfigError("schema_location", f"cannot write {str(path)!r}: {exc}") from exc


def evolve_kept(options: CdcOptions, typed: StructRows) -> StructRows:
    """``typed`` (the tables' columns now) evolved from the structs kept in
    ``schema_location`` (as they are when none are), kept there for the next run;
    :class:`ConfigError` (option ``schema_evolution``) naming what add_columns refuses."""
    written = _read(structs_path(options))
    try:
        evolved = typed if written is None else typed.evolved(written)
    except ValueError as exc:
        raise ConfigError("schema_evolution", f"add_columns: {exc}") from exc
    keep(options, evolved)
    return evolved
