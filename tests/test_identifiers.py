"""Identifiers in the requests the package lays out itself read as the SDK reads the same text:
what reads as a u32 is the numeric id, anything else the name."""

from __future__ import annotations

import struct

import pytest

from iggy_spark.identifiers import identifier


@pytest.mark.parametrize(("text", "numeric"), [
    ("5", 5), ("+5", 5), ("007", 7), (str(2**32 - 1), 2**32 - 1),
    (str(2**32), None), ("-5", None), ("5a", None), (" 5", None), ("orders", None),
])
def test_text_that_reads_as_a_u32_is_the_numeric_id(text: str, numeric: int | None) -> None:
    expected = (struct.pack("<BBI", 1, 4, numeric) if numeric is not None
                else bytes([2, len(text.encode())]) + text.encode())
    assert identifier(text, "stream") == expected


@pytest.mark.parametrize("text", ["", "x" * 256, "ż" * 128])
def test_names_outside_1_to_255_bytes_are_refused_naming_what(text: str) -> None:
    with pytest.raises(ValueError, match=r"stream .* must be 1 to 255 bytes"):
        identifier(text, "stream")
