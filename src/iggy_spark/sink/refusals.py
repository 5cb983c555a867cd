"""Every reason a row is refused, and the error it becomes: pure, no I/O.

A row is refused by the admission rules (:class:`~iggy_spark.sink.admission.AdmissionReason`:
its destination's name, the lists, the cap, the sink's own destinations) or, once it passed
them, by what the sink finds (:class:`DeliveryReason`: the destination's open breaker, a topic
that is missing, a row that cannot become a message, a partition id past the topic's). Either
kind then follows ``on_admission_failure`` alike: counted under its value, which is the
``reason`` label of the rejection counter and the ``iggy_spark.reason`` header of a dead
letter, and under ``error`` raised as :func:`rejection`. :data:`REASONS` lists them all (the
docs' table of reasons is held to it).
"""

from __future__ import annotations

from enum import StrEnum

from iggy_spark.errors import AdmissionError
from iggy_spark.sink.admission import AdmissionReason

__all__ = ["REASONS", "DeliveryReason", "Reason", "check_partition_id", "rejection"]


class DeliveryReason(StrEnum):
    """Why a row that passed the admission rules was refused all the same."""

    CIRCUIT_OPEN = "circuit_open"
    UNKNOWN = "unknown"
    TOO_LARGE = "too_large"
    INVALID_ROW = "invalid_row"
    PARTITION_ID_OUT_OF_RANGE = "partition_id_out_of_range"

    @property
    def advice(self) -> str:
        """What the user can do about it, for the error under ``on_admission_failure=error``."""
        return _ADVICE[self]


_ADVICE = {
    DeliveryReason.CIRCUIT_OPEN: "recent sends to this destination failed; its circuit breaker "
    "retries after circuit_breaker.cool_down",
    DeliveryReason.UNKNOWN: "the destination does not exist and create_destinations is false: "
    "create it, or allow the sink to",
    DeliveryReason.TOO_LARGE: "the row's payload is over max_message_bytes",
    DeliveryReason.INVALID_ROW: "the row cannot become an Iggy message (null or empty payload, "
    "bad header, id or key)",
    DeliveryReason.PARTITION_ID_OUT_OF_RANGE: "partition ids count from 0 and must be below the "
    "topic's partition count",
}

Reason = AdmissionReason | DeliveryReason
"""Why a row was refused, by a rule of admission or past them."""

REASONS: tuple[Reason, ...] = (*AdmissionReason, *DeliveryReason)
"""Every reason, the admission rules' first."""


def rejection(stream: str, topic: str, reason: Reason) -> AdmissionError:
    """The error for a rejected row under ``on_admission_failure=error``."""
    advice = f"{reason.advice}; on_admission_failure=drop or dlq keeps the query running"
    return AdmissionError(stream, topic, reason.value, advice)


def check_partition_id(partition_id: int, partitions_count: int) -> DeliveryReason | None:
    """Iggy partitions are numbered ``0 .. partitions_count - 1``.

    A bad id is a data problem of one row, not a sign the topic is unhealthy, so the writer
    counts this reason but does not report it to the destination's circuit breaker.
    """
    if 0 <= partition_id < partitions_count:
        return None
    return DeliveryReason.PARTITION_ID_OUT_OF_RANGE
