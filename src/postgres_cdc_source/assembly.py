"""Turn decoded events into whole transactions, and whole transactions into Arrow batches.

Every output row needs its transaction's commit LSN, which both plugins report only at the end
of the transaction. Changes therefore wait for their COMMIT: the first ``spill_rows`` of a
transaction in memory, the rest in a temporary file, so a million-change transaction costs disk,
not memory. Rows leave in Arrow batches of ``batch_rows``, built column-wise: the transaction's
own values (commit LSN, xid, time) are repeated rather than copied into every row, and ``id`` is
joined by Arrow (the reader's Python work per change is its decoding, not its row building).
"""

from __future__ import annotations

import copyreg
import pickle
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector_common.arrow_values import int32s, int64s, string, strings
from connector_common.change_rows import (
    ARROW_SCHEMA,
    LONE_MESSAGE_SEQ,
    POSITION_TYPE,
    no_unchanged,
    position_lsn,
)
from connector_common.lsn import format_lsn, parse_lsn
from postgres_cdc_source.decoding import Begin, Change, Commit, LoneMessage
from postgres_cdc_source.decoding.blocks import ChangeBlock, Chunk
from postgres_cdc_source.decoding.changes import conversion_error
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.errors import DecodeError
from postgres_cdc_source.rows.struct.images import (
    UnconvertibleValue,
    cast_texts,
    fields_texts,
    image_array,
    image_texts,
)
from postgres_cdc_source.rows.variant.encoding import is_variant, variant_array

__all__ = ["Spill", "image_column", "record_batches", "transactions"]

_COLON, _MESSAGE = string(":"), string("message")  # the ids' texts, as scalars: no pandas


def _fragment(value: orjson.Fragment) -> tuple[type[orjson.Fragment], tuple[bytes]]:
    return orjson.Fragment, (orjson.dumps(value),)  # a Fragment's JSON is its text


_DISPATCH = {**copyreg.dispatch_table, orjson.Fragment: _fragment}


class _Pickler(pickle.Pickler):
    """Pickles changes whose values hold ``orjson.Fragment`` (json/jsonb columns kept in
    ``values`` or ``new_row``), which has no pickling of its own."""

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.dispatch_table = _DISPATCH


class Spill:
    """Chunks of changes pickled to an unnamed temporary file, read back once in order."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="pg-cdc-spill-")  # noqa: SIM115 - closed by drain()
        self.chunks = 0

    def write(self, changes: Chunk) -> None:
        _Pickler(self._file).dump(changes)
        self.chunks += 1

    def drain(self) -> Iterator[Chunk]:
        """Yield every spilled chunk, in order, then delete the file."""
        try:
            self._file.seek(0)
            for _ in range(self.chunks):
                yield pickle.load(self._file)
        finally:
            self._file.close()


def _spilled(spill: Spill | None, chunks: list[Chunk]) -> Spill:
    """``spill`` (a new one if ``None``) with ``chunks`` written to it."""
    spill = spill or Spill()
    for chunk in chunks:
        spill.write(chunk)
    return spill


def _committed(spill: Spill | None, held: list[Chunk], pending: list[Change]
               ) -> Iterator[Chunk]:
    if spill is not None:
        yield from spill.drain()
    yield from held
    if pending:
        yield pending


def transactions(
    events: Iterable[Begin | Change | Commit | LoneMessage | ChangeBlock], spill_rows: int
) -> Iterator[tuple[Commit, Iterator[Chunk]]]:
    """Group events into ``(commit, chunks of changes)`` in commit order, spilling large
    transactions. A message written outside a transaction is a unit of its own, at its LSN.
    A :class:`ChangeBlock` is a chunk of its own, between the runs of single changes.

    The caller must exhaust each chunk iterator before asking for the next transaction.
    """
    pending: list[Change] = []
    held: list[Chunk] = []  # the transaction's chunks before ``pending``, with blocks
    room = spill_rows  # rows ``pending`` may hold before it all goes to the spill
    spill: Spill | None = None
    for event in events:
        kind = type(event)
        if kind is Change:
            pending.append(event)  # type: ignore[arg-type]
            if len(pending) >= room:
                spill = _spilled(spill, [*held, pending])
                pending, held, room = [], [], spill_rows
        elif kind is ChangeBlock:
            if pending:
                held.append(pending)
                pending = []
            held.append(event)  # type: ignore[arg-type]
            room = spill_rows - sum(map(len, held))
            if room <= 0:
                spill = _spilled(spill, held)
                held, room = [], spill_rows
        elif kind is Commit:
            yield event, _committed(spill, held, pending)  # type: ignore[misc]
            pending, held, room, spill = [], [], spill_rows, None
        elif kind is Begin:
            pending, held, room, spill = [], [], spill_rows, None
        elif kind is LoneMessage:  # Postgres sends it between transactions, never inside one
            lone: LoneMessage = event  # type: ignore[assignment]
            yield Commit(lone.xid, lone.change.lsn, None), iter([[lone.change]])


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_TIMESTAMP = ARROW_SCHEMA.field("commit_ts").type
_NAMES = ARROW_SCHEMA.field("unchanged").type


def _lsn_texts(lsns: Sequence[int]) -> list[str]:
    """``format_lsn`` of each LSN. When they share the high word (all but a batch crossing a
    4 GiB boundary) the low words are formatted by one ``%`` over the whole batch, in C: the
    f-string per LSN was a tenth of the reader's time per change."""
    high = lsns[0] >> 32
    base = high << 32
    lows = tuple(map(base.__rsub__, lsns))
    if min(lows) >= 0 and max(lows) <= 0xFFFF_FFFF:
        return ((f"{high:X}/%X " * len(lows)) % lows).split()
    return [f"{lsn >> 32:X}/{lsn & 0xFFFF_FFFF:X}" for lsn in lsns]


