"""The exceptions ``pg_cdc`` raises, one small hierarchy so callers can catch it as a whole.

Every class is picklable with its extra attributes: Spark ships an executor's exception to the
driver by pickling it, and a ``ConfigError`` that arrived without ``.option`` (or a
``DecodeError`` without ``.lsn``) would lose exactly the detail that says what to fix.
"""

from __future__ import annotations

__all__ = ["CdcError", "ConfigError", "SlotError", "SourceError", "DecodeError"]


class CdcError(Exception):
    """Base class of every error ``pg_cdc`` raises on purpose."""


class ConfigError(CdcError, ValueError):
    """A reader option is missing or has a bad value.

    ``option`` names the option at fault; ``message`` is the whole sentence shown to the user and
    should name the option and the bad value itself (``bad value for slot: 'a b'``).
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        return type(self), (self.option, str(self))


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
        super().__init__(message)
        self.sqlstate = sqlstate
        self.transient = transient

    def __reduce__(self) -> tuple[type[SourceError], tuple[str, str | None, bool]]:
        return type(self), (str(self), self.sqlstate, self.transient)


class DecodeError(CdcError, ValueError):
    """A logical-decoding row could not be decoded: the plugin output is not what was expected.

    ``lsn`` is the LSN of the offending row (``None`` when the error is not tied to one); the
    message already names it in Postgres's ``X/Y`` form, so logs are enough to find the change
    with ``pg_logical_slot_peek_changes``.
    """

    def __init__(self, message: str, lsn: int | None = None) -> None:
        super().__init__(message)
        self.lsn = lsn

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, int | None]]:
        return type(self), (str(self), self.lsn)
