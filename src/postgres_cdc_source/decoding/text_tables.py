"""What a test_decoding decoder knows of each table: the catalog's columns and key, and the
printed tuples read against them (:mod:`.text_format` says why the catalog is needed)."""

from __future__ import annotations

import re
from typing import Any

from postgres_cdc_source.catalog import TableInfo
from postgres_cdc_source.decoding.changes import UNCHANGED, RawValue, Retyping, RowShape
from postgres_cdc_source.decoding.text_lines import (
    BITS,
    BOOL,
    UNQUOTED,
    Columns,
    parse_columns,
    value_pattern,
)
from postgres_cdc_source.rows.json.values import converter_for_oid, converter_for_type_name

__all__ = ["Printed", "TextTable", "align", "catalog_tuple", "new_tuple"]


class TextTable:
    """Per-table state of one decoder: filter verdict, catalog info and derived shapes."""

    __slots__ = (
        "fast",
        "full",
        "generated",
        "index",
        "info",
        "keep",
        "key_names",
        "loaded",
        "printed",
        "quoted",
        "schema",
        "shape",
        "shapes",
        "table",
        "typed",
        "warned",
    )

    def __init__(self, schema: str, table: str, keep: bool,
                 typed: Retyping | None = None) -> None:
        self.schema = schema
        self.table = table
        self.keep = keep
        self.typed = typed  # row_format=struct: shapes retyped to the query's columns
        self.loaded = False
        self.info: TableInfo | None = None
        self.shape: RowShape | None = None  # the catalog's published columns
        self.full = False
        self.key_names: frozenset[str] = frozenset()
        self.generated: frozenset[str] = frozenset()
        self.printed: tuple[tuple[str, str], ...] = ()  # (name, type) as the catalog predicts
        self.fast: re.Pattern[str] | None = None  # whole new tuple as the catalog predicts
        self.quoted: tuple[int, ...] = ()  # shape positions of '-quoted values
        self.index: dict[str, int] = {}
        self.shapes: dict[tuple[tuple[str, str], ...], RowShape] = {}
        self.warned = False  # the key-unknown warning was given

    def load(self, info: TableInfo | None) -> None:
        self.loaded = True
        self.info = info
        if info is None:
            return
        published = [c for c in info.columns if not c.generated]
        self.full = info.replica_identity == "f"
        self.key_names = frozenset(c.name for c in published if c.key)
        self.generated = frozenset(c.name for c in info.columns if c.generated)
        self.printed = tuple((c.name, c.type_name) for c in info.columns)
        self.shape = RowShape(
            self.schema, self.table, [c.name for c in published],
            [converter_for_oid(c.type_oid) for c in published],
            [i for i, c in enumerate(published) if c.key], True,
        )
        if self.typed is not None:
            self.shape = self.typed.retyped(self.shape, types=[c.type_name for c in published])
        self.index = {name: i for i, name in enumerate(self.shape.names)}
        self.fast = re.compile("".join(
            re.escape(f" {c.quoted_name}[{c.type_name}]:")
            + value_pattern(c.type_oid, capture=not c.generated)
            for c in info.columns
        ) + r"\Z")
        self.quoted = tuple(
            i for i, c in enumerate(published)
            if c.type_oid not in UNQUOTED and c.type_oid != BOOL and c.type_oid not in BITS
        )

    def logged_as_catalog(self, shape: RowShape, columns: Columns) -> bool:
        """Whether an old tuple Postgres printed is what the catalog's identity predicts: all of
        ``shape``'s columns under ``FULL`` (NULL ones are left out), exactly its key columns
        otherwise. If not, the identity changed since the change was written."""
        names = {name for name, _, _ in columns if name not in self.generated}
        if self.full:
            return names <= set(shape.names)
        return names == set(shape.key_names)

    def shape_of_old(self, columns: Columns) -> tuple[RowShape, list[RawValue]]:
        """Shape and values of an old tuple whose columns the catalog does not predict (the
        table's identity changed, or the table is gone): the printed columns, all of them the
        key, since that is the identity Postgres logged."""
        columns = [c for c in columns if c[0] not in self.generated]
        shape = RowShape(self.schema, self.table, [name for name, _, _ in columns],
                         [converter_for_type_name(t) for _, t, _ in columns],
                         range(len(columns)), True)
        if self.typed is not None:
            shape = self.typed.retyped(shape, whole=False, types=[t for _, t, _ in columns])
        return shape, [value for _, _, value in columns]

    def shape_with_key(self, shape: RowShape, key_names: list[str]) -> RowShape:
        """``shape`` with ``key_names`` as its key: the identity as logged, not as the catalog
        says now."""
        return RowShape(self.schema, self.table, shape.names, shape.converters,
                        [i for i, n in enumerate(shape.names) if n in key_names], True,
                        shape.encode, shape.changed)

    def shape_for(self, printed: tuple[tuple[str, str], ...]) -> RowShape:
        """The shape of a tuple printed with these ``(name, type)`` columns."""
        if printed == self.printed and self.shape is not None:
            return self.shape
        shape = self.shapes.get(printed)
        if shape is None:
            columns = [(n, t) for n, t in printed if n not in self.generated]
            shape = RowShape(
                self.schema, self.table, [n for n, _ in columns],
                [converter_for_type_name(t) for _, t in columns],
                [i for i, (n, _) in enumerate(columns) if n in self.key_names], True,
            )
            if self.typed is not None:
                shape = self.typed.retyped(shape, types=[t for _, t in columns])
            self.shapes[printed] = shape
        return shape


