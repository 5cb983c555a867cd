"""The compatibility page's Spark versions table holds for the pyspark this session runs on.

The table has a column per supported minor version. Each version tier runs this file on its own
pyspark (it is marked ``spark_tier``), so every column is checked against the pyspark it
describes: whether Spark passes read limits (and so runs ``Trigger.AvailableNow`` to the end and
asks for the health report; without it the metrics have only what the listener finds itself),
what the sink is given, whether Declarative Pipelines exist, and the Hadoop client the wheel
ships. The columns are also exactly the versions the package's pin
admits, and each is tested: the venv's pyspark or one of ``./run``'s tiers.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pyspark
import pytest

from connector_common.spark_versions import PYSPARK_VERSION, READ_LIMITS, ArrowStreamWriter

pytestmark = pytest.mark.spark_tier

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "compatibility.md"


def _table() -> dict[str, dict[str, str]]:
    """The Spark versions table: {row's first cell: {version: cell}}."""
    lines = PAGE.read_text().split("## Spark versions", 1)[1].splitlines()
    rows = [line for line in lines if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    table = {}
    for line in rows[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        table[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return table


def _row(prefix: str) -> dict[str, str]:
    matches = [cells for name, cells in _table().items() if name.startswith(prefix)]
    assert len(matches) == 1, f"one row starting {prefix!r} expected"
    return matches[0]


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def test_the_columns_are_the_supported_versions_and_each_is_tested() -> None:
    pin = re.search(r'"pyspark>=(\d+)\.(\d+),<(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text())
    assert pin is not None
    low, high = (int(pin[1]), int(pin[2])), (int(pin[3]), int(pin[4]))
    supported = [f"{low[0]}.{minor}" for minor in range(low[1], high[1])]
    assert low[0] == high[0] and list(_table()[next(iter(_table()))]) == supported
    tiers = re.search(r'TIER_PYSPARKS="([^"]+)"', (ROOT / "run").read_text())
    assert tiers is not None
    tested = {_minor(v) for v in tiers[1].split()}
    newest = supported[-1]  # the venv's pyspark, which runs the whole suite
    assert tested | {newest} == set(supported), "a supported version no tier runs on"


def test_the_installed_pysparks_column_says_what_it_does() -> None:
    column = f"{PYSPARK_VERSION[0]}.{PYSPARK_VERSION[1]}"
    available_now = _row("`Trigger.AvailableNow`")[column]
    assert available_now == ("runs to what existed at the start" if READ_LIMITS
                             else "one batch per run")
    health = _row("source health and lag")[column]
    assert health.startswith("yes" if READ_LIMITS else "partly")
    sink_input = _row("`iggy_routed`'s input")[column]
    arrow = ArrowStreamWriter.__name__ == "DataSourceStreamArrowWriter"
    assert sink_input.startswith("Arrow batches" if arrow else "Rows")
    pipelines = _row("Declarative Pipelines")[column]
    assert pipelines.startswith("yes" if importlib.util.find_spec("pyspark.pipelines") else "no")


def test_the_installed_pysparks_hadoop_client_is_the_one_named() -> None:
    jars = Path(pyspark.__file__).parent / "jars"
    [client] = jars.glob("hadoop-client-api-*.jar")
    version = client.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    column = f"{PYSPARK_VERSION[0]}.{PYSPARK_VERSION[1]}"
    assert _row("Hadoop client")[column] == version