def _repeated(ends: list[int], values: pa.Array) -> pa.Array:
    """``values[i]`` repeated up to row ``ends[i]``: a transaction's own values for each of its
    rows, built by Arrow from one entry per transaction chunk (from buffers:
    ``RunEndEncodedArray.from_arrays`` imports pandas, see :mod:`connector_common.arrow_values`)."""
    runs = pa.run_end_encoded(pa.int32(), values.type)
    decoded = pa.Array.from_buffers(runs, ends[-1] if ends else 0, [None],
                                    children=[int32s(ends), values])
    return pc.run_end_decode(decoded)


class _Columns:
    """One Arrow batch being filled.

    Rows arrive a transaction chunk at a time and are kept as they are; the batch is transposed
    once (one ``zip``) when it is built. The transaction's own values (commit LSN, xid, time) are
    kept once per chunk and repeated by Arrow, ``id`` is joined by Arrow, LSN texts are
    formatted in one operation. Per change, Python does nothing here but route it (when routing
    is on). A :class:`ChangeBlock` chunk is already columns: they are concatenated with those
    of the single changes around it.
    """

    def __init__(self, schema: pa.Schema, router: Router) -> None:
        self.schema = schema  # ARROW_SCHEMA, or row_format=struct's or variant's
        self.router = router
        self.rows = 0
        self.parts: list[Chunk] = []
        self.blocks = False  # whether a part is a ChangeBlock
        self.marks: list[int] = []  # len(destinations) after each part
        self.ends: list[int] = []  # the row each chunk ends at
        self.commit_lsn: list[str] = []  # per chunk
        self.commit_lsn_number: list[int] = []  # per chunk
        self.xid: list[int | None] = []  # per chunk
        self.micros: list[int | None] = []  # per chunk
        self.destinations: list[tuple[str | None, str | None, str | None]] = []

    def add(
        self, changes: Chunk, commit: tuple[str, int], xid: int | None, micros: int | None,
        route: Callable[[Change], tuple[str | None, str | None, str | None]] | None,
    ) -> None:
        self.parts.append(changes)
        self.rows += len(changes)
        self.ends.append(self.rows)
        self.commit_lsn.append(commit[0])
        self.commit_lsn_number.append(commit[1])
        self.xid.append(xid)
        self.micros.append(micros)
        if isinstance(changes, ChangeBlock):
            self.blocks = True
        elif route is not None:
            self.destinations.extend(map(route, changes))
        self.marks.append(len(self.destinations))

    def batch(self) -> pa.RecordBatch:
        if self.blocks:
            columns = self._joined()
        else:
            rows = self.parts[0] if len(self.parts) == 1 else list(
                chain.from_iterable(self.parts))  # type: ignore[arg-type]
            columns = self._changes(rows, self.destinations)  # type: ignore[arg-type]
        lsn, seq_array, schema, table, op, key, before, after, names, *destinations = columns
        ends = self.ends
        commit_lsn = _repeated(ends, strings(self.commit_lsn))
        return pa.RecordBatch.from_arrays(
            [
                lsn,
                commit_lsn,
                _repeated(ends, int64s(self.xid)),
                _repeated(ends, int64s(self.micros)).view(_TIMESTAMP),
                seq_array,
                schema,
                table,
                op,
                key,
                before,
                after,
                names,
                _ids(commit_lsn, seq_array),
                *destinations,
                _positions(_repeated(ends, int64s(self.commit_lsn_number)),
                           seq_array),
            ],
            schema=self.schema,
        )

    def _changes(self, rows: Sequence[Change],
                 destinations: Sequence[tuple[str | None, str | None, str | None]],
                 cast: bool = True) -> list[pa.Array]:
        """The per-change columns of single changes, ``destinations`` their routes (empty
        without routing); without ``cast``, struct images with the values still text that
        :func:`cast_texts` casts (:meth:`_joined`)."""
        lsn, seq, schema, table, op, key, before, after, unchanged, _values, _new_row = zip(
            *rows, strict=True)  # values and new_row are for the router and reselect only
        string = pa.string()
        count = len(rows)
        # the usual case: every row has an empty list
        names = pa.array(unchanged, _NAMES) if any(unchanged) else no_unchanged(count)
        if destinations:
            stream, topic, key_column = (
                pa.array(c, string) for c in zip(*destinations, strict=True))
        else:
            stream = topic = key_column = pa.nulls(count, string)
        image = image_column if cast else _image_texts
        try:
            images = [image(column, self.schema.field(name).type)
                      for name, column in (("key", key), ("before", before), ("after", after))]
        except UnconvertibleValue as exc:
            raise conversion_error(lsn[exc.row], f"{schema[exc.row]}.{table[exc.row]}",
                                   exc.column, exc.text, exc.__cause__ or exc) from exc
        return [pa.array(_lsn_texts(lsn), string), pa.array(seq, pa.int32()),
                pa.array(schema, string), pa.array(table, string), pa.array(op, string),
                *images, names, stream, topic, key_column]

    def _joined(self) -> list[pa.Array]:
        """The per-change columns of parts some of which are blocks: a struct image column
        cast once the parts' are joined, so that a value its type cannot hold fails at the row
        and column it fails at on the Python path (which casts the batch's at once). Blocks in
        a row are joined before their fields are made texts (:meth:`_typed`): once per run of
        blocks, not per transaction, where Arrow's per-call cost was most of what struct rows
        cost over JSON."""
        pieces: list[list[pa.Array]] = []
        blocks: list[list[pa.Array]] = []
        run: list[Change] = []
        taken = 0  # destinations of the parts before ``run``
        for part, mark in zip(self.parts, self.marks, strict=True):
            if type(part) is ChangeBlock:
                if run:
                    pieces.append(self._changes(run, self.destinations[taken:mark], False))
                    run = []
                blocks.append(self._block(part))
                taken = mark
            else:
                if blocks:
                    pieces.append(self._typed(blocks))
                    blocks = []
                run.extend(part)  # type: ignore[arg-type]
        if blocks:
            pieces.append(self._typed(blocks))
        if run:
            pieces.append(self._changes(run, self.destinations[taken:], False))
        columns = _concat(pieces)
        lsn, _seq, schema, table = columns[:4]
        for i, name in ((5, "key"), (6, "before"), (7, "after")):
            arrow = self.schema.field(name).type
            if pa.types.is_struct(arrow):
                try:
                    columns[i] = cast_texts(columns[i], arrow)
                except UnconvertibleValue as exc:
                    raise conversion_error(
                        parse_lsn(lsn[exc.row].as_py()),
                        f"{schema[exc.row].as_py()}.{table[exc.row].as_py()}", exc.column,
                        exc.text, exc.__cause__ or exc) from exc
        return columns

    def _block(self, block: ChangeBlock) -> list[pa.Array]:
        """A block's columns, its ``key`` and ``after`` as the core keeps them (``before``
        null): :meth:`_typed` makes them the batch's."""
        count = len(block)
        return [block.lsn, block.seq, block.schema, block.table, block.op, block.key,
                pa.nulls(count, block.after.type), block.after, no_unchanged(count),
                *self.router.block_columns(block)]

    def _typed(self, blocks: list[list[pa.Array]]) -> list[pa.Array]:
        """Consecutive blocks' columns joined, with ``row_format=struct``'s values still text
        as text (:func:`fields_texts`), as the single changes' are before the batch's cast."""
        columns = _concat(blocks)
        image = self.schema.field("before").type
        if pa.types.is_struct(image):
            columns[5] = fields_texts(columns[5], self.schema.field("key").type)
            columns[7] = fields_texts(columns[7], image)
            columns[6] = pa.nulls(len(columns[7]), columns[7].type)
        return columns


