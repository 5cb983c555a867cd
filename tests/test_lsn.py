"""LSN text/int conversion."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector_common.lsn import MAX_LSN, format_lsn, parse_lsn

lsns = st.integers(min_value=0, max_value=MAX_LSN)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0/0", 0),
        ("0/16B3748", 0x16B3748),
        ("16/B374D848", 0x16_B374D848),
        ("16/b374d848", 0x16_B374D848),
        ("00000001/00000000", 1 << 32),
        ("FFFFFFFF/FFFFFFFF", MAX_LSN),
    ],
)
def test_parse(text: str, value: int) -> None:
    assert parse_lsn(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "0", "/", "0/", "/0", "1/2/3", "G/0", "0/x1", " 0/1", "0/1 ", "+1/0", "-1/0", "0x1/0",
     "123456789/0", "0/123456789", "1_0/0"],
)
def test_parse_rejects_with_the_value_in_the_message(text: str) -> None:
    with pytest.raises(ValueError, match="bad LSN") as info:
        parse_lsn(text)
    assert repr(text) in str(info.value)


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(ValueError, match="bad LSN 5"):
        parse_lsn(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0/0"), (0x16B3748, "0/16B3748"), (0x16_B374D848, "16/B374D848"), (MAX_LSN,
                                                                           "FFFFFFFF/FFFFFFFF")],
)
def test_format(value: int, text: str) -> None:
    assert format_lsn(value) == text


@pytest.mark.parametrize("value", [-1, MAX_LSN + 1])
def test_format_rejects_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match=f"bad LSN {value}"):
        format_lsn(value)


@given(lsns)
def test_int_round_trip(value: int) -> None:
    assert parse_lsn(format_lsn(value)) == value


@given(st.integers(0, 0xFFFF_FFFF), st.integers(0, 0xFFFF_FFFF), st.integers(0, 7),
       st.integers(0, 7), st.booleans())
def test_text_round_trip(high: int, low: int, pad_high: int, pad_low: int, lower: bool) -> None:
    """Any spelling pg_lsn accepts parses to the value that formats back canonically."""
    text = f"{high:0{min(8, pad_high)}X}/{low:0{min(8, pad_low)}X}"
    text = text.lower() if lower else text
    value = parse_lsn(text)
    assert value == (high << 32) | low
    assert format_lsn(value) == f"{high:X}/{low:X}"

