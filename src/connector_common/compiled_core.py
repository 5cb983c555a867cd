"""The compiled core, ``iggy_spark_core`` (the ``iggy-spark-core`` wheel), found once per process.

The core is optional, as psycopg's C implementation is: ``pg_cdc`` decodes with it
(:mod:`postgres_cdc_source.decoding.compiled`) and ``iggy_routed`` joins its JSON payloads with
it (:mod:`iggy_spark.sink.json_payloads`) where it is installed, and both run on their
pure-Python paths, the reference, everywhere else. ``IGGY_SPARK_CORE=python`` in the
environment keeps the Python paths where the core is installed (to compare, or to rule the
core out).
"""

from __future__ import annotations

import importlib
import logging
import os
from functools import cache
from importlib import metadata
from types import ModuleType

__all__ = ["ENVIRONMENT", "INTERFACE", "core", "path", "turned_off", "version"]

log = logging.getLogger(__name__)

ENVIRONMENT = "IGGY_SPARK_CORE"
"""Set to ``python`` to use the pure-Python paths although the core is installed."""

INTERFACE = 6
"""The core's ``INTERFACE`` this release is written for; a core of another is left unused."""


def turned_off() -> bool:
    """Whether :data:`ENVIRONMENT` asks for the pure-Python paths."""
    return os.environ.get(ENVIRONMENT, "").strip().lower() == "python"


@cache
def core() -> ModuleType | None:
    """The compiled core, or ``None``: not installed, of another interface, or turned off by
    :data:`ENVIRONMENT`."""
    if turned_off():
        return None
    try:
        module = importlib.import_module("iggy_spark_core")
    except ImportError:
        return None
    if getattr(module, "INTERFACE", None) != INTERFACE:
        log.warning("iggy-spark-core %s has interface %s, this release needs %s: running on "
                    "the pure-Python path", version(), getattr(module, "INTERFACE", "?"),
                    INTERFACE)
        return None
    return module


def path() -> str:
    """``compiled`` or ``python``: which path this process runs the per-row work on."""
    return "python" if core() is None else "compiled"


def version() -> str:
    """The installed core's version, for logs."""
    try:
        return metadata.version("iggy-spark-core")
    except metadata.PackageNotFoundError:
        return "(unknown version)"
