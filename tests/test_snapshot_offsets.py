"""``snapshot=initial``'s options and offsets, without a server."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.snapshot import Position
from postgres_cdc_source.stream.offset import StreamOffset

BASE = {"dsn": "host=localhost dbname=app", "slot": "s"}


def test_snapshot_defaults_to_never() -> None:
    options = CdcOptions.from_options(BASE)
    assert options.snapshot == "never"
    assert CdcOptions.from_options({**BASE, "snapshot": "initial"}).snapshot_chunk_rows == 50000


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        ({"snapshot": "always"}, "snapshot"),
        ({"snapshot_chunk_rows": "10"}, "snapshot_chunk_rows"),  # without snapshot=initial
        ({"snapshot": "initial", "snapshot_chunk_rows": "0"}, "snapshot_chunk_rows"),
        ({"snapshot": "initial", "snapshot_max_rows_per_trigger": "x"},
         "snapshot_max_rows_per_trigger"),
    ],
)
def test_bad_snapshot_options_name_the_option(extra: dict[str, str], option: str) -> None:
    with pytest.raises(ConfigError) as caught:
        CdcOptions.from_options({**BASE, **extra})
    assert caught.value.option == option and option in str(caught.value)


keys = st.none() | st.lists(st.text(), min_size=1, max_size=3).map(tuple)
tables = st.none() | st.tuples(st.text(min_size=1), st.text(min_size=1))


@given(tables, keys, st.integers(0, 10**6), st.integers(0, 2**40))
def test_offsets_survive_spark_storage_and_compare_canonically(
    table: tuple[str, str] | None, after: tuple[str, ...] | None, chunks: int, lsn: int
) -> None:
    position = Position(table, after, chunks)
    offset = StreamOffset.snapshot_batch(lsn, position, ())
    stored = json.loads(json.dumps(offset.to_json()))  # what Spark writes and hands back
    assert StreamOffset.from_json(stored) == offset
    assert StreamOffset.from_json(stored).snapshot == position
    finished = StreamOffset.snapshot_batch(lsn, None, ())
    assert finished.snapshot is None
    assert json.dumps(finished.to_json()) != json.dumps(offset.to_json())
