"""What the ``iggy`` source raises besides option errors (:class:`~iggy_spark.errors.ConfigError`).

Subclasses of the package's :class:`~iggy_spark.errors.IggySparkError`, so one ``except`` catches
the sink's and the source's errors alike; each keeps its arguments in ``args`` so it survives
Spark's pickling from executor to driver.
"""

from __future__ import annotations

import logging

from iggy_spark.errors import IggySparkError, show

__all__ = ["DataLoss", "SourceError", "raise_or_skip"]

_log = logging.getLogger(__name__)


class SourceError(IggySparkError):
    """Reading ``topic`` failed for a reason the options cannot fix."""

    def __init__(self, topic: str, detail: str) -> None:
        super().__init__(topic, detail)
        self.topic = topic
        self.detail = detail

    def _message(self) -> str:
        return f"reading topic {show(self.topic)}: {self.detail}"


class DataLoss(SourceError):
    """Planned offsets no longer exist (retention removed them, or the topic was deleted).

    Raised only with ``fail_on_data_loss=true``; with ``false`` the lost messages are skipped.
    """

    def __init__(self, topic: str, partition: int, start: int, end: int, why: str) -> None:
        IggySparkError.__init__(self, topic, partition, start, end, why)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.detail = why

    def _message(self) -> str:
        return (f"offsets [{self.start}, {self.end}) of topic {show(self.topic)} partition "
                f"{self.partition} are lost ({self.detail}); set fail_on_data_loss=false to skip "
                "them")


def raise_or_skip(
    loss: DataLoss, fail_on_data_loss: bool, cause: BaseException | None = None
) -> None:
    """``fail_on_data_loss``'s verdict on ``loss``: raised (from ``cause``), or its offsets
    skipped with a warning, never quietly."""
    if fail_on_data_loss:
        raise loss from cause
    _log.warning("iggy: skipped offsets [%d, %d) of topic %s partition %d, lost (%s): "
                 "fail_on_data_loss=false", loss.start, loss.end, show(loss.topic),
                 loss.partition, loss.detail)