def _concat(pieces: list[list[pa.Array]]) -> list[pa.Array]:
    """Each column of ``pieces`` (lists of the same columns) joined."""
    if len(pieces) == 1:
        return pieces[0]
    return [pa.concat_arrays(column) for column in zip(*pieces, strict=True)]


def image_column(images: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """A ``key``/``before``/``after`` column of ``arrow_type`` from the changes' images: JSON
    text, ``row_format=struct``'s dicts, made structs here
    (:func:`~postgres_cdc_source.rows.struct.images.image_array`, which raises
    :class:`~postgres_cdc_source.rows.struct.images.UnconvertibleValue`), or ``variant``'s dicts
    of encoded values, made variants here
    (:func:`~postgres_cdc_source.rows.variant.encoding.variant_array`)."""
    if is_variant(arrow_type):
        return variant_array(images)
    if pa.types.is_struct(arrow_type):
        return image_array(images, arrow_type)
    return pa.array(images, arrow_type)


def _image_texts(images: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """:func:`image_column`'s column before its struct values are cast (:func:`cast_texts`);
    the JSON mode's as it is."""
    return image_texts(images, arrow_type) if pa.types.is_struct(arrow_type) else pa.array(
        images, arrow_type)


def _positions(commit_lsn: pa.Array, seq: pa.Array) -> pa.Array:
    """``position``: the commit LSN and ``seq``, past every ``seq`` for a message written
    outside a transaction (the only change without one)."""
    seq = seq.cast(pa.int64())
    if seq.null_count:
        seq = pc.fill_null(seq, int64s([LONE_MESSAGE_SEQ])[0])
    return pa.StructArray.from_arrays([commit_lsn, seq], fields=list(POSITION_TYPE))


def _ids(commit_lsn: pa.Array, seq: pa.Array) -> pa.Array:
    """``<commit_lsn>:<seq>``; ``<lsn>:message`` for a message written outside a transaction
    (no ``seq``), which cannot collide with the first change of a transaction whose commit
    ends where the message starts."""
    ids = pc.binary_join_element_wise(commit_lsn, seq.cast(pa.string()), _COLON)
    if seq.null_count:
        ids = pc.coalesce(ids, pc.binary_join_element_wise(commit_lsn, _MESSAGE, _COLON))
    return ids


def record_batches(
    txns: Iterable[tuple[Commit, Iterator[Chunk]]], router: Router, batch_rows: int,
    schema: pa.Schema = ARROW_SCHEMA,
) -> Iterator[pa.RecordBatch]:
    """Rows in :data:`~connector_common.change_rows.ARROW_SCHEMA` order, ``batch_rows`` at a
    time; with ``row_format=struct`` in ``schema``, whose ``key``/``before``/``after`` are the
    structs the changes' dicts fill (a column a dict lacks, an unchanged TOAST value, is
    null)."""
    route = router.route if router.active else None
    columns = _Columns(schema, router)
    for commit, chunks in txns:
        try:
            commit_lsn = (format_lsn(commit.end_lsn), position_lsn(commit.end_lsn))
        except ValueError as exc:
            raise DecodeError(f"pg_cdc: {exc}", commit.end_lsn) from exc
        micros = (None if commit.commit_ts is None
                  else (commit.commit_ts - _EPOCH) // _MICROSECOND)
        for chunk in chunks:
            start = 0
            while start < len(chunk):
                room = batch_rows - columns.rows
                part = chunk if start == 0 and len(chunk) <= room else chunk[start:start + room]
                columns.add(part, commit_lsn, commit.xid, micros, route)
                start += len(part)
                if columns.rows >= batch_rows:
                    yield columns.batch()
                    columns = _Columns(schema, router)
    if columns.rows:
        yield columns.batch()
