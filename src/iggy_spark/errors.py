"""The exceptions of ``iggy_spark``: one small hierarchy, catchable as a whole.

The sink's are here, the ``iggy`` source's in :mod:`iggy_spark.source.errors`; users catch
them by the names :mod:`iggy_spark` and :mod:`iggy_spark.source` re-export.

Every class keeps its constructor arguments in ``args`` and renders its message from them
(:class:`connector_common.errors.ConnectorError`), so Spark can pickle it from executor to driver
without losing a field. Values that come from rows (stream and topic names) can be anything:
long, multi-line, hostile; they are shown through :func:`show`, quoted and truncated.
"""

from __future__ import annotations

from connector_common.errors import ConnectorError, OptionError, show
from iggy_spark import sdk

__all__ = [
    "AdmissionError",
    "ConfigError",
    "DestinationError",
    "EncodingError",
    "IggySparkError",
    "IncompatibleServer",
    "PayloadTooLarge",
    "SendError",
    "ServerError",
    "StateError",
    "UnknownDestination",
    "UnsupportedSdk",
    "show",
]


def _destination(stream: str | None, topic: str | None) -> str:
    return f"{show(stream)}/{show(topic)}"


class IggySparkError(ConnectorError):
    """Base class of every error the sink and the source raise on purpose."""


class ConfigError(IggySparkError, OptionError):
    """An ``iggy_routed`` or ``iggy`` option is missing, malformed or contradicts another
    (``.option`` names it); raised before any data moves."""


class AdmissionError(IggySparkError):
    """A row was refused a destination while the policy says to fail the query.

    ``reason`` is the counted rejection reason (``denylist``, ``cap``, ``missing_destination``
    ...); ``advice`` tells the user which option changes the outcome.
    """

    def __init__(self, stream: str | None, topic: str | None, reason: str, advice: str) -> None:
        super().__init__(stream, topic, reason, advice)
        self.stream = stream
        self.topic = topic
        self.reason = reason
        self.advice = advice

    def _message(self) -> str:
        where = _destination(self.stream, self.topic)
        return f"row refused for destination {where} (reason: {self.reason}): {self.advice}"


class EncodingError(IggySparkError, ValueError):
    """A row's data cannot become an Iggy message (bad id, key, header or payload).

    ``column`` names the DataFrame column at fault; ``row`` is the row's index in its Arrow
    batch, or ``None`` when the whole column is unusable (for example its type).
    """

    def __init__(self, column: str, row: int | None, problem: str) -> None:
        super().__init__(column, row, problem)
        self.column = column
        self.row = row
        self.problem = problem

    def _message(self) -> str:
        where = f"column '{self.column}'" if self.row is None else (
            f"column '{self.column}', row {self.row} of the batch"
        )
        return f"{where}: {self.problem}"


class PayloadTooLarge(EncodingError):
    """A row's payload is over ``max_message_bytes`` (at most Iggy's limit)."""


class _DestinationFailure(IggySparkError):
    """An operation on one destination failed; subclasses say which operation."""

    _doing = "using"

    def __init__(self, stream: str, topic: str, detail: str) -> None:
        super().__init__(stream, topic, detail)
        self.stream = stream
        self.topic = topic
        self.detail = detail

    def _message(self) -> str:
        return f"{self._doing} destination {_destination(self.stream, self.topic)}: {self.detail}"


class DestinationError(_DestinationFailure):
    """Creating or describing a stream or topic failed (permissions, server limits...)."""

    _doing = "creating or looking up"


class UnknownDestination(DestinationError):
    """The destination does not exist and ``create_destinations=false`` forbids creating it.

    A fact about the configuration, not a failure of the destination: it is refused with the
    reason ``unknown`` and never counts against the destination's circuit breaker.
    """


class SendError(_DestinationFailure):
    """Sending a group of messages to a destination failed."""

    _doing = "sending to"


class ServerError(IggySparkError):
    """The Iggy server refused the connection itself (credentials, TLS, protocol).

    No destination is at fault, so this never counts against a circuit breaker; it fails the
    task, and Spark does not commit the batch.
    """

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(address, detail)
        self.address = address
        self.detail = detail

    def _message(self) -> str:
        return f"cannot use the Iggy server at {self.address}: {self.detail}"


class IncompatibleServer(ServerError):
    """The server refused the installed ``apache-iggy`` SDK at login: it speaks another Iggy
    protocol line (servers 0.9 speak protocol 0.11, servers 0.10 protocol 0.12), and only the SDK
    of its line can log in.

    ``server_protocol`` is the newest binary protocol the server accepts (packed, as the wire
    carries it), ``None`` if the server did not say; ``sdk_version`` is the installed SDK's.
    """

    def __init__(self, address: str, server_protocol: int | None, sdk_version: str) -> None:
        IggySparkError.__init__(self, address, server_protocol, sdk_version)
        self.address = address
        self.server_protocol = server_protocol
        self.sdk_version = sdk_version
        self.detail = self._detail()

    def _detail(self) -> str:
        ours = sdk.line_of(self.sdk_version)
        sdk_speaks = "" if ours is None else (
            f", which speaks Iggy {ours.server}'s protocol {sdk.protocol_text(ours.protocol)}")
        refused = f"refuses the installed apache-iggy {self.sdk_version}{sdk_speaks}"
        if self.server_protocol is None:
            return (f"the server {refused}; install the apache-iggy of the server's Iggy line: "
                    f"{sdk.INSTALL_ANY}")
        theirs = next((line for line in sdk.LINES if line.speaks(self.server_protocol)), None)
        protocol = sdk.protocol_text(self.server_protocol)
        if theirs is None:
            return (f"the server speaks binary protocol {protocol}, which no Iggy line "
                    f"iggy-spark supports speaks, and {refused}")
        return (f"it is an Iggy {theirs.server} server (binary protocol {protocol}) and "
                f"{refused}; install the SDK of its line: {theirs.install}")


class UnsupportedSdk(IggySparkError):
    """The installed ``apache-iggy`` (``version``) speaks no Iggy line iggy-spark supports."""

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.version = version

    def _message(self) -> str:
        return (f"apache-iggy {self.version} is not an SDK iggy-spark supports; install the one "
                f"of your Iggy server's line: {sdk.INSTALL_ANY}")


class StateError(IggySparkError):
    """The query's control topic (its state in Iggy) cannot be used as it must be.

    Fails the task or the commit: Spark does not commit the batch, so nothing is lost.
    """

    def __init__(self, topic: str, detail: str) -> None:
        super().__init__(topic, detail)
        self.topic = topic
        self.detail = detail

    def _message(self) -> str:
        return f"the sink's control topic {show(self.topic)}: {self.detail}"
