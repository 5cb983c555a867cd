"""The Arrow arrays made from buffers (:mod:`connector_common.arrow_values`) equal pyarrow's own
conversion of the same values, and the compiled path's workers never import pandas.

pyarrow's conversion of Python objects imports pandas, a dependency of this package, costing
each of Spark's Python workers about 0.3 s of CPU; each path a worker runs on the compiled core
(a stream of the pgoutput changes the core decodes, in JSON and struct rows; a snapshot chunk;
the sink's encoding of those rows; the ``iggy`` source's decoding of a poll) is run here in a
fresh interpreter that then says whether pandas was imported. Changes decoded in Python (a
delete, an update with its old key or image, a message) are built by pyarrow's conversion on
both paths, which is faster there per value than building them from buffers in Python.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector_common import arrow_values
from iggy_spark_testing.harness import LocalPostgres

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.pg_versions(15)  # the paths are Python's, not the server's
TEXT = st.text(st.characters(exclude_categories=("Cs",)))


@given(st.lists(st.one_of(st.none(), TEXT), max_size=40),
       st.sampled_from([pa.string(), pa.large_string()]))
def test_strings_are_pyarrows_conversion_of_them_nulls_included(
    values: list[str | None], kind: pa.DataType,
) -> None:
    made = arrow_values.strings(values, kind)
    made.validate(full=True)
    assert made.equals(pa.array(values, kind)) and made.null_count == values.count(None)


@given(st.lists(st.binary(max_size=20), max_size=20),
       st.sampled_from([pa.binary(), pa.large_binary()]))
def test_encoded_values_are_pyarrows_conversion_of_them(values: list[bytes], kind: pa.DataType
                                                        ) -> None:
    made = arrow_values.encoded_strings(values, kind)
    made.validate(full=True)
    assert made.equals(pa.array(values, kind))


@given(st.lists(st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)), max_size=40))
def test_int32s_are_pyarrows_conversion_of_them_nulls_included(values: list[int | None]) -> None:
    made = arrow_values.int32s(values)
    made.validate(full=True)
    assert made.equals(pa.array(values, pa.int32())) and made.null_count == values.count(None)


@given(st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), max_size=40))
def test_int64s_are_pyarrows_conversion_of_them_nulls_included(values: list[int | None]) -> None:
    made = arrow_values.int64s(values)
    made.validate(full=True)
    assert made.equals(pa.array(values, pa.int64())) and made.null_count == values.count(None)


def test_an_integer_out_of_range_is_refused_not_wrapped() -> None:
    with pytest.raises(OverflowError):
        arrow_values.int32s([2**31])


@given(TEXT, st.integers(0, 50))
def test_a_repeated_string_is_the_value_count_times(value: str, count: int) -> None:
    assert arrow_values.repeated(value, count).to_pylist() == [value] * count
    assert arrow_values.string(value, pa.large_string()).equals(pa.scalar(value, pa.large_string()))


_PREAMBLE = """
import sys
import traceback
assert "pandas" not in sys.modules

class _Witness:  # prints where pandas is first imported, for the failure's message
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            sys.stderr.write("pandas imported at:\\n" + "".join(traceback.format_stack()[-8:-1]))
            sys.meta_path.remove(self)

sys.meta_path.insert(0, _Witness())
"""

_STREAM = """
from connector_common.lsn import parse_lsn
from connector_common.spark_versions import ReadAllAvailable
from postgres_cdc_source.options import CdcOptions
from postgres_cdc_source.stream.reader import CdcPartition, PgCdcStreamReader
from iggy_spark.sink.encoding import encode_batch
from iggy_spark.sink.options import RoutedOptions
import psycopg

dsn, row_format, slot = sys.argv[1:4]
reader = PgCdcStreamReader(CdcOptions.from_options(
    {"dsn": dsn, "slot": slot, "include_tables": r"public\\.no_pandas", "row_format": row_format}))
