"""The option machinery both connectors use: documented names, Spark's own keys, unknown and
duplicated names refused with a suggestion.

Spark hands a data source every ``.option(...)`` as a string map whose keys keep the user's case,
plus a few keys of its own. Each connector declares its options once, as :class:`OptionDoc`
rows (the docs' tables are checked against them), and reads the user's map through
:meth:`OptionSet.given`, so both connectors accept and refuse option names alike.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, TypeVar

from connector_common.errors import OptionError

__all__ = ["SPARK_OPTIONS", "OptionDoc", "OptionSet", "option_pair", "parsed"]

T = TypeVar("T")

SPARK_OPTIONS = frozenset({"checkpointlocation", "path", "queryname"})
"""Keys Spark adds itself (lower-case): not ours to validate, passed over."""


class OptionDoc(NamedTuple):
    """One row of a connector's options table; ``(...)`` defaults explain, they are not values."""

    name: str
    default: str
    meaning: str


class OptionSet:
    """A connector's documented options, and the rules for reading a user's option map."""

    def __init__(
        self, format_name: str, docs: Iterable[OptionDoc], error: Callable[[str, str], OptionError]
    ) -> None:
        self.format_name = format_name
        self.docs = tuple(docs)
        self.names = frozenset(doc.name for doc in self.docs)
        self.defaults = {d.name: d.default for d in self.docs if not d.default.startswith("(")}
        self._error = error

    def given(self, options: Mapping[str, str]) -> dict[str, str]:
        """The user's options with lower-case names, Spark's own keys dropped.

        Raises the connector's error for an unknown name (naming the closest documented one)
        and for a name given twice in different cases (which value was meant is anyone's guess).
        """
        known: dict[str, str] = {}
        for key, value in options.items():
            name = key.strip().lower()
            if name in SPARK_OPTIONS:
                continue
            if name not in self.names:
                close = difflib.get_close_matches(name, sorted(self.names), n=1, cutoff=0.6)
                hint = (f"did you mean '{close[0]}'?" if close
                        else "see the options table in the docs")
                raise self._error(name, f"unknown option for format {self.format_name}; {hint}")
            if name in known:
                raise self._error(name, "is given twice (option names are case-insensitive)")
            known[name] = value
        return known


def parsed(
    option: str, text: str, parse: Callable[[str], T], error: Callable[[str, str], OptionError]
) -> T:
    """``parse(text)``, a grammar's :class:`ValueError` turned into the connector's error
    naming ``option``."""
    try:
        return parse(text)
    except ValueError as exc:
        raise error(option, f"bad value: {exc}") from None


def option_pair(text: str) -> tuple[str, str]:
    """An ``OPTION=VALUE`` command-line argument (``--source``, ``--sink``), as argparse's
    ``type``: the name stripped and lower-cased as Spark reads it, the value as given (it may
    hold ``=`` itself)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected OPTION=VALUE, got {text!r}")
    return name.strip().lower(), value
