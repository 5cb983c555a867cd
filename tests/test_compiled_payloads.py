"""The compiled core's join of the sink's JSON payloads (``iggy_spark_core.json_objects``): the
buffers it is handed are checked before it reads them. The bytes it writes are held to orjson's
by the payload tests, which run on both joins (test_encoding_json)."""

from __future__ import annotations

import importlib

import pyarrow as pa
import pytest

core = importlib.import_module("iggy_spark_core")  # ./run installs it wherever tests run


def _column(texts: pa.Array, strings: bool = True, opening: bytes = b'{"s":') -> tuple:
    validity, offsets, data = texts.buffers()
    return opening, strings, validity, offsets, data, texts.offset


def test_strings_are_escaped_as_orjson_escapes_them_and_nulls_written_as_null() -> None:
    texts = pa.array(['a"b\\c', None, "\x00\x1f\n\t\r\x08\x0c\x7f", "é€😀"], pa.large_string())
    assert core.json_objects([_column(texts), _column(texts.slice(1), False, b',"j":')], 3) == [
        b'{"s":"a\\"b\\\\c","j":null}',
        b'{"s":null,"j":\x00\x1f\n\t\r\x08\x0c\x7f}',
        '{"s":"\\u0000\\u001f\\n\\t\\r\\b\\f\x7f","j":é€😀}'.encode(),
    ]


def test_buffers_holding_fewer_rows_than_asked_are_refused_naming_the_column() -> None:
    with pytest.raises(ValueError, match='column "s": its buffers hold fewer rows'):
        core.json_objects([_column(pa.array(["a", "b"], pa.large_string()))], 3)


@pytest.mark.parametrize("data", [b"\xff\xfe", b"\xc3\xa9"])
def test_strings_that_are_not_utf8_are_refused(data: bytes) -> None:
    """Arrow's strings are UTF-8 (pyarrow checks what it builds, Spark's are): buffers
    assembled by hand can hold anything, a character split between two values included."""
    offsets = pa.array([0, 1, 2], pa.int64()).buffers()[1]
    texts = pa.Array.from_buffers(pa.large_string(), 2, [None, offsets, pa.py_buffer(data)])
    with pytest.raises(ValueError, match='column "s": its strings are not UTF-8'):
        core.json_objects([_column(texts)], 2)


def test_offsets_outside_the_data_are_refused() -> None:
    """Buffers no Arrow array would hold (pyarrow refuses to build one of them)."""
    offsets = pa.array([0, 5], pa.int64()).buffers()[1]
    column = (b'{"j":', False, None, offsets, pa.py_buffer(b"ab"), 0)
    with pytest.raises(ValueError, match='column "j": its offsets point outside its data'):
        core.json_objects([column], 1)
