"""``postgres_cdc_source``'s public face: what ``__all__`` names is there, its errors are one
hierarchy, and the package imports without psycopg (an install without the ``cdc`` extra)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import postgres_cdc_source
from connector_common.dependencies import MissingDependencyError
from connector_common.errors import ConnectorError


@pytest.mark.parametrize("name", postgres_cdc_source.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(postgres_cdc_source, name)
    assert value is not None
    assert inspect.isclass(value) or callable(value)


def test_every_public_exception_is_a_connector_error() -> None:
    errors = [getattr(postgres_cdc_source, name) for name in postgres_cdc_source.__all__
              if inspect.isclass(getattr(postgres_cdc_source, name))]
    assert len(errors) == 9
    for error in errors:
        # the one exception raised before pg_cdc can run at all is an ImportError, as Python's
        assert issubclass(error, ConnectorError) or error is MissingDependencyError, error
    assert issubclass(MissingDependencyError, ImportError)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'slot'"):
        _ = postgres_cdc_source.slot


def test_the_package_imports_without_psycopg() -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None  # as if not installed\n"
        "import postgres_cdc_source as pg\n"
        "from postgres_cdc_source import ConfigError, SlotLostError, register\n"
        "assert 'postgres_cdc_source.backfill' not in sys.modules\n"
        "try:\n"
        "    pg.request_backfill\n"
        "except pg.MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "format 'pg_cdc' needs the Python package 'psycopg'" in result.stdout
