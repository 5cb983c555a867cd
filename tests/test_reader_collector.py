"""The reader pauses Python's cyclic garbage collector only while it decodes a partition."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from postgres_cdc_source.stream.reader import _collector_paused


def _read(fail: bool) -> Iterator[bool]:
    with _collector_paused():
        yield gc.isenabled()
        if fail:
            raise ValueError("bad row")
        yield gc.isenabled()


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_paused_while_reading_and_back_on_after_the_last_batch() -> None:
    assert list(_read(fail=False)) == [False, False]
    assert gc.isenabled()


def test_back_on_after_a_failed_or_abandoned_read() -> None:
    with pytest.raises(ValueError, match="bad row"):
        list(_read(fail=True))
    assert gc.isenabled()
    reader = _read(fail=False)
    next(reader)
    reader.close()  # what Spark does to a task's iterator it stops early
    assert gc.isenabled()


def test_left_off_when_it_was_off_already() -> None:
    gc.disable()
    assert list(_read(fail=False)) == [False, False]
    assert not gc.isenabled()
