"""Asyncio TCP server that answers the ``apache-iggy`` SDK the way an Iggy server does.

One task per connection reads a 256-byte header, then the body, dispatches it, and writes one
reply before reading the next request: the SDK keeps one request in flight per connection, so
strict request/reply order is all it needs, and many connections are served concurrently by
the event loop, up to :attr:`BrokerServer.max_connections`. Handlers are synchronous and
short; with a data directory each write blocks on its ``fsync`` before the reply goes out, which
keeps ordering trivially right.

Failure policy, per the protocol notes:

* bytes that are not a request frame (wrong command byte, impossible size, client id 0) close
  that connection only, because the stream cannot be resynchronised; so does a body larger than
  :data:`PRE_LOGIN_BODY_LIMIT` before login (never read: only a login may come first), and a
  request, or the wait for one, that takes longer than :attr:`BrokerServer.idle_timeout`;
* a connection past :attr:`BrokerServer.max_connections` is closed as soon as it is accepted;
* a header the server's field rules refuse is dropped without a reply, the connection kept, as
  the real server does (:func:`~iggy_local.frames.header_problem`): an operation byte no
  client may send, a login whose session or request number is not 0, any other replicated
  request with session or request number 0;
* a well-framed request the broker refuses gets a reply: an error status with an empty body, or
  for metadata and offset writes a ``[1][0][code]`` result section;
* an unknown read command gets ``InvalidCommand`` (3) and a metadata operation the broker does
  not implement ``FeatureUnavailable`` (5);
* before login, reads other than ping get ``Unauthenticated`` (40) and writes get an
  ``Eviction(NoSession)`` frame; a bad login gets ``Eviction(InvalidCredentials)``, and a
  client of another protocol line (:mod:`~iggy_local.dialects`) ``Eviction(IncompatibleProtocol)``
  with the window this broker accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count

from .batches import verify_batch
from .codes import (
    HEADER_SIZE,
    BrokerError,
    ErrorCode,
    EvictionReason,
    FrameError,
    Operation,
    PollingKind,
    ReadCode,
    is_result_framed,
)
from .dialects import IGGY_0_9, Dialect, version_text
from .frames import (
    RequestHeader,
    decode_request_header,
    encode_eviction,
    encode_reply_header,
    header_problem,
    request_checksum_matches,
)
from .replies import (
    RESULT_OK,
    encode_cluster_metadata,
    encode_consumer_offset,
    encode_login_reply,
    encode_partition_route,
    encode_poll_header,
    encode_send_reply,
    encode_stream,
    encode_topic,
    encode_topic_header,
    result_rejection,
)
from .requests import (
    PartitionTarget,
    PollMessages,
    Reader,
    consumer_key,
    decode_client_version,
    decode_credentials,
    decode_delete_offset,
    decode_get_offset,
    decode_poll_messages,
    decode_send_messages,
    decode_store_offset,
)
from .storage import Partition, Store, Topic

log = logging.getLogger(__name__)

ROOT_USER_ID = 0

PRE_LOGIN_BODY_LIMIT = 4096
"""The largest body read before a connection logged in: a login is at most about 1.1 KiB (the
client's version, a bind secret, a name and a password of 255 bytes each) plus the SDK's
client context, which it sends empty. A larger one closes the connection unread, so a client
without credentials cannot make the broker buffer :data:`~.codes.MAX_FRAME_SIZE` bytes."""


@dataclass(slots=True)
class Connection:
    """Per-connection login state; ``session`` is 0 until a login succeeds."""

    peer: str
    session: int = 0


Handler = Callable[[Connection, bytes], bytes]


@dataclass
class BrokerServer:
    """Serves one :class:`Store` on ``host:port`` (port 0 picks a free one on :meth:`start`)."""

    store: Store
    host: str = "127.0.0.1"
    port: int = 0
    username: str = "iggy"
    password: str = field(default="iggy", repr=False)
    _server: asyncio.Server | None = field(default=None, init=False, repr=False)
    _clients: dict[asyncio.StreamWriter, asyncio.Task[None]] = field(
        default_factory=dict, init=False, repr=False
    )
    _serials: dict[asyncio.StreamWriter, int] = field(default_factory=dict, init=False,
                                                     repr=False)
    _accepted: int = field(default=0, init=False, repr=False)
    _sessions: count[int] = field(default_factory=lambda: count(1), init=False, repr=False)
    _ops: count[int] = field(default_factory=lambda: count(1), init=False, repr=False)
    tls: ssl.SSLContext | None = field(default=None, repr=False)
    dialect: Dialect = IGGY_0_9
    """The server line it speaks; a client of another is refused at login."""
    """Serve TLS with this context (its certificate and key) instead of plain TCP."""
    refused_sends: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    """Test-only fault switch: sends to these ``(stream, topic)`` names get a server error
    (``Error``, code 1) once the topic holds the number of messages given (0: at once), while
    everything else works, as a destination that broke would."""
    max_connections: int = 512
    """Connections served at once; one more is closed as soon as it is accepted (with a
    warning), so clients cannot exhaust the process's file descriptors."""
    idle_timeout: float = 300.0
    """Seconds a connection may take to send its next request, read in full, and take its
    reply; past it the connection is closed. The SDK pings an idle connection every few seconds
    (its heartbeat), so only a stalled or abandoned client reaches it."""

    def __post_init__(self) -> None:
        self._reads: dict[int, Handler] = {
            ReadCode.PING: lambda _conn, _body: b"",
            ReadCode.GET_CLUSTER_METADATA: self._cluster_metadata,
            ReadCode.GET_STREAM: self._get_stream,
            ReadCode.GET_STREAMS: self._get_streams,
            ReadCode.GET_TOPIC: self._get_topic,
            ReadCode.GET_TOPICS: self._get_topics,
            ReadCode.POLL_MESSAGES: self._poll_messages,
            ReadCode.GET_CONSUMER_OFFSET: self._get_consumer_offset,
        }
        if self.dialect.partition_context:
            self._reads[ReadCode.GET_PARTITION_ROUTE] = self._partition_route
        self._writes: dict[int, Handler] = {
            Operation.CREATE_STREAM: self._create_stream,
            Operation.CREATE_TOPIC: self._create_topic,
            Operation.DELETE_TOPIC: self._delete_topic,
            Operation.CREATE_PARTITIONS: self._create_partitions,
            Operation.SEND_MESSAGES: self._send_messages,
            Operation.STORE_CONSUMER_OFFSET: self._store_consumer_offset,
            Operation.DELETE_CONSUMER_OFFSET: self._delete_consumer_offset,
        }

    @property
    def accepted(self) -> int:
        """Client connections accepted so far (a mark for :meth:`open_since`)."""
        return self._accepted

    def open_since(self, mark: int) -> int:
        """Client connections accepted after ``mark`` (an :attr:`accepted`) still being served."""
        return sum(serial > mark for serial in self._serials.values())

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop every client, as a server going down would."""
        if self._server is None:
            return
        self._server.close()
        clients = list(self._clients.items())
        for writer, _ in clients:
            writer.close()
        await asyncio.gather(*(task for _, task in clients), return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    # -- connection loop ------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(writer.get_extra_info("peername"))
        conn = Connection(peer)
        task = asyncio.current_task()
        assert task is not None, "asyncio.start_server runs every handler in a task"
        self._accepted += 1
        self._serials[writer] = self._accepted
        try:
            if len(self._clients) >= self.max_connections:
                log.warning("%s: %d connections already, closing this one", peer,
                            self.max_connections)
                return
            self._clients[writer] = task
            while True:
                async with asyncio.timeout(self.idle_timeout):
                    try:
                        raw = await reader.readexactly(HEADER_SIZE)
                    except asyncio.IncompleteReadError as exc:
                        if exc.partial:
                            log.warning("%s: connection closed inside a frame header", peer)
                        return
                    header = decode_request_header(raw)
                    if not conn.session and header.body_size > PRE_LOGIN_BODY_LIMIT:
                        raise FrameError(f"a {header.body_size}-byte body before login (at "
                                         f"most {PRE_LOGIN_BODY_LIMIT})")
                    body = (await reader.readexactly(header.body_size) if header.body_size
                            else b"")
                    # without the empty bodies: from CPython 3.12 writelines sends with
                    # sendmsg, and an empty chunk is never drained, so the loop spins on the
                    # connection and it never closes (python/cpython#155888; 3.12.1, 3.13.0)
                    writer.writelines([frame for frame in self.handle(conn, header, body)
                                       if frame])
                    await writer.drain()
        except TimeoutError:
            log.warning("%s: no complete request and reply in %s s, closing the connection",
                        peer, self.idle_timeout)
        except FrameError as exc:
            log.warning("%s: malformed frame, closing the connection: %s", peer, exc)
        except asyncio.IncompleteReadError:
            log.warning("%s: connection closed inside a frame body", peer)
        except ConnectionError:
            log.debug("%s: connection lost", peer)
        finally:
            self._clients.pop(writer, None)
            self._serials.pop(writer, None)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def handle(self, conn: Connection, header: RequestHeader, body: bytes) -> list[bytes]:
        """Route one request and build the frames that answer it (no I/O: the connection loop
        writes them, and the benchmark calls this directly to time the broker alone)."""
        operation = header.operation
        problem = header_problem(header)
        if problem is not None:
            log.warning("%s: dropping a request with an invalid header: %s", conn.peer, problem)
            return []
        if operation == Operation.REGISTER:
            return self._login(conn, header, body)
        if operation == Operation.LOGOUT:
            conn.session = 0
            return [encode_reply_header(header, 0)]
        if operation == Operation.NON_REPLICATED:
            if not conn.session and header.code != ReadCode.PING:
                return self._reply(conn, header, status=ErrorCode.UNAUTHENTICATED)
            handler = self._reads.get(header.code)
            what = f"command code {header.code}"
        else:
            if not conn.session:
                return [encode_eviction(header.client, EvictionReason.NO_SESSION, self.dialect)]
            handler = self._writes.get(operation)
            what = f"operation {operation}"
        try:
            if handler is None:
                log.warning("%s: unsupported %s", conn.peer, what)
                raise BrokerError(
                    ErrorCode.INVALID_COMMAND if operation == Operation.NON_REPLICATED
                    else ErrorCode.FEATURE_UNAVAILABLE, f"{what} is not implemented")
            if not request_checksum_matches(header, body, self.dialect):
                raise BrokerError(ErrorCode.INVALID_FORMAT, "request checksum does not match")
            payload = handler(conn, body)
        except BrokerError as exc:
            log.debug("%s: rejected %s: %s", conn.peer, what, exc)
            code = exc.code
        except Exception:  # a broker bug or a failing disk: answer, never leave the SDK waiting
            log.exception("%s: %s failed", conn.peer, what)
            code = ErrorCode.ERROR
        else:
            return self._reply(
                conn, header, RESULT_OK + payload if is_result_framed(operation) else payload
            )
        if is_result_framed(operation):
            return self._reply(conn, header, result_rejection(code))
        return self._reply(conn, header, status=code)

    def _reply(
        self, conn: Connection, header: RequestHeader, body: bytes = b"", *, status: int = 0
    ) -> list[bytes]:
        """One reply frame. On 0.10 a replicated request's reply that is not refused before
        commit (a success, or a rejection in the result section) carries the committed-result
        marker, as a reply to a committed prepare does."""
        committed = (self.dialect.partition_context and not status
                     and header.operation != Operation.NON_REPLICATED)
        return [encode_reply_header(header, len(body), status=status, session=conn.session,
                                    committed_op=next(self._ops) if committed else 0), body]

    def _login(self, conn: Connection, header: RequestHeader, body: bytes) -> list[bytes]:
        """The client's version first, then its credentials in the layout of its line: a client
        of another line is told the window this one accepts, never that its login is
        malformed."""
        reader = Reader(body)
        evict = EvictionReason.MALFORMED_LOGIN
        try:
            client = decode_client_version(reader)
            if not self.dialect.accepts(client.protocol_version):
                log.warning(
                    "%s: %s %s speaks protocol %s, this broker (Iggy %s) %s", conn.peer,
                    client.sdk_name, client.sdk_version, version_text(client.protocol_version),
                    self.dialect.server, version_text(self.dialect.protocol),
                )
                evict = EvictionReason.INCOMPATIBLE_PROTOCOL
                return [encode_eviction(header.client, evict, self.dialect)]
            login = decode_credentials(reader, self.dialect)
        except BrokerError as exc:
            log.warning("%s: malformed login: %s", conn.peer, exc)
            return [encode_eviction(header.client, evict, self.dialect)]
        user_ok = hmac.compare_digest(login.username.encode(), self.username.encode())
        password_ok = hmac.compare_digest(login.password.encode(), self.password.encode())
        if not (user_ok and password_ok):
            log.warning("%s: invalid credentials for user %r", conn.peer, login.username)
            return [encode_eviction(header.client, EvictionReason.INVALID_CREDENTIALS,
                                    self.dialect)]
        conn.session = next(self._sessions)
        return self._reply(conn, header,
                           encode_login_reply(ROOT_USER_ID, conn.session, self.dialect))

    # -- reads ----------------------------------------------------------------------------------

    def _cluster_metadata(self, _conn: Connection, _body: bytes) -> bytes:
        advertised = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        return encode_cluster_metadata(advertised, self.port, self.dialect)

    def _get_stream(self, _conn: Connection, body: bytes) -> bytes:
        stream = self.store.find_stream(Reader(body).identifier("stream id"))
        if stream is None:
            return b""  # the SDK reads an empty body as None
        return encode_stream(stream.summary(), self.dialect, with_topics=True)

    def _get_streams(self, _conn: Connection, _body: bytes) -> bytes:
        return b"".join(
            encode_stream(stream.summary(), self.dialect, with_topics=False)
            for stream in self.store.streams.values()
        )

    def _get_topic(self, _conn: Connection, body: bytes) -> bytes:
        reader = Reader(body)
        topic = self.store.find_topic(reader.identifier("stream id"), reader.identifier("topic id"))
        return b"" if topic is None else encode_topic(topic.summary(), self.dialect)

    def _get_topics(self, _conn: Connection, body: bytes) -> bytes:
        stream = self.store.find_stream(Reader(body).identifier("stream id"))
        topics = list(stream.topics.values()) if stream is not None else []  # none: count 0
        return len(topics).to_bytes(4, "little") + b"".join(
            encode_topic_header(topic.summary(), self.dialect) for topic in topics
        )

    def _partition_route(self, _conn: Connection, body: bytes) -> bytes:
        """``[stream][topic][partition u32]`` -> the route of an existing partition."""
        reader = Reader(body)
        topic = self.store.topic(reader.identifier("stream id"), reader.identifier("topic id"))
        topic.partition(reader.u32("partition id"))
        return encode_partition_route(len(topic.partitions))

    def _target(self, target: PartitionTarget) -> tuple[Topic, Partition]:
        """Resolve a poll/offset target; no partition given means partition 0."""
        topic = self.store.topic(target.stream, target.topic)
        return topic, topic.partition(target.partition or 0)

    def _poll_messages(self, _conn: Connection, body: bytes) -> bytes:
        request = decode_poll_messages(body)
        topic, partition = self._target(request.target)
        consumer = consumer_key(request.target.consumer_kind, request.target.consumer)
        start = _poll_start(partition, request, consumer)
        if start is None:
            return encode_poll_header(partition.id, partition.current_offset, 0, self.dialect)
        chunks, polled = partition.read(start, request.count)
        if polled and request.auto_commit:
            self.store.store_consumer_offset(topic, partition, consumer, start + polled - 1)
        return encode_poll_header(
            partition.id, partition.current_offset, polled, self.dialect) + b"".join(chunks)

    def _get_consumer_offset(self, _conn: Connection, body: bytes) -> bytes:
        target = decode_get_offset(body)
        topic = self.store.find_topic(target.stream, target.topic)
        if topic is None:
            return b""  # what the server answers for an unknown stream or topic
        partition = topic.partition(target.partition or 0)
        stored = partition.consumer_offsets.get(consumer_key(target.consumer_kind,
                                                             target.consumer))
        if stored is None:
            return b""
        return encode_consumer_offset(partition.id, partition.current_offset, stored)

    # -- writes ---------------------------------------------------------------------------------

    def _create_stream(self, _conn: Connection, body: bytes) -> bytes:
        reader = Reader(body)
        name = reader.name("stream name")
        stream = self.store.create_stream(name, bytes(reader.rest()))
        return encode_stream(stream.summary(), self.dialect, with_topics=False)

    def _create_topic(self, _conn: Connection, body: bytes) -> bytes:
        reader = Reader(body)
        stream = reader.identifier("stream id")
        partitions_count = reader.u32("partitions count")
        name = reader.name("topic name")
        topic = self.store.create_topic(stream, name, partitions_count, bytes(reader.rest()))
        return encode_topic(topic.summary(), self.dialect)

    def _delete_topic(self, _conn: Connection, body: bytes) -> bytes:
        reader = Reader(body)
        self.store.delete_topic(reader.identifier("stream id"), reader.identifier("topic id"))
        return b""

    def _create_partitions(self, _conn: Connection, body: bytes) -> bytes:
        reader = Reader(body)
        stream, topic = reader.identifier("stream id"), reader.identifier("topic id")
        self.store.create_partitions(stream, topic, reader.u32("partitions count"))
        return b""

    def _send_messages(self, _conn: Connection, body: bytes) -> bytes:
        request = decode_send_messages(body)
        try:  # placed first, as the server does, which answers any miss with ResourceNotFound
            topic = self.store.topic(request.stream, request.topic)
            partition = topic.choose_partition(request.partitioning, request.partitioning_value)
        except BrokerError as exc:
            raise BrokerError(ErrorCode.RESOURCE_NOT_FOUND, str(exc)) from exc
        if self.refused_sends:
            after = self.refused_sends.get((self.store.streams[topic.stream_id].name, topic.name))
            if after is not None and sum(p.next_offset for p in topic.partitions) >= after:
                raise BrokerError(ErrorCode.ERROR,
                                  f"sends to topic {topic.name!r} are switched off")
        checksums = verify_batch(request.batch, request.messages_count)
        base_offset = self.store.append(topic, partition, bytearray(request.batch), checksums)
        return encode_send_reply(topic.stream_id, topic.id, partition.id, base_offset)

    def _store_consumer_offset(self, _conn: Connection, body: bytes) -> bytes:
        request = decode_store_offset(body)
        topic, partition = self._target(request.target)
        consumer = consumer_key(request.target.consumer_kind, request.target.consumer)
        self.store.store_consumer_offset(topic, partition, consumer, request.offset)
        return b""

    def _delete_consumer_offset(self, _conn: Connection, body: bytes) -> bytes:
        target = decode_delete_offset(body)
        topic, partition = self._target(target)
        self.store.delete_consumer_offset(
            topic, partition, consumer_key(target.consumer_kind, target.consumer))
        return b""


def _poll_start(
    partition: Partition, request: PollMessages, consumer: tuple[int, int]
) -> int | None:
    """First offset a poll reads, by strategy; ``None`` when nothing qualifies."""
    strategy = request.strategy
    if strategy is PollingKind.OFFSET:
        return request.value
    if strategy is PollingKind.TIMESTAMP:
        return partition.first_offset_at(request.value)
    if strategy is PollingKind.FIRST:
        return 0
    if strategy is PollingKind.LAST:
        return max(partition.current_offset - request.count + 1, 0)
    # NEXT: one past the consumer's stored offset, from the start if it never stored one.
    stored = partition.consumer_offsets.get(consumer)
    return 0 if stored is None else stored + 1


async def run_broker(
    *,
    data_dir: str | os.PathLike[str] | None,
    host: str,
    port: int,
    username: str,
    password: str,
    stop: asyncio.Event,
    on_ready: Callable[[BrokerServer], None] | None = None,
    refused_sends: dict[tuple[str, str], int] | None = None,
    tls: ssl.SSLContext | None = None,
    dialect: Dialect = IGGY_0_9,
) -> None:
    """Serve a store (in memory, or in ``data_dir``) until ``stop`` is set, then drop every
    client and close the store.

    The one lifecycle both the CLI (stopped by SIGTERM) and the in-process thread (stopped by
    :meth:`~.runner.LocalIggy.stop`) run. ``on_ready`` sees the server once it accepts
    connections, after the "listening on HOST:PORT" log line the process launcher waits for.
    """
    store = Store.open(data_dir)
    try:
        server = BrokerServer(store, host, port, username, password, tls=tls, dialect=dialect)
        if refused_sends is not None:
            server.refused_sends = refused_sends  # shared with the caller, who toggles it
        await server.start()
        log.info("Iggy %s (protocol %s) listening on %s:%d", dialect.server,
                 version_text(dialect.protocol), host, server.port)
        if on_ready is not None:
            on_ready(server)
        await stop.wait()
        await server.close()
    finally:
        store.close()
