"""Which changes :mod:`postgres_cdc_source.stream.reselect` completes, and what a completed change
holds; the lookups against Postgres are exercised by test_snapshot.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from postgres_cdc_source.decoding import UNCHANGED, Change
from postgres_cdc_source.rows.json.format import JSON_ROWS
from postgres_cdc_source.rows.variant.format import VARIANT_ROWS
from postgres_cdc_source.stream.reselect import _completed, _moves_key


def _update(key: dict[str, Any], new_row: dict[str, Any], values: dict[str, Any] | None = None,
            *, typed: bool = False) -> Change:
    """An update as the decoders build it: images as JSON text, or with ``typed``
    (``row_format=struct``) as dicts."""
    after = {n: v for n, v in new_row.items() if v is not UNCHANGED}
    unchanged = tuple(n for n, v in new_row.items() if v is UNCHANGED)
    if typed:
        return Change(0x10, 0, "s", "t", "update", key, None, after, unchanged, values, new_row)
    return Change(0x10, 0, "s", "t", "update", orjson.dumps(key).decode(), None,
                  orjson.dumps(after).decode(), unchanged, values, new_row)


@pytest.mark.parametrize(("key", "new_row", "moves"), [
    ({"id": 1}, {"id": 1, "body": UNCHANGED}, False),
    ({"id": 1}, {"id": 2, "body": UNCHANGED}, True),
    ({"a": 1, "b": "x"}, {"a": 1, "b": "y", "body": UNCHANGED}, True),
    ({"a": 1, "b": "x"}, {"b": "x", "a": 1, "body": UNCHANGED}, False),  # key in key order
    ({"id": 1}, {"id": UNCHANGED, "body": "z"}, False),  # an unchanged key did not change
    # REPLICA IDENTITY FULL: the key is the whole old row, so any other change counts
    ({"id": 1, "n": 1, "body": None}, {"id": 1, "n": 2, "body": UNCHANGED}, False),
    ({"id": 1, "n": 1}, {"id": 1, "n": 2, "body": UNCHANGED}, True),
])
@pytest.mark.parametrize("typed", [False, True])
def test_a_key_change_is_told_from_the_old_key_and_the_new_row(
    key: dict[str, Any], new_row: dict[str, Any], moves: bool, typed: bool
) -> None:
    assert _moves_key(_update(key, new_row, typed=typed)) is moves


def test_inserts_and_deletes_never_count_as_key_changes() -> None:
    change = _update({"id": 1}, {"id": 2, "body": UNCHANGED})
    assert not _moves_key(change._replace(op="insert"))
    assert not _moves_key(change._replace(op="delete", new_row=None))


values = st.none() | st.integers(-(2**63), 2**63 - 1) | st.text() | st.booleans()


@pytest.mark.parametrize("typed", [False, True])
@given(st.dictionaries(st.text(min_size=1), values, min_size=1), st.data())
def test_a_completed_change_holds_every_column_in_table_order(
    typed: bool, row: dict[str, Any], data: st.DataObject
) -> None:
    """JSON text, or with ``typed`` (``row_format=struct``) a dict: both in the row's order."""
    names = list(row)
    missing = data.draw(st.sets(st.sampled_from(names), min_size=1))
    new_row = {n: UNCHANGED if n in missing else v for n, v in row.items()}
    change = _update({names[0]: "k"}, new_row, values={"k": 1}, typed=typed)
    current = {n: row[n] for n in missing}
    done = _completed(change, current, (VARIANT_ROWS if typed else JSON_ROWS).encode_image)
    if typed:
        assert done.after == row and list(done.after) == names
    else:
        assert done.after == orjson.dumps(row).decode()  # the row's own order and values
    assert done.unchanged == () and done.new_row is None
    assert done.values == {"k": 1, **current}  # routing sees the completed columns too
    assert (done.lsn, done.key, done.op) == (change.lsn, change.key, change.op)


def test_a_change_is_left_as_sent_unless_every_unchanged_column_was_read() -> None:
    change = _update({"id": 1}, {"id": 2, "a": UNCHANGED, "b": UNCHANGED})
    assert _completed(change, {"a": "x"}) is change
