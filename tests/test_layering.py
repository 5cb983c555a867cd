"""Each layered package's imports follow its layers (:data:`PACKAGES`), read from the source with
``ast`` (lazy imports inside functions included): no two of its folders (or top-level modules)
import each other, even through others, and none imports one of a higher layer; and no module
of the repository imports one that imports it back."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "postgres_cdc_source"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "options", "option_docs", "connections", "sql_names", "pg_types",
               "catalog", "health", "partitions"}),
    frozenset({"rows"}),
    frozenset({"decoding", "replication", "destination_columns", "assembly"}),
    frozenset({"snapshot", "backfill", "polling"}),
    frozenset({"stream"}),
    frozenset({"source", "abandon", "monitoring", PACKAGE}),
)
"""Lowest first: the shared rules (the built-in types by name among them), then the row
formats (whose converters and shapes the decoders apply), then decoding and the server's
replication, then the read modes, then the change stream that sequences them, then the entry
points (the package's own ``__init__`` is named ``postgres_cdc_source``)."""


IGGY_SPARK_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "sdk", "identifiers", "iggy_url", "handshake", "connection", "failures",
               "names"}),
    frozenset({"source"}),
    frozenset({"sink"}),
    frozenset({"monitoring", "iggy_spark"}),
)
"""``iggy_spark``: the Iggy client pieces both formats use, then the ``iggy`` source (below the
sink, so it loads none of it), then the ``iggy_routed`` sink, then the faces over both."""

SINK_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"admission", "breaker", "refusals", "options", "columns", "arrow_types",
               "json_payloads", "encoding", "partitioning", "delivery", "control_records",
               "report", "logs", "json_route"}),
    frozenset({"topic_request", "sending", "outbox", "control_topic", "migration"}),
    frozenset({"task"}),
    frozenset({"writer"}),
    frozenset({"datasource", "monitoring", "sink"}),
)
"""``iggy_spark.sink``: the pure rules (admission, breakers, refusals, options, encoding,
effectively-once's decisions, the control topic's records, the ledger), then what talks to Iggy
(topics, sends, the outbox, the control topic), then the task, then the writer, then what Spark
and users call (the data source, the destinations table)."""

SOURCE_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "offsets", "options", "schema", "payloads", "progress", "wire"}),
    frozenset({"catalog", "polling"}),
    frozenset({"reader"}),
    frozenset({"datasource", "source"}),
)
"""``iggy_spark.source``: the pure rules (offsets, options, the schema, payloads, the progress
report, the wire layout), then what talks to Iggy (the catalog, polling), then the reader, then
the data source and the package's face."""

PACKAGES: dict[str, tuple[frozenset[str], ...]] = {
    PACKAGE: LAYERS,
    "iggy_spark": IGGY_SPARK_LAYERS,
    "iggy_spark.sink": SINK_LAYERS,
    "iggy_spark.source": SOURCE_LAYERS,
}
"""Every package that has layers, lowest first; a unit is a folder or a module directly in the
package, the package's own ``__init__`` named by its last name."""


def _modules(package: str = PACKAGE) -> dict[str, Path]:
    files = sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
    names = {}
    for path in files:
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imports(path: Path, module: str, known: Mapping[str, Path]) -> Iterator[str]:
    """The modules of the package that ``module`` imports, anywhere in it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"
                elif base in known:
                    yield base


def _unit(module: str, package: str = PACKAGE) -> str:
    """The folder (or module) directly in ``package`` that ``module`` belongs to."""
    inner = module.removeprefix(package).lstrip(".")
    return inner.split(".")[0] if inner else package.rpartition(".")[2]


def _graph(key: str, package: str = PACKAGE) -> dict[str, set[str]]:
    """``package``'s imports between modules, or between units (``key="folder"``); every module
    or unit is a node, importing nothing or not."""
    known = _modules(package)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        source = module if key == "module" else _unit(module, package)
        graph.setdefault(source, set())
        for target in _imports(path, module, known):
            target = target if key == "module" else _unit(target, package)
            if target != source:
                graph[source].add(target)
    return graph


def _cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph``, as the nodes along it, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("key", ["folder", "module"])
def test_imports_have_no_cycle(package: str, key: str) -> None:
    assert _cycle(_graph(key, package)) is None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_folder_imports_a_higher_layer(package: str) -> None:
    layers = PACKAGES[package]
    layer = {unit: rank for rank, units in enumerate(layers) for unit in units}
    assert sum(map(len, layers)) == len(layer), f"{package}: a unit is in two layers"
    graph = _graph("folder", package)
    assert set(graph) == set(layer), (
        f"{package}: place these in its layers: {sorted(set(graph) - set(layer))}; "
        f"these are gone: {sorted(set(layer) - set(graph))}")
    upward = sorted((source, target) for source, targets in graph.items() for target in targets
                    if layer[target] > layer[source])
    assert not upward, upward


REPOSITORY = ROOT.parent
IMPORT_ROOTS: tuple[tuple[Path, tuple[str, ...]], ...] = (
    (ROOT, ()),
    (REPOSITORY / "testing" / "src", ()),
    (REPOSITORY / "tests", ("fixtures",)),
    (REPOSITORY, ("bench",)),
)
"""Where the repository's modules are imported from, each with what is found there: every
package and module under it (``()``), or only the named folders. ``tests/`` is on the path of
the suite (``support`` is imported as such), the repository's root of the benchmarks (``bench``);
``tests/fixtures`` holds scripts run as files, never imported."""


def _repository_modules() -> dict[str, Path]:
    """Every module of the repository by the name it is imported as."""
    names: dict[str, Path] = {}
    for root, only in IMPORT_ROOTS:
        if root == REPOSITORY:
            files = [path for folder in only for path in (root / folder).rglob("*.py")]
        else:
            files = [path for path in root.rglob("*.py")
                     if path.relative_to(root).parts[0] not in only]
        for path in sorted(files):
            parts = path.relative_to(root).with_suffix("").parts
            if any(part.endswith(".egg-info") for part in parts):
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            assert name not in names, f"{name} is both {names[name]} and {path}"
            names[name] = path
    return names


def test_no_import_cycle_anywhere_in_the_repository() -> None:
    """Module by module, across the product (``src/``), the testing distribution
    (``testing/src``), the suite and the benchmarks: no module imports one that imports it
    back, even through others, lazily or only for type checking (an ``if TYPE_CHECKING``
    import is a dependency all the same, and a circle mypy or a refactoring trips over)."""
    known = _repository_modules()
    assert {"iggy_spark_testing.chaos", "iggy_local", "pg_to_iggy", "support.streaming",
            "bench.common"} <= set(known)
    graph = {module: {target for target in _imports(path, module, known) if target != module}
             for module, path in known.items()}
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)


MAX_MODULE_LINES = 500


def test_no_module_of_the_product_is_over_500_lines() -> None:
    """A module past that holds more than one concern: split it by concern, as the rows room's
    struct format is (types, catalog, images, evolution)."""
    long = {str(path.relative_to(ROOT)): lines for path in sorted(ROOT.rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}
