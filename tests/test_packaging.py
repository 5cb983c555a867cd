"""What users install: the wheel holds the connectors only, and each connector stands alone.

A user who wants ``pg_cdc`` alone installs ``iggy-spark[cdc]`` and never needs the Iggy SDK (and
the other way round); and Spark imports every ``pyspark_*`` module to discover formats, so a
shim that fails to import without its client library would break *every* Python data source of
the session. Both are checked in fresh interpreters where the other side's packages are made
unimportable.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def _blocking(*modules: str) -> str:
    # A None entry in sys.modules makes `import name` raise ImportError, as if not installed.
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )
    (built,) = out.glob("iggy_spark-*.whl")
    return zipfile.ZipFile(built)


def test_wheel_holds_the_connectors_and_nothing_from_tests_or_tooling(
    wheel: zipfile.ZipFile,
) -> None:
    names = wheel.namelist()
    top = {name.split("/")[0] for name in names if ".dist-info" not in name}
    assert top == {
        "connector_common", "iggy_spark", "pg_to_iggy", "postgres_cdc_source",
        "pyspark_iggy_routed.py", "pyspark_pg_cdc.py", "pyspark_iggy.py",
    }
    for package in ("connector_common", "iggy_spark", "pg_to_iggy", "postgres_cdc_source"):
        assert f"{package}/py.typed" in names
    for tooling in ("harness", "workload", "oracle", "chaos", "readback", "demo", "local/"):
        assert not [n for n in names if tooling in n], tooling
    entry_points = wheel.read(
        next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    ).decode()
    assert "pg-to-iggy = pg_to_iggy.pipeline:main" in entry_points


def _runs_alone(blocked: tuple[str, ...], code: str) -> None:
    """``code`` runs to its end in a fresh interpreter where ``blocked`` cannot be imported."""
    result = _run(_blocking(*blocked) + code + "print('ok')\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_pg_cdc_imports_and_reads_options_without_the_sink_or_its_sdk() -> None:
    _runs_alone(("apache_iggy", "xxhash"), (
        "from postgres_cdc_source.stream.reader import PgCdcStreamReader\n"
        "from postgres_cdc_source.options import CdcOptions\n"
        "CdcOptions.from_options({'dsn': 'host=x', 'slot': 's', 'max_bytes_per_trigger': '8MB'})\n"
        "assert 'iggy_spark' not in sys.modules, 'pg_cdc imported the sink'\n"
        "import pyspark_pg_cdc, pyspark_iggy_routed, pyspark_iggy  # discovery survives the\n"
        "                                                           # missing SDK\n"
    ))


def test_iggy_routed_imports_without_the_source_or_psycopg() -> None:
    _runs_alone(("psycopg",), (
        "from iggy_spark.sink.writer import IggyRoutedStreamWriter\n"
        "from iggy_spark.sink.options import RoutedOptions\n"
        "RoutedOptions.from_options({'url': 'iggy://u:p@h:8090', 'default_stream': 's',\n"
        "                            'default_topic': 't'})\n"
        "assert 'postgres_cdc_source' not in sys.modules, 'the sink imported pg_cdc'\n"
        "import pyspark_pg_cdc, pyspark_iggy_routed  # discovery survives the missing psycopg\n"
    ))


def test_the_iggy_source_imports_without_the_sink_pg_cdc_or_psycopg() -> None:
    _runs_alone(("psycopg",), (
        "from iggy_spark.source.reader import IggyStreamReader\n"
        "from iggy_spark.source.options import SourceOptions\n"
        "SourceOptions.from_options({'url': 'iggy://u:p@h:8090', 'stream': 's', 'topics': 't'})\n"
        "from iggy_spark.source.datasource import IggyDataSource\n"
        "IggyDataSource({'url': 'iggy://u:p@h:8090', 'stream': 's', 'topics': 't',\n"
        "                'payload_format': 'pg_cdc'}).schema()  # the change row, no psycopg\n"
        "import iggy_spark.source.payloads\n"
        "assert 'postgres_cdc_source' not in sys.modules, 'the iggy source imported pg_cdc'\n"
        "from pyspark_iggy import DefaultSource\n"
        "sink = [m for m in sys.modules if m.startswith('iggy_spark.sink')]\n"
        "assert not sink, f'the iggy source imported the sink: {sink}'\n"
        "assert DefaultSource.name() == 'iggy'\n"
    ))


def test_a_missing_client_library_fails_at_load_naming_the_package_and_the_extra() -> None:
    result = _run(_blocking("psycopg") + (
        "from connector_common.dependencies import MissingDependencyError\n"
        "from pyspark_pg_cdc import DefaultSource\n"
        "try:\n"
        "    DefaultSource({'dsn': 'host=x', 'slot': 's'}).schema()\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    ))
    assert result.returncode == 0, result.stderr
    assert "format 'pg_cdc' needs the Python package 'psycopg'" in result.stdout
    assert "pip install 'iggy-spark[cdc]'" in result.stdout


def test_a_missing_iggy_sdk_names_the_extra_of_each_iggy_line() -> None:
    result = _run(_blocking("apache_iggy") + (
        "from connector_common.dependencies import MissingDependencyError\n"
        "from pyspark_iggy_routed import DefaultSource\n"
        "from pyspark.sql.types import StructType\n"
        "try:\n"
        "    DefaultSource({}).streamWriter(StructType([]), False)\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    ))
    assert result.returncode == 0, result.stderr
    assert "format 'iggy_routed' needs the Python package 'apache_iggy'" in result.stdout
    assert ('Iggy 0.9: pip install "iggy-spark[iggy]"; '
            'Iggy 0.10: pip install "iggy-spark[iggy-0-10]"') in result.stdout
