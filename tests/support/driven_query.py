"""A ``pg_cdc`` stream reader driven through its own calls, as Spark drives it, without Spark."""

from __future__ import annotations

from typing import Any

from iggy_spark_testing.harness import LocalPostgres
from postgres_cdc_source.source import PgCdcDataSource
from postgres_cdc_source.stream.reader import PgCdcStreamReader


class DrivenQuery:
    """A reader run the way Spark runs it: plan, read every partition, commit; offsets kept."""

    def __init__(self, pg: LocalPostgres, options: dict[str, str]) -> None:
        source = PgCdcDataSource({"dsn": pg.dsn, **options})
        reader = source.streamReader(source.schema())
        assert isinstance(reader, PgCdcStreamReader)
        self.reader = reader
        self.offset: dict[str, Any] = self.reader.initialOffset()
        self.offsets: list[dict[str, Any]] = []

    def batch(self, replayed: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """One batch's rows; with ``replayed``, the batch is also read again, as a new driver
        process does after a crash, into that list."""
        end = self.reader.latestOffset(self.offset, self.reader.getDefaultReadLimit())
        rows = rows_of(self.reader, self.offset, end)
        if replayed is not None:
            replayed += rows_of(PgCdcStreamReader(self.reader.options, self.reader.rows),
                                self.offset, end)
        self.reader.commit(end)
        self.offset = end
        self.offsets.append(end)
        return rows


def rows_of(reader: PgCdcStreamReader, start: dict[str, Any], end: dict[str, Any]
            ) -> list[dict[str, Any]]:
    """The rows of the batch from ``start`` to ``end``, every partition read."""
    return [row for part in reader.partitions(start, end)
            for batch in reader.read(part) for row in batch.to_pylist()]
