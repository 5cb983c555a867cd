"""``row_format=json`` as a :class:`~postgres_cdc_source.rows.RowFormat`: the decoders' own
rows, ``key``/``before``/``after`` as JSON text (:mod:`.values` converts, ``orjson`` writes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from connector_common.change_rows import ARROW_SCHEMA, SPARK_SCHEMA
from postgres_cdc_source.options import ROW_FORMAT_REFUSALS, CdcOptions
from postgres_cdc_source.rows.contract import foreign_checkpoint
from postgres_cdc_source.rows.json.values import Converter, converter_for_oid
from postgres_cdc_source.rows.shape import RowShape, json_text

__all__ = ["JSON_ROWS", "JsonRows"]


def _same(value: Any) -> Any:
    return value


class JsonRows:
    """The JSON mode: every table of any shape, then and later, its rows as JSON text; the
    decoders' shapes as they build them. Stateless."""

    __slots__ = ()

    name = "json"
    retyping = None
    fixed_tables = None
    json_in_sql = True
    encode_image = staticmethod(json_text)
    refused_options: Mapping[str, str] = ROW_FORMAT_REFUSALS["json"]

    def schemas(self) -> tuple[StructType, pa.Schema]:
        return SPARK_SCHEMA, ARROW_SCHEMA

    def retyped(self, shape: RowShape, *, whole: bool = True,
                types: Sequence[int | str] | None = None) -> RowShape:
        return shape

    def stamped(self, offset: dict[str, Any]) -> dict[str, Any]:
        return offset

    def check_offset(self, offset: Mapping[str, Any], options: CdcOptions) -> None:
        foreign_checkpoint(self.name, offset, options.schema_evolution)

    def value_json(self, column: str) -> Callable[[Any], Any] | None:
        return None

    def key_text(self) -> Callable[[Any], str | None] | None:
        return None

    def reselect_converters(
        self, schema: str, table: str, oids: Mapping[str, int], key: Sequence[str],
    ) -> tuple[dict[str, Converter], dict[str, Callable[[Any], Any]]] | None:
        return {c: converter_for_oid(o) for c, o in oids.items()}, {k: _same for k in key}


JSON_ROWS = JsonRows()
