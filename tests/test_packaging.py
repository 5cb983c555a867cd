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


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)


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


def test_without_the_compiled_core_pg_cdc_decodes_in_python_and_says_so_once() -> None:
    """A machine without the ``iggy-spark-core`` wheel (no wheel for it, no toolchain) runs as
    before: the reader logs once per process that it decodes in Python, and its progress and
    the ``pg_cdc_compiled_core`` metric say so (whatever ``IGGY_SPARK_CORE`` says here: the
    tier on the pure path sets it)."""
    import os

    from postgres_cdc_source.decoding.compiled import ENVIRONMENT

    unset = {k: v for k, v in os.environ.items() if k != ENVIRONMENT}
    result = _run(_blocking("iggy_spark_core") + (
        "import logging\n"
        "logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
        "from postgres_cdc_source.decoding import compiled\n"
        "from postgres_cdc_source.options import CdcOptions\n"
        "from postgres_cdc_source.stream.reader import PgCdcStreamReader\n"
        "options = CdcOptions.from_options({'dsn': 'host=x', 'slot': 's'})\n"
        "PgCdcStreamReader(options); PgCdcStreamReader(options)\n"
        "print('path', compiled.path())\n"
    ), unset)
    assert result.returncode == 0, result.stderr
    assert "path python" in result.stdout
    said = [line for line in result.stderr.splitlines() if "compiled core" in line]
    assert len(said) == 1 and said[0].startswith("WARNING") and "decoding in Python" in said[0]


def test_a_core_of_another_interface_is_left_unused_naming_both(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from types import ModuleType

    from postgres_cdc_source.decoding import compiled

    other = ModuleType("iggy_spark_core")
    other.INTERFACE = 99  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "iggy_spark_core", other)
    monkeypatch.delenv(compiled.ENVIRONMENT, raising=False)
    compiled.core.cache_clear()
    try:
        assert compiled.core() is None and compiled.path() == "python"
    finally:
        compiled.core.cache_clear()
    assert "has interface 99, this release needs 6" in caplog.text


def test_the_package_builds_without_a_rust_toolchain_and_the_core_as_one_abi3_wheel(
    tmp_path: Path,
) -> None:
    """The connectors' wheel (and so an install from the sdist) needs no compiler; the core is
    a wheel of its own, one for CPython 3.11 and later (abi3), holding only the module."""
    import os
    import shutil

    python_only = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    assert shutil.which("cargo", path=python_only["PATH"]) is None
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "pure"),
         str(ROOT)], env=python_only, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (pure,) = (tmp_path / "pure").glob("iggy_spark-*-py3-none-any.whl")
    assert not [n for n in zipfile.ZipFile(pure).namelist() if n.endswith((".so", ".pyd"))]
    core = subprocess.run([str(ROOT / "native" / "build-wheel"), sys.executable,
                           str(tmp_path / "core")], capture_output=True, text=True, timeout=600)
    assert core.returncode == 0, core.stderr
    wheel_path = Path(core.stdout.strip())
    assert "-cp311-abi3-" in wheel_path.name
    names = zipfile.ZipFile(wheel_path).namelist()
    assert [n for n in names if not n.startswith("iggy_spark_core-")] == [
        n for n in names if n.startswith("iggy_spark_core/") or n.startswith("iggy_spark_core.")]
    assert any(n.endswith(".so") for n in names)


def test_the_core_is_versioned_with_the_package_that_pins_it() -> None:
    import tomllib

    main = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = tomllib.loads((ROOT / "native" / "pyproject.toml").read_text())["project"]
    cargo = tomllib.loads((ROOT / "native" / "Cargo.toml").read_text())["package"]
    assert core["version"] == cargo["version"] == main["version"]
    assert main["optional-dependencies"]["fast"] == [f"iggy-spark-core=={main['version']}"]