def catalog_tuple(table: TextTable, line: str, pos: int) -> list[Any] | None:
    """The value texts (``None`` for null) of a new tuple from ``pos`` to the end, aligned with
    the catalog's shape, if the catalog's regex matches it whole; else ``None``."""
    if table.fast is None or "unchanged-toast-datum" in line:
        return None  # the catalog regex does not accept that marker
    match = table.fast.match(line, pos)
    if match is None:
        return None
    raw: list[Any] = list(match.groups())
    if "''" in line:  # some quoted value has an escaped quote
        for i in table.quoted:
            value = raw[i]
            if value is not None:
                raw[i] = value.replace("''", "'")
    return raw


Printed = tuple[tuple[str, str], ...]
"""``(name, type name)`` of each column as test_decoding printed them."""


def new_tuple(
    table: TextTable, line: str, pos: int
) -> tuple[RowShape, list[RawValue], bool, Printed]:
    """The new tuple from ``pos`` to the end: (its shape, raw values, any UNCHANGED, its
    columns as printed).

    Fast path: one regex built from the catalog matches the whole tuple and captures the value
    texts directly. It is skipped when a TOAST value is unchanged (the catalog regex does not
    accept that marker), and fails when the table changed since the row was written; then the
    columns are parsed one by one.
    """
    raw = catalog_tuple(table, line, pos)
    if raw is not None:
        assert table.shape is not None
        return table.shape, raw, False, table.printed
    columns, end = parse_columns(line, pos)
    if end != len(line):
        raise ValueError(f"cannot parse the new tuple at offset {end}")
    printed = tuple((name, type_name) for name, type_name, _ in columns)
    shape = table.shape_for(printed)
    values = [value for name, _, value in columns if name not in table.generated]
    return shape, values, any(value is UNCHANGED for value in values), printed


def align(table: TextTable, shape: RowShape, columns: Columns) -> list[RawValue] | None:
    """An old tuple (NULL columns left out) as values aligned with ``shape``, absent ones NULL;
    ``None`` if it names a column ``shape`` does not have."""
    index = table.index if shape is table.shape else {n: i for i, n in enumerate(shape.names)}
    old: list[RawValue] = [None] * len(shape.names)
    for name, _, value in columns:
        i = index.get(name)
        if i is None:
            if name in table.generated:
                continue
            return None
        old[i] = value
    return old
