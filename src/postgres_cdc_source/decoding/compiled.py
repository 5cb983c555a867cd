"""pgoutput read through the compiled core, ``iggy_spark_core`` (the ``iggy-spark-core`` wheel).

The core is optional, as psycopg's C implementation is: where it is installed, a batch of the
JSON mode or of ``row_format=struct`` is decoded by it; everywhere else, and for every other
batch, the pure-Python decoder (:mod:`.pgoutput`) reads it, as the reference. The two give the
same rows: the core takes exactly the messages the Python hot path takes, writes the JSON the
Python converters and orjson write (or the struct fields' values, which Arrow then casts as it
casts the Python path's), and stops before any row it cannot take, which the Python decoder
then reads (property tests and a workload after Postgres's own decoding tests hold them equal).

``IGGY_SPARK_CORE=python`` in the environment keeps the Python path where the core is installed
(to compare, or to rule the core out; :mod:`connector_common.compiled_core` finds the core).
Which path a process uses is logged once (:func:`announce`) and shown in the source's progress
(:func:`path`).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from types import ModuleType

import orjson

from connector_common.compiled_core import ENVIRONMENT, core, path, turned_off, version
from postgres_cdc_source.decoding.blocks import ChangeBlock, Typed
from postgres_cdc_source.decoding.changes import Event, PeekRow
from postgres_cdc_source.decoding.pgoutput import (
    DECODE_FAILURES,
    FastShape,
    PgOutputDecoder,
    decode_failure,
    payload_bytes,
)
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.rows.json.values import TEXT_FORMS, Converter
from postgres_cdc_source.rows.struct.images import image_form
from postgres_cdc_source.rows.struct.structs import StructRows

__all__ = ["ENVIRONMENT", "CompiledPgOutput", "announce", "core", "core_columns", "path"]

log = logging.getLogger(__name__)

_FORMS = ("text", "integer", "boolean", "float", "json", "bytea", "timestamp", "timestamptz")
_TYPED_FORMS = ("text", "integer", "float", "boolean", "bytea", "python")  # TYPED_KINDS
_u32 = struct.Struct(">I").unpack_from


@cache
def announce() -> str:
    """Log, once per process, which path decodes; returns :func:`path`."""
    if core() is not None:
        log.info("pg_cdc: decoding pgoutput with the compiled core (iggy-spark-core %s)",
                 version())
    elif turned_off():
        log.info("pg_cdc: decoding in Python (%s=python)", ENVIRONMENT)
    else:
        log.warning("pg_cdc: the compiled core (iggy-spark-core) is not installed: decoding in "
                    "Python, at about half the speed; see the docs' Performance page")
    return path()


def core_columns(module: ModuleType, names: Sequence[str], converters: Sequence[Converter]
                 ) -> tuple[list[bytes], list[int], list[Converter]]:
    """A table's columns as the core takes them: each name as ``"name":``, the kind of text
    its converter reads (one the core writes itself, or the last kind: through the
    converter), and the converters."""
    kinds = dict(zip(_FORMS, module.KINDS, strict=False))
    through = module.KINDS[-1]
    return ([orjson.dumps(name) + b":" for name in names],
            [kinds.get(TEXT_FORMS.get(convert, ""), through) for convert in converters],
            list(converters))


class CompiledPgOutput:
    """Reads one pgoutput peek session through the core, and through ``decoder`` (a fresh
    :class:`~.pgoutput.PgOutputDecoder` without kept values, typed by ``structs`` if given)
    every message the core does not take: its events, in order, with :class:`ChangeBlock` in
    place of the changes the core took."""

    def __init__(self, decoder: PgOutputDecoder, module: ModuleType,
                 structs: StructRows | None = None) -> None:
        self._decoder = decoder
        self._core = module
        self._structs = structs
        self._kinds = dict(zip(_TYPED_FORMS, module.TYPED_KINDS, strict=True))
        self._typed: Typed | None = None
        if structs is not None:
            fields = [*structs.row.fields, *structs.key.fields]
            self._typed = (structs.row_arrow, structs.key_arrow,
                           [image_form(f.dataType) for f in fields])

    def events(self, fetches: Iterable[Sequence[PeekRow]]) -> Iterator[Event | ChangeBlock]:
        """Decode the peek's rows, given a fetch (a list of rows) at a time; raises
        :class:`DecodeError` naming the LSN of a bad row, as the Python decoder does."""
        typed = self._typed
        scanner = self._core.Scanner(orjson.dumps, None if typed is None else (
            [self._kinds[form] for form in typed[2]], len(typed[0])))
        step = self._decoder.step
        xid = -1  # the open transaction's; -1 outside one
        seq = 0
        out: list[Event] = []
        for rows in fetches:
            index, count = 0, len(rows)
            while index < count:
                if xid >= 0:
                    index, seq, block = scanner.scan(rows, index, seq)
                    if block is not None:
                        yield ChangeBlock.of(block, typed)
                    if index == count:
                        break
                lsn, row_xid, payload = rows[index]
                data = payload if type(payload) is bytes else payload_bytes(lsn, payload)
                try:
                    kind = data[0]
                    xid, seq = step(kind, lsn, row_xid, data, xid, seq, out)
                except DecodeError:
                    raise
                except DECODE_FAILURES as exc:
                    raise decode_failure(lsn, exc, data) from exc
                if kind == 82:  # 'R': tell the core what the decoder made of the relation
                    self._tell(scanner, _u32(data, 1)[0])
                if out:
                    yield from out
                    out.clear()
                index += 1

    def _tell(self, scanner: object, relid: int) -> None:
        shape = self._decoder.fast(relid)
        if shape is not None and self._structs is not None:
            self._tell_typed(scanner, relid, shape, self._structs)
        elif shape is not None and not shape.typed:
            names = [name for name, _ in shape.columns]
            scanner.relation(  # type: ignore[attr-defined]
                relid, shape.schema, shape.table,
                *core_columns(self._core, names, [convert for _, convert in shape.columns]),
                [names.index(name) for name in shape.key_names])
        elif self._decoder.skips(relid):
            scanner.skip(relid)  # type: ignore[attr-defined]
        else:
            scanner.forget(relid)  # type: ignore[attr-defined]

    def _tell_typed(self, scanner: object, relid: int, shape: FastShape, structs: StructRows
                    ) -> None:
        """A kept relation's columns as the fields of ``structs``: each field filled by the
        column of its name (a key field only by a replica identity column), of its field's
        form (the decoder's retyped converters are the fields' own)."""
        names = [name for name, _ in shape.columns]
        fields = {f.name: f for f in structs.row.fields}
        if not shape.typed or any(name not in fields for name in names):
            scanner.forget(relid)  # type: ignore[attr-defined]
            return
        kinds = self._kinds
        place = {name: i for i, name in enumerate(names)}
        keys = set(shape.key_names)
        scanner.typed_relation(  # type: ignore[attr-defined]
            relid, shape.schema, shape.table,
            [kinds[image_form(fields[name].dataType)] for name in names],
            [convert for _, convert in shape.columns],
            [place.get(f.name) for f in structs.row.fields]
            + [place.get(f.name) if f.name in keys else None for f in structs.key.fields],
            bool(shape.key_names))
