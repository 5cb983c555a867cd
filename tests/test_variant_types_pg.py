"""``row_format=variant``'s values on a real server: for every type of the struct mode's table
(and its domains and arrays), inserted, updated and deleted under ``REPLICA IDENTITY FULL``,
each variant value of ``key``, ``before`` and ``after``, read back by pyspark, means what the
JSON mode's value means, type by type, through both decoders."""

from __future__ import annotations

import base64
import json
import struct
from datetime import date, datetime
from decimal import Decimal, localcontext
from typing import Any

import psycopg
import pytest
from pyspark.sql.types import VariantVal
from test_struct_types_pg import _changes_of_every_kind, _peek, add_every_type, table

from postgres_cdc_source.rows.variant.encoding import variant_array
from postgres_cdc_source.rows.variant.format import VARIANT_ROWS

pytestmark = [pytest.mark.services, pytest.mark.contrib]  # both decoders: test_decoding too

__all__ = ["table"]  # the struct mode's table of every listed type, a fixture


def means(got: Any, json_mode: Any) -> bool:
    """Whether the variant value ``got`` (as pyspark reads it) means the JSON mode's value
    (parsed with its numbers as decimals), with its type kept exact."""
    if isinstance(got, dict):
        return (isinstance(json_mode, dict) and got.keys() == json_mode.keys()
                and all(means(got[k], json_mode[k]) for k in got))
    if isinstance(got, list):
        return (isinstance(json_mode, list) and len(got) == len(json_mode)
                and all(map(means, got, json_mode)))
    if got is None or isinstance(got, bool):
        return got is json_mode
    if isinstance(got, int):
        return type(json_mode) is int and got == json_mode
    if isinstance(got, Decimal):  # numeric is the JSON mode's text; a json number, a number
        exact = Decimal(json_mode)
        return exact == got and (type(json_mode) is int or
                                 exact.as_tuple().exponent == got.as_tuple().exponent)
    if isinstance(got, float):  # a double, or a float4 the JSON mode wrote as a double
        return float(json_mode) == got or struct.pack("<f", float(json_mode)) == struct.pack(
            "<f", got)
    if isinstance(got, bytes):
        return base64.b64decode(json_mode) == got
    if isinstance(got, datetime):
        stamp = datetime.fromisoformat(json_mode)
        return stamp == got and (stamp.tzinfo is None) == (got.tzinfo is None)
    if isinstance(got, date):
        return date.fromisoformat(json_mode) == got
    return isinstance(got, str) and got == json_mode


def test_every_type_means_both_decoders_json_values(
    table: tuple[psycopg.Connection[Any], str],
) -> None:
    conn, schema = table
    add_every_type(conn, schema, "FULL")

    changes = _peek(conn, schema, VARIANT_ROWS, _changes_of_every_kind)
    kinds: dict[str, set[type]] = {}
    for plugin in ("_po", "_td"):
        for json_mode, typed in zip(changes[plugin], changes[plugin + "_typed"], strict=True):
            assert json_mode.op == typed.op and json_mode.unchanged == typed.unchanged
            for image in ("key", "before", "after"):
                text = getattr(json_mode, image)
                (got,) = variant_array([getattr(typed, image)]).to_pylist()
                if text is None:
                    assert got is None
                    continue
                with localcontext(prec=38):
                    value = VariantVal(got["value"], got["metadata"]).toPython()
                expected = json.loads(text, parse_float=Decimal)
                assert value.keys() == expected.keys()
                for name in value:
                    assert means(value[name], expected[name]), (
                        plugin, json_mode.op, image, name, value[name], expected[name])
                    if value[name] is not None:
                        kinds.setdefault(name, set()).add(type(value[name]))
    # strings where the JSON mode's value is Postgres's text: every other type is typed
    assert {name for name, found in kinds.items() if found == {str}} == {
        "t", "vc", "c", "u", "mood", "pos", "price", "pair", "span", "iv", "m", "p", "moods",
        "positives", "x_f8", "x_f8_fixed", "x_f4", "x_f4_fixed", "x_b", "x_bin", "x_tstz", "x_ts",
        "x_d", "x_f8s", "x_bins"}