start = reader.initialOffset()
with psycopg.connect(dsn, autocommit=True) as conn:
    for n in range(3):  # what the core decodes: inserts, updates keeping their key
        with conn.transaction():
            conn.execute("INSERT INTO no_pandas SELECT g, g::text, g * 1.5, now(), mod(g, 2) = 0,"
                         " '{\\"a\\": [1]}' FROM generate_series(%s::int, %s::int) g",
                         (n * 100, n * 100 + 99))
            conn.execute("UPDATE no_pandas SET label = label || 'x' WHERE mod(id, 7) = 0")
end = reader.latestOffset(start, ReadAllAvailable())
batches = list(reader.read(CdcPartition(parse_lsn(start["lsn"]), parse_lsn(end["lsn"]))))
assert sum(b.num_rows for b in batches) > 300, [b.num_rows for b in batches]
if row_format == "json":
    sink = RoutedOptions.from_options({"url": "iggy://iggy:iggy@127.0.0.1:1"})
    assert sum(len(encode_batch(b, sink)) for b in batches) > 300
print("pandas" in sys.modules)
"""

_SNAPSHOT = """
from postgres_cdc_source import snapshot
from postgres_cdc_source.options import CdcOptions
import psycopg

dsn = sys.argv[1]
options = CdcOptions.from_options({"dsn": dsn, "slot": "unused", "snapshot": "initial"})
with psycopg.connect(dsn) as conn:
    table = snapshot.describe(conn, "public", "no_pandas")
part = snapshot.SnapshotPartition(table, None, None, None, 0)
assert sum(b.num_rows for b in snapshot.read_chunk(options, part)) > 200
print("pandas" in sys.modules)
"""

_IGGY_SOURCE = """
from iggy_spark import sdk
from iggy_spark.source import wire
from support.broker_fixtures import poll_reply

for line in sdk.LINES:
    for messages in ([(b"p" * 12, b"")] * 50, [(b"p" * n, b"") for n in range(50)]):
        assert wire.record_batch(poll_reply(0, messages, line), "s", "t", 1, line).num_rows == 50
print("pandas" in sys.modules)
"""


def _pandas_import(script: str, *args: str) -> str | None:
    """Where ``script``, run in a fresh interpreter, first imported pandas; ``None`` if not."""
    env = {"PATH": str(Path(sys.executable).parent),
           "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}"}
    done = subprocess.run([sys.executable, "-c", _PREAMBLE + script, *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    imported = {"True": True, "False": False}[done.stdout.split()[-1]]
    where = done.stderr.partition("pandas imported at:\n")[2]
    assert imported == bool(where), done.stderr
    return where if imported else None


@pytest.fixture
def table(pg: LocalPostgres) -> str:
    assert importlib.util.find_spec("pandas") is not None  # else this could not fail
    assert importlib.util.find_spec("iggy_spark_core") is not None
    with pg.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS no_pandas")
        conn.execute("CREATE TABLE no_pandas (id int PRIMARY KEY, label text, amount numeric(12,2),"
                     " at timestamptz, even boolean, doc jsonb)")
        conn.execute("INSERT INTO no_pandas SELECT g, g::text, g, now(), true, '{}'"
                     " FROM generate_series(1000, 1299) g")
        conn.commit()
    return pg.dsn


@pytest.mark.parametrize("row_format", ["json", "struct"])
def test_a_stream_of_pgoutput_changes_and_its_sink_encoding_import_no_pandas(
    table: str, row_format: str, name: str,
) -> None:
    try:
        assert _pandas_import(_STREAM, table, row_format, name) is None
    finally:
        with psycopg.connect(table, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                         " WHERE slot_name = %s", (name,))


def test_a_snapshot_chunk_imports_no_pandas(table: str) -> None:
    assert _pandas_import(_SNAPSHOT, table) is None


def test_a_poll_of_the_iggy_source_imports_no_pandas() -> None:
    assert _pandas_import(_IGGY_SOURCE) is None


def test_the_pure_path_does_import_pandas_so_the_check_can_fail(table: str) -> None:
    assert _pandas_import("import os; os.environ['IGGY_SPARK_CORE'] = 'python'\n" + _SNAPSHOT,
                          table) is not None
