"""Shared fixtures: one SparkSession, one real Postgres and one local Iggy broker per session.

Services are started here, never mocked. Each test gets its own slot, table and topic names, so
tests share the servers without seeing each other's data.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from iggy_spark_testing.harness import LocalPostgres, postgres

# Spark's Python workers must run this interpreter (the venv's), whatever launched pytest.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Test-only data sources (faulty_sources.py) must import in Spark's Python workers, which get
# PYTHONPATH from the JVM, which gets it from this process: set it before any SparkSession.
_TESTS_DIR = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_TESTS_DIR, os.environ.get("PYTHONPATH")]))


_SERVICE_FIXTURES = {"pg", "broker"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tiers: ``e2e`` (Spark), ``services`` (Postgres or the broker), ``unit`` (neither).

    A test's tier follows from the fixtures it uses, so a test cannot claim a lighter tier than
    it needs; modules that start services themselves mark themselves explicitly.
    """
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("e2e") or "spark" in names:
            item.add_marker(pytest.mark.e2e)
        elif item.get_closest_marker("services") or names & _SERVICE_FIXTURES:
            item.add_marker(pytest.mark.services)
        else:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def pg() -> Iterator[LocalPostgres]:
    with postgres() as server:
        yield server  # type: ignore[misc]


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    from iggy_local import LocalIggy

    with LocalIggy() as server:
        yield server


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("iggy-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def name() -> str:
    """A fresh lower-case identifier for a slot, table, stream or topic."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
