"""Fail clearly when a connector's client library is missing, instead of breaking Spark.

Spark imports every installed ``pyspark_*`` module to discover data sources, and one that fails
to import breaks the lookup of *every* Python data source in the session. So the connectors'
entry points import no client library at module level; each connector calls :func:`require`
where it first needs one (on the driver at ``load()``/``start()``, and again on executors), and a
missing package becomes one error naming the package and the extra that installs it.
"""

from __future__ import annotations

import importlib.util

__all__ = ["MissingDependencyError", "require"]


class MissingDependencyError(ImportError):
    """A connector was used where its client library is not installed."""

    def __init__(
        self, format_name: str, module: str, extra: str, install: str | None = None
    ) -> None:
        super().__init__(format_name, module, extra)
        self.format_name = format_name
        self.module = module
        self.extra = extra
        self.install = install or f"pip install 'iggy-spark[{extra}]'"
        """The command that installs it, or the commands, when which one depends on the
        user's servers (the Iggy formats: one extra per Iggy server line)."""

    def __str__(self) -> str:
        return (
            f"format '{self.format_name}' needs the Python package '{self.module}', which is not "
            f"installed for {_interpreter()}: {self.install} (on the driver and on every "
            "executor)"
        )


def _interpreter() -> str:
    import sys

    return sys.executable or "this interpreter"


def require(format_name: str, extra: str, *modules: str, install: str | None = None) -> None:
    """Raise :class:`MissingDependencyError` for the first of ``modules`` that cannot be found;
    ``install`` replaces the message's ``pip install`` of ``extra``."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(format_name, module, extra, install)
