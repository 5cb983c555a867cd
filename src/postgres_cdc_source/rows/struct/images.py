"""A change's struct images as Arrow columns (``row_format=struct``): most values typed as
decoded, decimals, dates and timestamps kept as their text and cast by Arrow per batch.

The decoders type a value with :func:`image_converter` (once per column per change);
:func:`image_array` builds a ``key``/``before``/``after`` column of a batch from the images;
:func:`image_json` gives the JSON mode's value of an image's value, for routing and for
matching keys before the batch is built. The compiled core keeps each field's values as
:func:`image_form` says; :func:`fields_texts` makes them what :func:`image_texts` makes of the
images, and a batch joining both is cast at once (:func:`cast_texts`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
)

from connector_common.arrow_values import string
from postgres_cdc_source.rows.json.values import converter_for_oid
from postgres_cdc_source.rows.struct.json_text import value_renderer
from postgres_cdc_source.rows.struct.types import (
    _MAX_PRECISION,
    _date,
    _decimal,
    _timestamp,
    _timestamptz,
    spark_typed,
)

__all__ = ["UnconvertibleValue", "cast_texts", "fields_texts", "image_array", "image_converter",
           "image_form", "image_json", "image_texts"]

_TRUE = string("t")  # a boolean's text: the comparison's scalar made without pandas

_CAST: dict[pa.DataType, Callable[[str], Any]] = {
    pa.date32(): _date,
    pa.timestamp("us"): _timestamp,
    pa.timestamp("us", tz="UTC"): _timestamptz,
}


def _cast_converter(arrow: pa.DataType) -> Callable[[str], Any] | None:
    """The converter of a field of ``arrow`` whose values a change's image keeps as their
    Postgres text, for Arrow to cast when the batch is built (``None``: typed as decoded)."""
    if pa.types.is_decimal(arrow):
        return partial(_decimal, arrow.precision, arrow.scale)
    return _CAST.get(arrow)


def image_converter(spark: DataType) -> Callable[[str], Any]:
    """The converter the decoders apply to the output text of a field of ``spark``: its typed
    value, or for a decimal, date or timestamp the text itself, which :func:`image_array`
    casts when the batch is built. Arrow casts a column of them four to five times faster than
    ``Decimal`` and ``datetime`` convert them one by one, which was most of what typed rows
    cost over JSON text; a property test pins that its casts give the converters' values for
    every text Postgres prints in the peek sessions' settings and refuse what they refuse."""
    return str if _kept_as_text(spark) else spark_typed(spark)[2]


_FORMS: dict[type[DataType], str] = {
    StringType: "text", ShortType: "integer", IntegerType: "integer", LongType: "integer",
    FloatType: "float", DoubleType: "float", BooleanType: "boolean", BinaryType: "bytea"}


def image_form(spark: DataType) -> str:
    """How the compiled core keeps a value of a field of ``spark``, which
    :func:`image_converter` gives: ``text`` (a string, or a decimal, date or timestamp kept
    as its text), ``integer``, ``float`` or ``boolean`` (checked, kept as text: ``t``/``f``
    for a boolean), ``bytea`` (its bytes), or ``python`` (through the converter: arrays)."""
    return "text" if _kept_as_text(spark) else _FORMS.get(type(spark), "python")


def _kept_as_text(spark: DataType) -> bool:
    """Whether a change's image keeps a value of ``spark`` as its Postgres text."""
    return _cast_converter(spark_typed(spark)[1]) is not None


class UnconvertibleValue(ValueError):
    """A value of a row image that its field's type cannot hold (:func:`image_array`): the
    row's index in the batch, the field and the Postgres text; the converter's
    :class:`ValueError` is the cause."""

    def __init__(self, row: int, column: str, text: str) -> None:
        super().__init__(f"row {row}, column {column!r}: cannot convert {text[:80]!r}")
        self.row = row
        self.column = column
        self.text = text


def image_array(images: Sequence[Mapping[str, Any] | None], arrow: pa.StructType) -> pa.Array:
    """A ``key``/``before``/``after`` column of ``arrow`` from the changes' images, dicts of
    :func:`image_converter`'s values (a field a dict lacks is null): the fields whose values
    are still text are built as text and cast (:func:`image_texts`, :func:`cast_texts`)."""
    if not any(_cast_converter(f.type) for f in arrow):
        return pa.array(images, arrow)
    return cast_texts(image_texts(images, arrow), arrow)


def _texts_type(arrow: pa.StructType) -> pa.StructType:
    """``arrow`` with text in place of each type a change's images keep as text."""
    return pa.struct([f.with_type(pa.string()) if _cast_converter(f.type) else f
                      for f in arrow])


