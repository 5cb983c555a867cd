"""Each package's public face: every name its ``__all__`` promises resolves, and every exception
in it is a :class:`~connector_common.errors.ConnectorError`, so one ``except`` catches them all."""

from __future__ import annotations

import importlib

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
