"""Offsets of ``mode=polling``: a tracking value and an xid frontier, as canonical JSON.

An offset ``(tracking, frontier)`` stands for "every row version written by a transaction whose
id is below ``frontier`` and whose tracking value is at or below ``tracking``" (see
:mod:`postgres_cdc_source.polling.reader` for why that set only grows and how batches cut it):

* ``tracking``: the tracking column's value as Postgres prints it (``None``: nothing read yet).
  Kept as text so any orderable type round-trips exactly; Postgres parses it back as the
  column's type when it is compared.
* ``frontier``: a 64-bit transaction id (``txid_snapshot_xmin`` when the batch was planned):
  every transaction below it had finished, so no row version below it can still appear.

Spark compares offsets as JSON strings, so :meth:`PollOffset.to_json` always gives the same keys
in the same order; a checkpoint written by ``mode=cdc`` is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from postgres_cdc_source.errors import ConfigError

__all__ = ["PollOffset"]


@dataclass(frozen=True, order=False)
class PollOffset:
    """One position of a polling stream."""

    tracking: str | None
    frontier: int

    def to_json(self) -> dict[str, Any]:
        """The dict Spark stores; keys in one fixed order, the frontier as an integer."""
        return {"frontier": self.frontier, "tracking": self.tracking}

    @classmethod
    def from_json(cls, offset: dict[str, Any]) -> PollOffset:
        """Parse an offset Spark hands back; a cdc checkpoint (``{"lsn": ...}``) is refused."""
        if set(offset) != {"frontier", "tracking"}:
            raise ConfigError(
                "mode",
                f"the checkpoint holds offset {offset!r}, not a polling offset: it was written "
                "by another mode; use a new checkpointLocation",
            )
        tracking = offset["tracking"]
        frontier = offset["frontier"]
        if (tracking is not None and not isinstance(tracking, str)) or not isinstance(
            frontier, int
        ):
            raise ConfigError("mode", f"malformed polling offset in the checkpoint: {offset!r}")
        return cls(tracking, frontier)
