"""The exceptions ``pg_cdc`` raises, one small hierarchy so callers can catch it as a whole.

Every class keeps its constructor arguments in ``args`` and renders its message from them
(:class:`connector_common.errors.ConnectorError`, the shape ``iggy_routed``'s errors share):
Spark ships an executor's exception to the driver by pickling it, and a ``ConfigError`` that
arrived without ``.option`` (or a ``SourceError`` without ``.sqlstate``) would lose exactly the
detail that says what to fix.
"""

from __future__ import annotations

from connector_common.errors import ConnectorError, OptionError

__all__ = ["CdcError", "ConfigError", "SlotError", "SourceError", "DecodeError"]


class CdcError(ConnectorError):
    """Base class of every error ``pg_cdc`` raises on purpose."""


class ConfigError(CdcError, OptionError):
    """A reader option is missing or has a bad value: ``option 'slot': bad value: 'a b' (...)``.

    ``option`` names the option at fault; ``problem`` names the bad value and what is expected.
    """


class SlotError(CdcError):
    """The replication slot or publication is missing, in use, or in the wrong state."""


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
