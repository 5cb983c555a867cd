"""``row_format=variant`` as a :class:`~postgres_cdc_source.rows.RowFormat`: ``key``,
``before`` and ``after`` as Spark VARIANT values of any table's columns (:mod:`.values`
converts each value's text to its encoded bytes, :mod:`.encoding` puts a row together)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType, VariantType

from connector_common.change_rows import typed_schemas
from postgres_cdc_source.options import ROW_FORMAT_REFUSALS, CdcOptions
from postgres_cdc_source.rows.contract import foreign_checkpoint
from postgres_cdc_source.rows.json.values import Converter
from postgres_cdc_source.rows.shape import RowShape
from postgres_cdc_source.rows.variant import encoding as variant
from postgres_cdc_source.rows.variant.values import converter_for, json_value

__all__ = ["VARIANT_ROWS", "VariantRows"]


def _as_is(image: dict[str, Any]) -> dict[str, Any]:
    return image


class VariantRows:
    """What makes a ``pg_cdc`` query's rows variants: the decoders' :class:`RowShape` of any
    table retyped to :mod:`.values`' converters, and the rows' schemas. Stateless: every table
    of any shape, then and later, is read the same way."""

    __slots__ = ()

    name = "variant"
    fixed_tables = None
    json_in_sql = False
    encode_image = staticmethod(_as_is)
    refused_options: Mapping[str, str] = ROW_FORMAT_REFUSALS["variant"]

    @property
    def retyping(self) -> VariantRows:
        return self

    def retyped(self, shape: RowShape, *, whole: bool = True,
                types: Sequence[int | str] | None = None) -> RowShape:
        """``shape`` with the variant converters of its columns' ``types`` (OIDs or
        ``format_type`` names; always given by the decoders and readers); its row images stay
        dicts of encoded values, made variants when the batch is built."""
        if types is None:
            raise ValueError("row_format=variant needs the columns' types")
        return RowShape(shape.schema, shape.table, shape.names, [converter_for(t) for t in types],
                        shape.key, shape.keep, _as_is)

    def schemas(self) -> tuple[StructType, pa.Schema]:
        """The change rows' Spark and Arrow schemas, ``key``/``before``/``after`` variants."""
        return typed_schemas(VariantType(), VariantType(), variant.VARIANT_ARROW,
                             variant.VARIANT_ARROW)

    def stamped(self, offset: dict[str, Any]) -> dict[str, Any]:
        return offset

    def check_offset(self, offset: Mapping[str, Any], options: CdcOptions) -> None:
        foreign_checkpoint(self.name, offset, options.schema_evolution)

    def value_json(self, column: str) -> Callable[[Any], Any] | None:
        return None  # routes by a column are refused (refused_options)

    def key_text(self) -> Callable[[Any], str | None] | None:
        return None  # partition_key_from is refused (refused_options)

    def reselect_converters(
        self, schema: str, table: str, oids: Mapping[str, int], key: Sequence[str],
    ) -> tuple[dict[str, Converter], dict[str, Callable[[Any], Any]]] | None:
        """Not a table keyed by a json or jsonb column, whose objects are encoded with their
        row (:func:`.values.json_value`)."""
        json_values = {k: json_value(oids[k]) for k in key}
        if any(v is None for v in json_values.values()):
            return None
        return ({c: converter_for(o) for c, o in oids.items()},
                {k: v for k, v in json_values.items() if v is not None})


VARIANT_ROWS = VariantRows()
