"""The exceptions ``pg_cdc`` raises, one small hierarchy so callers can catch it as a whole.

Every class keeps its constructor arguments in ``args`` and renders its message from them
(:class:`connector_common.errors.ConnectorError`, the shape ``iggy_routed``'s errors share):
Spark ships an executor's exception to the driver by pickling it, and a ``ConfigError`` that
arrived without ``.option`` (or a ``SourceError`` without ``.sqlstate``) would lose exactly the
detail that says what to fix.
"""

from __future__ import annotations

from connector_common.errors import ConnectorError, OptionError
from connector_common.lsn import format_lsn

__all__ = [
    "BackfillRefused",
    "CdcError",
    "ConfigError",
    "DecodeError",
    "SchemaChangedError",
    "SlotError",
    "SlotLostError",
    "SourceError",
]


class CdcError(ConnectorError):
    """Base class of every error ``pg_cdc`` raises on purpose."""


class ConfigError(CdcError, OptionError):
    """A reader option is missing or has a bad value: ``option 'slot': bad value: 'a b' (...)``.

    ``option`` names the option at fault; ``problem`` names the bad value and what is expected.
    """


class SlotError(CdcError):
    """The replication slot or publication is missing, in use, or in the wrong state."""


_LOST_BECAUSE = {
    None: "it does not exist (dropped, or the server failed over to a standby without it)",
    "wal_removed": "Postgres invalidated it (wal_removed): the WAL it still needed was removed, "
    "because it fell further behind than max_slot_wal_keep_size allows",
    "rows_removed": "Postgres invalidated it (rows_removed): catalog rows it still needed were "
    "vacuumed away",
    "wal_level_insufficient": "Postgres invalidated it (wal_level_insufficient): the primary's "
    "wal_level is no longer logical",
    "idle_timeout": "Postgres invalidated it (idle_timeout): it was unused for longer than "
    "idle_replication_slot_timeout",
    "conflicting": "Postgres invalidated it (a conflict with recovery: rows_removed or "
    "wal_level_insufficient)",
}


class SlotLostError(SlotError):
    """The query's slot is gone or invalidated: the changes since its checkpoint cannot be read.

    ``slot`` names it; ``reason`` is ``None`` for a slot that does not exist, else Postgres's
    ``invalidation_reason`` (``wal_removed``, ``rows_removed``, ``wal_level_insufficient``,
    ``idle_timeout``; ``conflicting`` on Postgres 16, which says no more). The message says the
    ways back; a caller tells this case from other slot errors by the type, never the text.
    """

    def __init__(self, slot: str, reason: str | None) -> None:
        super().__init__(slot, reason)
        self.slot = slot
        self.reason = reason

    @property
    def because(self) -> str:
        """Why the slot is lost, in words: the reason and what causes it."""
        return _LOST_BECAUSE.get(self.reason, f"Postgres invalidated it ({self.reason})")

    def _message(self) -> str:
        return (
            f"replication slot {self.slot!r} is lost: {self.because}. The changes since the "
            "query's checkpoint cannot be read. Ways back: drop the slot if it still exists "
            f"(SELECT pg_drop_replication_slot('{self.slot}')) and start the query with a new "
            "checkpoint location, with snapshot=initial to read the captured tables as they "
            "are now (rows with op 'read': the state is restored, the history of the gap is "
            "not), or set on_slot_lost=resnapshot to do that from the same checkpoint. Docs: "
            "operations, Lost slots"
        )


class SourceError(CdcError):
    """Postgres could not be reached or failed while a batch was read.

    ``sqlstate`` is Postgres's error code when the server sent one (``None`` when the
    connection itself failed: refused, timed out, dropped); ``transient`` says whether waiting
    can heal it (the server starting up or restarting, a lost connection), which is the only
    case the reader retries. The message carries the server's own text, password scrubbed.
    """

    def __init__(self, message: str, sqlstate: str | None = None, transient: bool = False) -> None:
        super().__init__(message, sqlstate, transient)
        self.message = message
        self.sqlstate = sqlstate
        self.transient = transient

    def _message(self) -> str:
        return self.message


class DecodeError(CdcError, ValueError):
    """A logical-decoding row could not be decoded: the plugin output is not what was expected.

    ``lsn`` is the LSN of the offending row (``None`` when the error is not tied to one); the
    message already names it in Postgres's ``X/Y`` form, so logs are enough to find the change
    with ``pg_logical_slot_peek_changes``.
    """

    def __init__(self, message: str, lsn: int | None = None) -> None:
        super().__init__(message, lsn)
        self.message = message
        self.lsn = lsn

    def _message(self) -> str:
        return self.message


class BackfillRefused(CdcError, ValueError):
    """A backfill request names a table that cannot be backfilled (unknown, or without a
    primary key to read it in key ranges), or a slot that does not exist."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def _message(self) -> str:
        return self.message


class SchemaChangedError(CdcError):
    """A ``row_format=struct`` query met a change its structs cannot type: a table whose
    columns are no longer the ones its structs were fixed with when it started (``table``:
    ``schema.table``; ``difference``: by kind, the columns added, dropped, renamed or of
    another type). The message says what a restart does under each ``schema_evolution``, since
    the way on is the user's choice of what consumes the rows."""

    def __init__(self, table: str, difference: str, lsn: int | None = None) -> None:
        super().__init__(table, difference, lsn)
        self.table = table
        self.difference = difference
        self.lsn = lsn

    def _message(self) -> str:
        where = "" if self.lsn is None else f" at LSN {format_lsn(self.lsn)}"
        return (f"pg_cdc row_format=struct: table {self.table} changed{where}: "
                f"{self.difference}. The query stops after every change committed before "
                "this one: its before/after/key structs were fixed when it started. A restart "
                "on this checkpoint with schema_evolution=fail (the default) is refused; with "
                "schema_evolution=add_columns it evolves the structs and goes on with this "
                "change: a column added is appended, a column dropped or renamed keeps its "
                "field, null from then on (with schema_location; the new name is appended), "
                "a type widened (smallint to integer to bigint, real to double precision, a "
                "larger numeric or varchar) takes the wider type, any other type change or "
                "another key is refused. A restart on a new checkpoint with the same slot "
                "goes on with this change in rows of the table's columns now. Either way "
                "nothing is lost or delivered twice; make sure what consumes the rows takes "
                "the new struct (a table's schema, a MERGE). row_format=json carries any "
                "columns")
