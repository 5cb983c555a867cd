"""The shape every connector error shares, and how row- or user-supplied values are shown.

Spark moves exceptions between processes (executor to driver, Python worker to JVM) by pickling
them, or prints them inside ``[PYTHON_EXCEPTION] ... ValueError: <message>``. So each error keeps
its constructor arguments in ``args`` (the default pickle protocol rebuilds it with
``cls(*args)``) and renders its message from them: a pickled copy reads exactly the same, and
structured fields (``option``, ``column``, ``sqlstate``) survive the trip.
"""

from __future__ import annotations

__all__ = ["ConnectorError", "OptionError", "show"]

_SHOW_LIMIT = 80


def show(value: object) -> str:
    """A user- or row-supplied value for a message: quoted (so newlines cannot forge log lines)
    and cut short (so a megabyte of garbage cannot flood them)."""
    text = repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


class ConnectorError(Exception):
    """Base of each connector's hierarchy: the message is rendered from ``args``, never stored."""

    def __str__(self) -> str:
        return self._message()

    def _message(self) -> str:
        return " ".join(str(arg) for arg in self.args)


class OptionError(ConnectorError, ValueError):
    """An option is missing, malformed or contradicts another; raised before any data moves.

    ``option`` is the (lower-case) option name to fix, so callers and tests can match on it;
    ``problem`` says what is wrong with it and, where it helps, what to do.
    """

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(option, problem)
        self.option = option
        self.problem = problem

    def _message(self) -> str:
        return f"option '{self.option}': {self.problem}"
