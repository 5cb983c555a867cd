"""Test helpers for an ``iggy_routed`` query's state in its control topic."""

from __future__ import annotations

from typing import Any

from iggy_local import LocalIggy
from iggy_spark import read_ledger
from iggy_spark.connection import IggyConnection
from iggy_spark.iggy_url import IggyUrl
from iggy_spark.sink.control_records import LedgerRecord
from iggy_spark.sink.control_topic import ControlTopic
from iggy_spark.sink.options import RoutedOptions
from iggy_spark.sink.report import Ledger


def ledger_of(broker: LocalIggy, query_id: str) -> Ledger:
    """The query's newest ledger, as the sink's tasks read it."""
    return read_ledger(broker.url, query_id=query_id)


def replace_ledger(broker: LocalIggy, query_id: str, data: dict[str, Any]) -> None:
    """Append ``data`` as the query's ledger (creating the control topic if need be); of two
    ledgers of one batch the newer wins, so this works as an operator's correction would."""
    control = ControlTopic.of_query(IggyConnection.shared(IggyUrl.parse(broker.url)),
                                    RoutedOptions.state_stream, query_id, timeout=30)
    control.create()
    control.append(LedgerRecord(data))