def image_texts(images: Sequence[Mapping[str, Any] | None], arrow: pa.StructType
                ) -> pa.StructArray:
    """The images as a struct of ``arrow``'s fields, the values still text as text."""
    return pa.array(images, _texts_type(arrow))


def cast_texts(texts: pa.StructArray, arrow: pa.StructType) -> pa.Array:
    """:func:`image_texts`'s column cast to ``arrow``. A field Arrow refuses is converted one
    value at a time, so a value its type cannot hold fails as in the decoders: an
    :class:`UnconvertibleValue` from the converter's :class:`ValueError`, at the first such
    value of the first such field."""
    children = []
    for field, child in zip(arrow, texts.flatten(), strict=True):
        convert = _cast_converter(field.type)
        children.append(child if convert is None else _cast(child, field, convert))
    return pa.StructArray.from_arrays(children, fields=list(arrow), mask=texts.is_null())


def fields_texts(fields: pa.StructArray, arrow: pa.StructType) -> pa.StructArray:
    """The compiled core's ``key``/``after`` fields (as :func:`image_form` keeps them) as
    :func:`image_texts` gives the images' for ``arrow``: typed, but for the values still text
    that :func:`cast_texts` casts. A float is read through a double, as Python's ``float``
    reads it; the core checked every text it kept."""
    texts = _texts_type(arrow)
    children = []
    for field, child in zip(texts, fields.flatten(), strict=True):
        kind = field.type
        if child.type == kind:  # text, bytes, or values the converter made
            children.append(child)
        elif pa.types.is_boolean(kind):
            children.append(pc.equal(child, _TRUE))
        elif pa.types.is_floating(kind):
            children.append(child.cast(pa.float64()).cast(kind))
        else:
            children.append(child.cast(kind))
    return pa.StructArray.from_arrays(children, fields=list(texts), mask=fields.is_null())


def _cast(texts: pa.Array, field: pa.Field, convert: Callable[[str], Any]) -> pa.Array:
    """``texts`` cast to ``field``'s type; one by one where Arrow refuses one, or where a
    decimal may need more than the 38 digits a decimal holds (:func:`_decimal_digits`): Arrow
    reads and rescales them in 128 bits without checking (``1.`` and 40 zeros became 0, and so
    did a 13-digit integer cast to ``decimal(28, 28)``), so the converter checks them."""
    if pa.types.is_decimal(field.type) and _decimal_digits_above(texts, field.type.scale):
        return _one_by_one(texts, field, convert)
    try:
        return texts.cast(field.type)
    except pa.ArrowInvalid:
        return _one_by_one(texts, field, convert)


def _decimal_digits_above(texts: pa.Array, scale: int) -> bool:
    """Whether a text of ``texts`` needs more digits than a decimal holds at ``scale``
    (:func:`_decimal_digits`). The longest text's length plus ``scale`` bounds the count: one
    pass where the count takes ten (most of a batch's decimal cast), so they are counted only
    when it is above the limit."""
    longest = pc.max(pc.binary_length(texts)).as_py() or 0
    return longest + scale > _MAX_PRECISION and _decimal_digits(texts, scale) > _MAX_PRECISION


def _decimal_digits(texts: pa.Array, scale: int) -> int:
    """The most digits Arrow works with to cast one of ``texts`` (plain decimal text) to a
    decimal of ``scale``: those before the point, and the text's places or ``scale``,
    whichever is more (it rescales the one to the other)."""
    length = pc.utf8_length(texts)
    point = pc.find_substring(texts, ".")
    places = pc.if_else(pc.less(point, 0), 0, pc.subtract(pc.subtract(length, point), 1))
    whole = pc.subtract(pc.if_else(pc.less(point, 0), length, point),
                        pc.starts_with(texts, "-").cast(pa.int32()))
    most = pc.max(pc.add(whole, pc.max_element_wise(places, scale))).as_py()
    return int(most or 0)


def _one_by_one(texts: pa.Array, field: pa.Field, convert: Callable[[str], Any]) -> pa.Array:
    values = texts.to_pylist()
    for row, text in enumerate(values):
        if text is not None:
            try:
                values[row] = convert(text)
            except (ValueError, ArithmeticError) as exc:  # decimal's errors are arithmetic
                raise UnconvertibleValue(row, field.name, text) from exc
    return pa.array(values, field.type)


def image_json(type_oid: int, spark: DataType) -> Callable[[Any], Any]:
    """A value of a column of ``type_oid`` typed as ``spark``, as a change's image holds it
    (:func:`image_converter`) -> the JSON mode's value of the same column: for routing, and
    for matching keys, before the batch is built."""
    if _kept_as_text(spark):
        return converter_for_oid(type_oid)  # still the Postgres text the JSON mode converts
    return value_renderer(type_oid, spark)
