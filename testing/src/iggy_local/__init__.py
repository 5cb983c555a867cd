"""A local broker speaking Apache Iggy's TCP protocol, for notebooks, demos and tests.

No Iggy server can be installed everywhere this project runs, so it ships this one: a
single-process asyncio broker that the real ``apache-iggy`` SDK drives unchanged over TCP, in
the protocol of Iggy 0.9 or 0.10 (:mod:`iggy_local.dialects`).
It keeps streams, topics, partitions, messages and consumer offsets in memory, and with a data
directory in an fsynced append-only journal that a restart replays.

>>> from iggy_local import LocalIggy
>>> with LocalIggy() as broker:  # doctest: +SKIP
...     client = IggyClient.from_connection_string(broker.url)
"""

from __future__ import annotations

from .runner import LocalIggy

__all__ = ["LocalIggy"]
