"""``row_format=variant`` without a server: the VARIANT encoding read back by pyspark's own
decoder (``VariantVal``), each Postgres type's value against the JSON mode's, and the rows both
decoders and the Arrow batches make."""

from __future__ import annotations

import json
import math
import struct
from datetime import UTC, date, datetime
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import VariantType, VariantVal
from test_decoders_pgoutput import m_relation, m_update, txn
from test_row_format import CDC, INFO, ROW, _insert, _relation

from postgres_cdc_source.assembly import record_batches, transactions
from postgres_cdc_source.decoding import UNCHANGED, Change
from postgres_cdc_source.decoding.pgoutput import PgOutputDecoder
from postgres_cdc_source.decoding.text_format import TextFormatDecoder
from postgres_cdc_source.destination_columns import Router
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.rows.json.values import converter_for_oid
from postgres_cdc_source.rows.variant import encoding as variant
from postgres_cdc_source.rows.variant.format import VARIANT_ROWS
from postgres_cdc_source.rows.variant.values import converter_for, json_value

AT = datetime(2024, 1, 2, 3, 4, 5, 500000, UTC)


def decoded(obj: Any) -> Any:
    """``obj`` encoded, and read back by pyspark (its decimals in a context of 38 digits:
    it computes them in the current one, of 28 by default)."""
    value, metadata = variant.encode(obj)
    with localcontext(prec=38):
        return VariantVal(value, metadata).toPython()


def column(type_: int | str, text: str) -> Any:
    """A column's text through its variant converter, read back by pyspark."""
    return decoded({"c": converter_for(type_)(text)})["c"]


# --- the encoding -----------------------------------------------------------------------------

_KEYS = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
_JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(_KEYS, inner, max_size=6),
    max_leaves=30,
)


