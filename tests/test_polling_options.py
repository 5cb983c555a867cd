"""mode=polling options, offsets and row JSON: pure logic, no database."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from postgres_cdc_source.decoding import INSERT, RowShape, build_change, row_json
from postgres_cdc_source.errors import ConfigError
from postgres_cdc_source.option_docs import CDC_ONLY, OPTION_DOCS, POLLING_ONLY
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.polling.offset import PollOffset
from postgres_cdc_source.rows.json.values import converter_for_oid

POLLING = {"dsn": "dbname=x", "mode": "polling", "table": "t", "tracking_column": "ts"}
CDC = {"dsn": "dbname=x", "slot": "s"}
SAMPLE = {
    "slot": "s", "plugin": "pgoutput", "publication": "p", "all_tables_publication": "true",
    "create_slot": "true",
    "failover": "true",
    "include_tables": "a", "exclude_tables": "b", "max_bytes_per_trigger": "1MB",
    "fail_on_data_loss": "true", "spill_rows": "5", "table": "t", "tracking_column": "ts",
    "max_rows_per_trigger": "5", "delete_after_read": "false", "processed_column": "done",
    "snapshot": "initial", "snapshot_chunk_rows": "5", "snapshot_max_rows_per_trigger": "5",
    "min_partitions": "4", "min_bytes_per_partition": "1MB", "on_slot_lost": "resnapshot",
    "message_prefixes": "outbox", "backfill_chunk_rows": "100", "row_format": "json",
    "schema_evolution": "fail", "schema_location": "/structs", "include_schema_changes": "true",
    "primary_dsn": "dbname=primary",
}


def test_every_mode_specific_option_is_documented_and_sampled() -> None:
    documented = {doc.name for doc in OPTION_DOCS}
    assert documented >= CDC_ONLY | POLLING_ONLY
    assert set(SAMPLE) == CDC_ONLY | POLLING_ONLY


@pytest.mark.parametrize("option", sorted(CDC_ONLY))
def test_cdc_options_are_refused_with_polling_by_name(option: str) -> None:
    with pytest.raises(ConfigError, match=f"option '{option}': only applies to mode=cdc") as err:
        CdcOptions.from_options({**POLLING, option: SAMPLE[option]})
    assert err.value.option == option


@pytest.mark.parametrize("option", sorted(POLLING_ONLY - {"table", "tracking_column"}))
def test_polling_options_are_refused_with_cdc_by_name(option: str) -> None:
    with pytest.raises(ConfigError, match=f"option '{option}': only applies to mode=polling"):
        CdcOptions.from_options({**CDC, option: SAMPLE[option]})


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({**POLLING, "mode": "poll"}, "mode", "option 'mode': bad value: 'poll'"),
        ({**POLLING, "table": " "}, "table", "'table': is required with mode=polling"),
        ({k: v for k, v in POLLING.items() if k != "tracking_column"}, "tracking_column",
         "'tracking_column': is required"),
        ({**POLLING, "max_rows_per_trigger": "0"}, "max_rows_per_trigger", "bad value"),
        ({**POLLING, "delete_after_read": "yes please"}, "delete_after_read", "bad value"),
        ({**POLLING, "delete_after_read": "true", "processed_column": "done"},
         "processed_column", "exclude each other"),
    ],
)
def test_bad_polling_options_name_the_option(
    options: dict[str, str], option: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        CdcOptions.from_options(options)
    assert err.value.option == option


def test_polling_options_parse_and_cdc_stays_the_default() -> None:
    parsed = CdcOptions.from_options({**POLLING, "max_rows_per_trigger": "7",
                                      "processed_column": "done", "topic_from": "table"})
    assert parsed.mode == "polling" and parsed.polling is not None
    assert (parsed.polling.table, parsed.polling.tracking_column) == ("t", "ts")
    assert parsed.polling.max_rows_per_trigger == 7 and parsed.polling.destructive
    assert parsed.topic_from == "table"
    assert "polling" in repr(parsed) and parsed.slot == ""
    cdc = CdcOptions.from_options(CDC)
    assert cdc.mode == "cdc" and cdc.polling is None


@given(st.one_of(st.none(), st.text()), st.integers(min_value=0, max_value=2**63 - 1))
def test_offsets_round_trip_through_json_in_one_canonical_form(
    tracking: str | None, frontier: int
) -> None:
    offset = PollOffset(tracking, frontier)
    text = json.dumps(offset.to_json())
    assert PollOffset.from_json(json.loads(text)) == offset
    assert text == json.dumps(json.loads(text), sort_keys=True)  # keys always in one order


def test_a_cdc_checkpoint_is_refused() -> None:
    with pytest.raises(ConfigError, match="written by another mode"):
        PollOffset.from_json({"lsn": "0/16B3748"})
    with pytest.raises(ConfigError, match="malformed"):
        PollOffset.from_json({"frontier": "7", "tracking": None})


_TYPED = st.sampled_from([
    (23, st.integers(-(2**31), 2**31 - 1).map(str)),
    (25, st.text().filter(lambda t: "\x00" not in t)),
    (16, st.sampled_from(["t", "f"])),
    (701, st.floats(allow_nan=True).map(repr).map(lambda r: {"nan": "NaN", "inf": "Infinity",
                                                                "-inf": "-Infinity"}.get(r, r))),
    (3802, st.sampled_from(['{"a": [1, 2.50]}', "null", "[]"])),
])


@given(st.lists(_TYPED, min_size=1, max_size=6).flatmap(
    lambda types: st.tuples(
        st.just(types),
        st.lists(st.tuples(*(st.none() | values for _, values in types)), max_size=5),
        st.sets(st.integers(0, len(types) - 1)),
    )))
def test_row_json_is_build_changes_insert(
    case: tuple[list[tuple[int, object]], list[tuple[str | None, ...]], set[int]]
) -> None:
    """The polling reader's fast path gives exactly the decoders' key and after JSON."""
    types, rows, key = case
    names = [f"c{i}" for i in range(len(types))]
    shape = RowShape("s", "t", names, [converter_for_oid(oid) for oid, _ in types],
                     sorted(key), True)
    fast = list(row_json(shape, rows))
    slow = [build_change(shape, 0, 0, INSERT, None, row, old_is_full=False,
                         new_has_unchanged=False, keep_values=True) for row in rows]
    # (values compared as JSON: orjson.Fragment, for json columns, has no equality)
    assert [(k, a, orjson.dumps(v)) for k, a, v in fast] == [
        (c.key, c.after, orjson.dumps(c.values)) for c in slow]
