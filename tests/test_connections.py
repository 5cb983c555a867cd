"""The read-again rule of :func:`postgres_cdc_source.connections.riding_out_restarts`, with reads
that lose their session at chosen rows (the real server's case is in test_parallel_decode.py
and test_polling_table.py)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import psycopg.errors as pgerrors
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postgres_cdc_source import connections
from postgres_cdc_source.connections import riding_out_restarts
from postgres_cdc_source.errors import SourceError
from postgres_cdc_source.options import CdcOptions

OPTIONS = CdcOptions.from_options({"dsn": "host=db password=s3cret", "slot": "s"})


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections.time, "sleep", lambda _: None)


class Flaky:
    """A read of ``sizes``-row batches (row ``i`` holds ``i``) whose session is lost just before
    it would give row ``f``, once for each ``f`` of ``failures``, in order."""

    def __init__(self, sizes: list[int], failures: list[int],
                 error: type[psycopg.Error] = pgerrors.AdminShutdown) -> None:
        self.sizes, self.failures, self.error, self.reads = sizes, list(failures), error, 0

    def __call__(self) -> Iterator[pa.RecordBatch]:
        self.reads += 1
        first = 0
        for size in self.sizes:
            if self.failures and first <= self.failures[0] < first + size:
                self.failures.pop(0)
                raise self.error("the session ended")
            yield pa.RecordBatch.from_pydict({"i": list(range(first, first + size))})
            first += size


def rows(batches: Iterator[pa.RecordBatch]) -> list[int]:
    return [i for batch in batches for i in batch.column(0).to_pylist()]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 7), max_size=8), st.data())
def test_a_repeatable_read_goes_on_where_it_stopped(sizes: list[int], data: st.DataObject) -> None:
    """However the batches fall and however often the session is lost (at the same row again,
    included), every row comes once, in order."""
    total = sum(sizes)
    failures = sorted(data.draw(st.lists(st.integers(0, max(total - 1, 0)), max_size=4))
                      if total else [])
    read = Flaky(sizes, failures)
    assert rows(riding_out_restarts(read, OPTIONS, repeatable=True)) == list(range(total))
    assert read.reads == 1 + len(failures)


def test_a_read_that_gave_nothing_is_read_again_even_if_not_repeatable() -> None:
    read = Flaky([3, 3], [0, 0])
    assert rows(riding_out_restarts(read, OPTIONS, repeatable=False)) == list(range(6))
    assert read.reads == 3


def test_a_read_that_gave_rows_fails_transient_if_not_repeatable() -> None:
    read = Flaky([3, 3], [4])
    given_rows: list[int] = []

    def consume() -> None:
        for batch in riding_out_restarts(read, OPTIONS, repeatable=False):
            given_rows.extend(batch.column(0).to_pylist())

    with pytest.raises(SourceError) as info:
        consume()
    assert given_rows == [0, 1, 2] and read.reads == 1
    assert info.value.transient and info.value.sqlstate == "57P01"
    assert "after 3 rows of the partition" in str(info.value)
    assert "the session ended" in str(info.value) and "s3cret" not in str(info.value)
    assert isinstance(info.value.__cause__, pgerrors.AdminShutdown)


@pytest.mark.parametrize("error", [pgerrors.QueryCanceled, pgerrors.InsufficientPrivilege])
def test_what_waiting_cannot_heal_is_raised_as_it_came(error: type[psycopg.Error]) -> None:
    """A ``statement_timeout`` (57014, an OperationalError like a lost session) or a missing
    privilege (42501) would fail the same way again: no second read."""
    read = Flaky([3, 3], [4], error=error)
    with pytest.raises(error):
        rows(riding_out_restarts(read, OPTIONS, repeatable=True))
    assert read.reads == 1


def test_waiting_stops_after_connect_retry_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that keeps ending the session: read again until ``connect_retry_timeout`` (30 s
    here) has passed since the first loss, then fail with the server's code."""
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(connections.time, "monotonic", lambda: next(clock))
    read = Flaky([3, 3], [4] * 100)
    with pytest.raises(SourceError) as info:
        rows(riding_out_restarts(read, OPTIONS, repeatable=True))
    assert read.reads == 5 and info.value.sqlstate == "57P01"  # losses at 0, 10, 20, 30 s, 40 s


def test_a_closed_read_closes_its_session() -> None:
    """Spark stops consuming (a limit, a cancelled task): the read's own cleanup runs then,
    even while something else still holds the inner read (no waiting for its collection)."""
    closed = []
    held: list[Iterator[pa.RecordBatch]] = []

    def body() -> Iterator[pa.RecordBatch]:
        try:
            yield from (pa.RecordBatch.from_pydict({"i": [n]}) for n in range(5))
        finally:
            closed.append(True)

    def read() -> Iterator[pa.RecordBatch]:
        held.append(body())
        return held[-1]

    batches = riding_out_restarts(read, OPTIONS, repeatable=True)
    next(batches)
    batches.close()
    assert closed == [True]
