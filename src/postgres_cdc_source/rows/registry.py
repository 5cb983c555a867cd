"""The row formats by the ``row_format`` option's value: :data:`ROW_FORMATS`, and
:func:`rows_for`, which makes a query's :class:`~postgres_cdc_source.rows.RowFormat`."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows.contract import RowFormat
from postgres_cdc_source.rows.json.format import JSON_ROWS
from postgres_cdc_source.rows.variant.format import VARIANT_ROWS

__all__ = ["ROW_FORMATS", "rows_for"]


def _struct(options: CdcOptions) -> RowFormat:
    """The captured tables' structs, from the catalog now, evolved from those kept in
    ``schema_location`` when set (the union over time)."""
    from postgres_cdc_source.connections import connect_with_retry
    from postgres_cdc_source.rows.struct.catalog import evolve_kept, struct_rows

    with connect_with_retry(options, autocommit=True) as conn:
        typed = struct_rows(conn, options.keeps, options.schema_evolution,
                            generated=options.delivers_generated)
    return typed if options.schema_location is None else evolve_kept(options, typed)


ROW_FORMATS: Mapping[str, Callable[[CdcOptions], RowFormat]] = {
    "json": lambda options: JSON_ROWS,
    "struct": _struct,
    "variant": lambda options: VARIANT_ROWS,
}
"""Each ``row_format`` value's maker of a query's format from its options (run on the driver:
at ``load()`` and when the reader is made). Its keys are the option's choices
(:data:`postgres_cdc_source.options.ROW_FORMATS`)."""


def rows_for(options: CdcOptions) -> RowFormat:
    """The query's row format, as its ``row_format`` option names it."""
    return ROW_FORMATS[options.row_format](options)