def _expected(obj: Any) -> Any:
    """What pyspark reads back: integers beyond int64 as decimals (beyond 38 digits, text)."""
    if isinstance(obj, dict):
        return {k: _expected(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_expected(v) for v in obj]
    if isinstance(obj, int) and not isinstance(obj, bool) and not -2**63 <= obj < 2**63:
        return Decimal(obj) if abs(obj) < 10**38 else str(obj)
    return obj


def _numbers(obj: Any) -> Any:
    """``obj`` with every number a :class:`Decimal`, to compare JSON texts."""
    if isinstance(obj, dict):
        return {k: _numbers(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_numbers(v) for v in obj]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return Decimal(repr(obj) if isinstance(obj, float) else obj)
    return obj


def _metadata_keys(metadata: bytes) -> tuple[bool, list[str]]:
    """The sorted flag and the dictionary of a variant's metadata."""
    width = (metadata[0] >> 6) + 1
    numbers = [int.from_bytes(metadata[1 + i * width:1 + (i + 1) * width], "little")
               for i in range(int.from_bytes(metadata[1:1 + width], "little") + 2)]
    size, offsets = numbers[0], numbers[1:]
    start = 1 + (size + 2) * width
    return bool(metadata[0] & 0x10), [metadata[start + offsets[i]:start + offsets[i + 1]].decode()
                                      for i in range(size)]


@given(_JSON_LIKE)
@example([{"b": 1, "a": [True, None, 2**70, -2**63, 10**40, 1.5]}, "é🦀" * 40, {}])
@example({"k": "x" * 70_000, "many": list(range(300)), "wide": {str(i): i for i in range(300)}})
def test_values_round_trip_through_pysparks_decoder(obj: Any) -> None:
    value, metadata = variant.encode(obj)
    back = VariantVal(value, metadata)
    assert decoded(obj) == _expected(obj)
    with localcontext(prec=38):
        text = back.toJson()
    assert json.loads(text, parse_float=Decimal, parse_int=Decimal) == _numbers(_expected(obj))
    is_sorted, keys = _metadata_keys(metadata)
    assert is_sorted and keys == sorted(set(keys), key=lambda k: k.encode("utf-16-be"))


def test_a_rows_pre_encoded_columns_and_nested_json_share_one_dictionary() -> None:
    row = {"z": variant.integer(1), "a": None, "j": {"z": [{"q": variant.string("x")}]}}
    assert decoded(row) == {"z": 1, "a": None, "j": {"z": [{"q": "x"}]}}
    _, metadata = variant.encode(row)
    assert _metadata_keys(metadata) == (True, ["a", "j", "q", "z"])
    assert decoded({"b": variant.integer(2), "a": variant.TRUE}) == {"a": True, "b": 2}
    wide = {f"c{i}": variant.string("x" * (i % 300)) for i in range(1600)}  # Postgres's most
    assert decoded(wide) == {f"c{i}": "x" * (i % 300) for i in range(1600)}  # 3-byte offsets
    assert decoded({"only": None}) == {"only": None} and decoded({}) == {}


def test_keys_are_ordered_as_spark_compares_strings() -> None:
    # UTF-16 code units: U+1F980 (a surrogate pair, 0xD83E) sorts before U+FF21
    keys = ["\uff21", "\U0001f980", "a"]
    _, metadata = variant.encode(dict.fromkeys(keys, None))
    assert _metadata_keys(metadata)[1] == ["a", "\U0001f980", "\uff21"]


def test_the_arrow_column_is_pysparks_variant_with_nulls() -> None:
    assert variant.VARIANT_ARROW.equals(to_arrow_type(VariantType()), check_metadata=True)
    assert variant.is_variant(VARIANT_ROWS.schemas()[1].field("after").type)
    assert not variant.is_variant(pa.struct([pa.field("value", pa.binary()),
                                             pa.field("metadata", pa.binary())]))
    column_ = variant.variant_array([{"a": variant.integer(1)}, None])
    assert column_.type == variant.VARIANT_ARROW and column_.is_null().to_pylist() == [False, True]
    first = column_.to_pylist()[0]
    assert VariantVal(first["value"], first["metadata"]).toPython() == {"a": 1}


# --- each type, against the JSON mode's value -------------------------------------------------

JSON_MODE_MEANS = [  # (type, output text, the variant value as pyspark reads it)
    (21, "-32768", -32768), (23, "2147483647", 2147483647), (26, "4294967295", 4294967295),
    (20, "-9223372036854775808", -2**63),
    (1700, "120.50", Decimal("120.50")), (1700, "-0.000001", Decimal("-0.000001")),
    (1700, "9" * 38, Decimal("9" * 38)), (1700, "0." + "0" * 37 + "1", Decimal("1e-38")),
    (1700, "1" + "0" * 38, "1" + "0" * 38), (1700, "0." + "0" * 38 + "1", "0." + "0" * 38 + "1"),
    (1700, "NaN", "NaN"), (1700, "-Infinity", "-Infinity"),
    (701, "0.1", 0.1), (701, "-Infinity", "-Infinity"), (701, "NaN", "NaN"),
    (700, "1.1", struct.unpack("<f", struct.pack("<f", 1.1))[0]), (700, "Infinity", "Infinity"),
    (16, "t", True), (16, "false", False),
    (17, "\\x00ff", b"\x00\xff"), (17, "\\x", b""),
    (1082, "2024-02-29", date(2024, 2, 29)), (1082, "0001-01-01", date(1, 1, 1)),
    (1082, "infinity", "infinity"), (1082, "2024-01-02 BC", "2024-01-02 BC"),
    (1082, "10000-01-01", "10000-01-01"),
    (1114, "2024-01-02 03:04:05.5", datetime(2024, 1, 2, 3, 4, 5, 500000)),
    (1114, "9999-12-31 23:59:59.999999", datetime(9999, 12, 31, 23, 59, 59, 999999)),
    (1114, "-infinity", "-infinity"), (1114, "2024-01-02 03:04:05 BC", "2024-01-02 03:04:05 BC"),
    (1114, "10000-01-01 00:00:00", "10000-01-01T00:00:00"),
    (1184, "2024-01-02 03:04:05.5+00", AT), (1184, "infinity", "infinity"),
    (1184, "0001-01-01 00:00:00+00 BC", "0001-01-01 00:00:00+00 BC"),
    (3802, '{"k": [1, 2.50], "a": "\\u00e9", "b": 123456789012345678901}',
     {"a": "é", "b": Decimal(123456789012345678901), "k": [1, Decimal("2.50")]}),
    (3802, "null", None), (3802, '"x"', "x"), (3802, "[]", []), (3802, "{}", {}),
    (114, '{"a": 1e400, "a": 1E+2, "b": 1e-400}', {"a": Decimal(100), "b": "1e-400"}),
    (114, '"\\ud83d\\ude00"', "😀"), (114, '["\\ud800"]', '["\\ud800"]'),
    (1007, "{1,NULL,3}", [1, None, 3]), (1007, "[0:1]={7,8}", [7, 8]),
    (1231, "{{1.5,NULL},{2,3}}", [[Decimal("1.5"), None], [Decimal(2), Decimal(3)]]),
    (3807, '{"{\\"a\\": 1}",NULL}', [{"a": 1}, None]),
    (1009, '{"a b",NULL,"NULL"}', ["a b", None, "NULL"]),
    (25, "é 🦀", "é 🦀"), (2950, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                          "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    (1186, "P1DT2H", "P1DT2H"), (99999, "(1,2)", "(1,2)"),  # a type not built in: its text
    ("numeric", "3.14", Decimal("3.14")), ("integer[]", "{1}", [1]), ("mood", "happy", "happy"),
    ("timestamp with time zone", "2024-01-02 03:04:05.5+00", AT),
]


@pytest.mark.parametrize(("type_", "text", "means"), JSON_MODE_MEANS)
def test_each_type_is_the_json_modes_value_typed_exactly(type_: int | str, text: str,
                                                          means: Any) -> None:
    got = column(type_, text)
    assert got == means and type(got) is type(means), (got, means)


_KEYABLE = [(t, text) for t, text, _ in JSON_MODE_MEANS if isinstance(t, int) and t not in (
    700, 701, 17, 1007, 1231, 3807, 1009, 114, 3802)]  # what a key lookup takes (sql_json)


@pytest.mark.parametrize(("type_", "text"), _KEYABLE)
def test_an_encoded_key_value_gives_back_the_json_modes_value(type_: int, text: str) -> None:
    """How a key is matched when TOAST values are read back from a table: its encoded value
    turned into the JSON mode's value of the same text."""
    to_json = json_value(type_)
    assert to_json is not None
    assert to_json(converter_for(type_)(text)) == converter_for_oid(type_)(text)


def test_a_json_key_is_not_matched() -> None:
    assert json_value(114) is None and json_value(3802) is None


@given(st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_numeric_text_is_its_decimal_or_its_text(value: Decimal) -> None:
    text = f"{value:f}"  # as numeric_out prints it: no exponent
    got = column(1700, text)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    if max(len(text.lstrip("-").replace(".", "").lstrip("0")), scale) <= 38:
        assert isinstance(got, Decimal) and got == value
        assert -got.as_tuple().exponent == scale  # type: ignore[operator]
    else:
        assert got == text


_JSON_NUMBERS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(exclude_categories=("Cs",)))
    | st.decimals(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


def _json_text(obj: Any) -> str:
    """``obj`` as JSON text, its decimals written as they are (``1.50``, ``1E+5``)."""
    if isinstance(obj, Decimal):
        return str(obj)
    if isinstance(obj, list):
        return "[" + ", ".join(map(_json_text, obj)) + "]"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_json_text(v)}" for k, v in obj.items()) + "}"
    return json.dumps(obj)


def _exact(obj: Any) -> Any:
    """What a JSON value's variant holds: an integer as such up to int64, other numbers as
    decimals of their digits and scale (a negative exponent's zeros written out), their text
    beyond 38 digits."""
    if isinstance(obj, dict):
        return {k: _exact(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_exact(v) for v in obj]
    if isinstance(obj, Decimal) and not any(c in str(obj) for c in ".eE"):
        obj = int(str(obj))  # JSON reads 12 as an integer
    if isinstance(obj, bool) or not isinstance(obj, (int, Decimal)) or (
            isinstance(obj, int) and -2**63 <= obj < 2**63):
        return obj
    _sign, digits, exponent = Decimal(obj).as_tuple()
    assert isinstance(exponent, int)
    if len(digits) + max(exponent, 0) > 38 or -exponent > 38:
        return str(obj)
    return Decimal(int(obj)) if exponent > 0 else Decimal(obj)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, Decimal):
        return isinstance(b, Decimal) and a == b and a.as_tuple().exponent == b.as_tuple(
            ).exponent
    return type(a) is type(b) and a == b


@given(_JSON_NUMBERS)
@example([Decimal("1E+30"), Decimal("-1.50E-3"), Decimal("1E+40"), Decimal("1E-39"), 2**64])
def test_json_is_objects_and_arrays_with_exact_numbers(obj: Any) -> None:
    got = column(3802, _json_text(obj))
    assert _same(got, _exact(obj)), (got, _exact(obj))


def _nearest_float32(text: str) -> float:
    """The float32 nearest the decimal ``text``, ties to even: exact, by fractions."""
    exact = Fraction(Decimal(text))
    (guess,) = struct.unpack("<f", struct.pack("<f", float(text)))
    (bits,) = struct.unpack("<I", struct.pack("<f", guess))
    neighbours = [struct.unpack("<f", struct.pack("<I", b))[0] for b in (bits - 1, bits + 1)
                  if 0 <= b < 2**32]
    around = [guess] + [x for x in neighbours if math.isfinite(x)]

    def distance(x: float) -> tuple[Fraction, int]:
        return abs(Fraction(x) - exact), struct.unpack("<I", struct.pack("<f", x))[0] & 1

    return min(around, key=distance)


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float4_text_is_its_float(x: float) -> None:
    text = repr(x) if x != int(x) else f"{x:.9g}"
    assert column(700, text) == _nearest_float32(text)


def test_float4_text_on_a_doubles_tie_is_rounded_by_the_text() -> None:
    low = struct.unpack("<f", struct.pack("<I", 0x3F800001))[0]
    high = struct.unpack("<f", struct.pack("<I", 0x3F800002))[0]
    with localcontext(prec=60):
        middle = Decimal(low) + (Decimal(high) - Decimal(low)) / 2  # parsing lands on it
        texts = [f"{middle + Decimal('1e-30'):f}", f"{middle:f}", f"{middle - Decimal('1e-30'):f}"]
    for text, nearest in zip(texts, (high, high, low), strict=True):  # a tie goes to the even
        assert float(text) == float(middle)
        assert column(700, text) == nearest == _nearest_float32(text)


# --- rows -------------------------------------------------------------------------------------

def _after(batch: pa.RecordBatch, name: str = "after") -> list[Any]:
    return [None if v is None else VariantVal(v["value"], v["metadata"]).toPython()
            for v in batch.column(name).to_pylist()]


def test_both_decoders_rows_are_variants_an_unchanged_value_left_out_and_named() -> None:
    # pgoutput's insert and key-keeping update take its hot path, the update with an old key
    # and the unchanged TOAST value the general way
    events = PgOutputDecoder(typed=VARIANT_ROWS).events(txn(
        _relation(), _insert(ROW), m_update(5, ROW), m_update(5, ROW, old=["7", None, None, None]),
        m_update(5, ["7", "1", UNCHANGED, None])))
    schema = VARIANT_ROWS.schemas()[1]
    (batch,) = record_batches(transactions(events, 100), Router(CdcOptions.from_options(CDC)),
                              100, schema)
    assert batch.schema == schema
    row = {"id": 7, "amount": Decimal("120.50"), "note": "x", "at": AT}
    assert _after(batch) == [row, row, row, {"id": 7, "amount": Decimal(1), "at": None}]
    assert _after(batch, "key") == 4 * [{"id": 7}]
    assert _after(batch, "before") == 4 * [None]
    assert batch.column("unchanged").to_pylist() == [[], [], [], ["note"]]

    line = ("table shop.orders: INSERT: id[integer]:7 amount[numeric]:120.50 note[text]:'x' "
            "at[timestamp with time zone]:'2024-01-02 03:04:05.5+00'")
    rows = [(0x10, 1, "BEGIN 1"), (0x18, 1, line), (0x20, 1, line),
            (0x28, 1, "COMMIT 1 (at 2024-01-02 03:04:05+00)")]
    decoder = TextFormatDecoder(lambda schema, table: INFO, typed=VARIANT_ROWS)
    (text_batch,) = record_batches(transactions(decoder.events(rows), 100),
                                   Router(CdcOptions.from_options(CDC)), 100, schema)
    assert _after(text_batch) == [row, row] and _after(text_batch, "key") == 2 * [{"id": 7}]


def test_any_table_and_a_changed_one_are_read_as_they_come() -> None:
    other = m_relation(6, "shop", "refunds", b"d", [(1, "id", 20), (0, "tags", 1009)])
    events = PgOutputDecoder(typed=VARIANT_ROWS).events(
        txn(_relation(), _insert(ROW)) + txn(other, m_update(6, ["1", "{a,b}"]), start=0x200)
        + txn(_relation(extra=True), _insert([*ROW, "5"]), start=0x300))
    changes = [e for e in events if isinstance(e, Change)]
    assert [(c.table, sorted(c.after)) for c in changes] == [
        ("orders", ["amount", "at", "id", "note"]), ("refunds", ["id", "tags"]),
        ("orders", ["amount", "at", "extra", "id", "note"])]
    assert decoded(changes[1].after) == {"id": 1, "tags": ["a", "b"]}
