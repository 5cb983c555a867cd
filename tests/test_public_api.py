"""Each package's public face: every name its ``__all__`` promises resolves, and every exception
in it is a :class:`~connector_common.errors.ConnectorError`, so one ``except`` catches them all;
``pg_to_iggy`` imports the connectors only through their faces (read with ``ast``)."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector_common.dependencies import MissingDependencyError
from connector_common.errors import ConnectorError


@pytest.mark.parametrize("package", ["iggy_spark", "iggy_spark.source"])
def test_iggy_spark_public_names_resolve_and_its_exceptions_are_connector_errors(
    package: str,
) -> None:
    face = importlib.import_module(package)
    for name in face.__all__:
        value = getattr(face, name)
        if not isinstance(value, type):
            assert callable(value), name
        elif value is not MissingDependencyError:  # an ImportError, as Python's own is
            assert issubclass(value, ConnectorError), name


REPOSITORY = Path(__file__).resolve().parent.parent
CONNECTORS = ("iggy_spark", "postgres_cdc_source")


def _faces() -> set[str]:
    """The packages the API reference documents (its ``## `name` `` headings): the public
    faces, and the only modules of the connectors another package may import."""
    text = (REPOSITORY / "docs" / "reference.md").read_text()
    return set(re.findall(r"^## `([a-z_.]+)`$", text, flags=re.MULTILINE))


def _imported(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every module ``path`` imports, anywhere in it (lazy and
    ``TYPE_CHECKING`` imports included); a ``from a import b`` names ``a``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, node.module


def test_pg_to_iggy_reads_the_connectors_through_their_public_faces_only() -> None:
    """The job joins the connectors as a user would: every import of ``iggy_spark`` or
    ``postgres_cdc_source`` anywhere in ``src/pg_to_iggy`` is of a face the reference documents
    (the package, ``iggy_spark.source``, a monitoring face), never of a module below one.
    ``connector_common`` is no connector: the option and row vocabulary both share."""
    faces = _faces()
    assert {"iggy_spark.monitoring", "postgres_cdc_source.monitoring"} <= faces
    package = REPOSITORY / "src" / "pg_to_iggy"
    files = sorted(package.rglob("*.py"))
    assert len(files) >= 4, files
    internal = sorted(
        f"{path.relative_to(package)}:{line}: {module}"
        for path in files for line, module in _imported(path)
        if module.split(".")[0] in CONNECTORS and module not in faces)
    assert not internal, (f"pg_to_iggy imports modules below the connectors' faces {internal}: "
                          "import a face's name, or export what it needs from a face")
