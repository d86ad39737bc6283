"""The listener: asyncio connections, Kafka framing, limits, ordered pipelined responses.

One connection = one reader loop and one writer loop. The reader takes a frame (4-byte size,
then the request), checks it against the limits and starts its handler; at most
``max_in_flight`` handlers per connection run at once (further requests stay unread in the
socket: back-pressure), and the writer sends responses strictly in request order, as Kafka does.

What closes a connection, as on a broker: a size prefix below a request header or above
``max_request_bytes`` (before login: above ``sasl_max_receive_size``), a request that does not
parse, an API key no Kafka version knows, a version of a known API that the codec cannot even
frame an error for, a connection idle (or a request or response stalled) longer than
``idle_timeout_ms``, a connection not logged in within ``login_timeout_ms`` (without SASL: that
has not sent its first request), and connections beyond ``max_connections``,
``max_connections_per_ip``, the not-logged-in share or the address's creation rate (closed on
accept). Everything else gets an answer: a supported API
its response, any other API or version the UNSUPPORTED_VERSION error response, ApiVersions of an
unknown version the KIP-511 v0 answer.

Before login a connection is anybody's, so it gets less (:mod:`fetcher.kafka.admission`): one
request handled at a time (the next is read only after the answer is ready, as the broker mutes
a channel during SASL; SASL requests are handled one at a time after login too), its own share of
the connection slots (the oldest such connection gives way to a new one), and the request bytes
all connections hold at once are bounded (``queued_max_request_bytes``: a request that does not
fit waits unread).

Admission comes before TLS: the listener accepts plain sockets itself (:func:`listen`,
``sock_accept``) and counts each against its address's creation rate and the connection slots
before the event loop reads a byte of it; only an admitted socket becomes a stream, through its
TLS handshake (``connect_accepted_socket``, within the login deadline). A refused one is closed
with nothing read and no TLS work done, so a reconnect storm costs an accept and a close each
(``asyncio.start_server(ssl=...)`` handshakes before its callback could refuse, so every reconnect
of a storm above the not-logged-in share cost a full handshake; and ``start_tls`` after a plain
accept loses a ClientHello that uvloop has already read). One over its address's creation rate
is held, unread, until the rate would allow it, any other refused one a second, and then closed,
as Kafka delays closing a throttled connection, so a storm does not come straight back.

TLS, SASL and ACLs come from ``read.kafka_security`` (:mod:`fetcher.kafka.security`): the
(reloading) TLS context wraps an admitted stream, and with SASL each connection gets a
:class:`~fetcher.kafka.authz.ConnectionGuard` that answers the SASL APIs, closes the connection
on anything but ApiVersions/SASL before authentication, and applies the broker's ACL decisions
around the handlers.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from fetcher.core import RemoteFetcher
from fetcher.kafka.admission import ByteBudget, Closable, ConnectionSlots, CreationRate
from fetcher.kafka.api_consumer_groups import handle_consumer_group_describe, handle_consumer_group_heartbeat
from fetcher.kafka.api_coordinator import handle_find_coordinator, handle_offset_commit, handle_offset_fetch
from fetcher.kafka.api_epochs import handle_offset_for_leader_epoch
from fetcher.kafka.api_fetch import handle_fetch
from fetcher.kafka.api_groups import (
    handle_describe_groups,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_sync_group,
)
from fetcher.kafka.api_list_offsets import handle_list_offsets
from fetcher.kafka.api_meta import api_versions_response, handle_api_versions, handle_metadata
from fetcher.kafka.api_produce import handle_produce
from fetcher.kafka.authz import ConnectionGuard
from fetcher.kafka.broker_frontier import BrokerFetchFrontier
from fetcher.kafka.codec import (
    API_VERSIONS_KEY,
    SUPPORTED,
    FrameError,
    ResponseFrame,
    decode_request,
    encode_response,
    error_response,
    peek_header,
    request_class,
    response_class,
)
from fetcher.kafka.context import EndpointContext, ListenerSettings
from fetcher.kafka.errors import InvalidRequest
from fetcher.kafka.groups import CLIENT_HOST
from fetcher.kafka.requester import CONNECTION
from fetcher.kafka.sasl import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, CloseConnection
from fetcher.kafka.security import EndpointSecurity

log = structlog.get_logger(__name__)

Handler = Callable[[EndpointContext, Any, int, Any], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {
    0: handle_produce,
    1: handle_fetch,
    2: handle_list_offsets,
    3: handle_metadata,
    8: handle_offset_commit,
    9: handle_offset_fetch,
    10: handle_find_coordinator,
    11: handle_join_group,
    12: handle_heartbeat,
    13: handle_leave_group,
    14: handle_sync_group,
    15: handle_describe_groups,
    16: handle_list_groups,
    18: handle_api_versions,
    23: handle_offset_for_leader_epoch,
    68: handle_consumer_group_heartbeat,
    69: handle_consumer_group_describe,
}
assert set(HANDLERS) == set(SUPPORTED)

_SIZE = struct.Struct(">i")
_MIN_REQUEST = 8  # api key, version, correlation id
_TLS_SLICE = 256 * 1024  # bytes of a response handed to the TLS transport at once (16 TLS records)
_SASL_KEYS = (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY)
_ACCEPT_RETRY_S = 1.0  # after a failed accept (EMFILE), as asyncio's own server waits
_ACCEPT_BATCH = 64  # connections accepted at once when more are queued
_REFUSED_HOLD_S = 1.0  # how long a refused connection is held, unread, before it is closed
_REFUSAL_LOG_S = 10.0  # refusals of one reason are logged at most once per this, with their count


def listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for ``host`` (every address it resolves to, as asyncio's server binds;
    "": every interface) and ``port`` (0: one the system picks, the same for all when it can)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    out: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            ls = socket.socket(family, kind, proto)
            out.append(ls)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(out) > 1:  # the port the first one got
                address = (address[0], out[0].getsockname()[1], *address[2:])
            ls.bind(address)
            ls.listen(1024)
            ls.setblocking(False)
    except OSError:
        for ls in out:
            ls.close()
        raise
    return out


class _Slot:
    """A connection's place in the listener's slots from accept on, before its stream exists (the
    TLS handshake): closing it then cancels the set-up; afterwards it closes the connection."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.task: asyncio.Task[None] | None = None  # set once admitted
        self.started = False  # its task has taken over the socket
        self.conn: Connection | None = None

    def close_now(self, reason: str) -> None:
        if self.conn is not None:
            self.conn.close_now(reason)
        elif self.task is not None:
            log.info("kafka_connection_closed", peer=self.peer, reason=reason)
            self.task.cancel()


class KafkaEndpoint:
    """A read-only Kafka broker over the remote tier. ``await start()``, ``await stop()``."""

    def __init__(
        self,
        fetcher: RemoteFetcher,
        settings: ListenerSettings,
        state_dir: Path,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.settings = settings
        self.security = EndpointSecurity.from_fetcher(fetcher)
        self.ctx = EndpointContext(fetcher, settings, state_dir)
        self._ssl = ssl_context or self.security.ssl_context
        self._listeners: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._conns: dict[asyncio.Task[None], Connection] = {}
        self._pending: set[asyncio.Task[None]] = set()  # accepted, not yet a running connection
        self.slots = ConnectionSlots(
            settings.max_connections,
            settings.max_connections_per_ip,
            settings.max_unauthenticated_connections,
            min_wait_s=settings.login_timeout_ms / 2000,  # half the login deadline
        )
        # connections not logged in may hold half of it: the other half stays for logged-in clients
        self.budget = ByteBudget(settings.queued_max_request_bytes, prelogin_share=0.5)
        self.creation = CreationRate(settings.connection_creation_rate_per_ip)
        #: what happened on accept: "accepted", "tls_handshakes" (started), "tls_failed",
        #: "refused:<reason>" (tests and operators read them; no TLS work is done for a refusal)
        self.stats: collections.Counter[str] = collections.Counter()
        self._held: dict[socket.socket, asyncio.TimerHandle] = {}  # refused, closed when their time is up
        self._refusals_logged: dict[str, tuple[float, int]] = {}  # reason -> (last logged, count at)
        self.port = settings.port
        self._frontier: BrokerFetchFrontier | None = None

    async def start(self) -> KafkaEndpoint:
        self._listeners = listen(self.settings.host, self.settings.port)
        self.port = self._listeners[0].getsockname()[1]
        self._acceptors = [asyncio.create_task(self._accept_loop(ls)) for ls in self._listeners]
        self.security.start()
        if self.ctx.forwarder is not None:  # merged mode: the broker decides the frontier
            self._frontier = BrokerFetchFrontier(self.ctx.forwarder, asyncio.get_running_loop())
            self.ctx.fetcher.add_frontier_source(self._frontier)
        if self.settings.port == 0 or self.ctx.advertised_port == 0:
            self.ctx.advertised_port = self.port
        log.info(
            "kafka_endpoint_started",
            host=self.settings.host,
            port=self.port,
            advertised=f"{self.ctx.advertised_host}:{self.ctx.advertised_port}",
        )
        return self

    @property
    def connections(self) -> int:
        return len(self._conns)

    def buffered_bytes(self) -> int:
        """Bytes read from clients and not yet taken as requests, over all connections (what the
        listener holds in memory besides the requests it handles: each stream reader stops
        reading at twice its 64 KiB limit unless a request the budget admitted needs more)."""
        return sum(len(getattr(c.reader, "_buffer", b"")) for c in self._conns.values())

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let every connection finish the requests it has read (at most
        ``grace_s``; a tail long-poll is at most 5 s), then close what is left and the executors.
        The read core is the caller's: close it only after this returns."""
        for acceptor in self._acceptors:
            acceptor.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        for ls in self._listeners:
            ls.close()
        for sock, timer in self._held.items():
            timer.cancel()
            sock.close()
        self._held.clear()
        for pending in list(self._pending):
            pending.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        if self._frontier is not None:
            self.ctx.fetcher.remove_frontier_source(self._frontier)
            self._frontier = None
        for conn in self._conns.values():
            conn.drain()
        if self._conns:
            _, late = await asyncio.wait(set(self._conns), timeout=grace_s)
            if late:
                log.warning("kafka_endpoint_drain_timeout", connections=len(late), grace_s=grace_s)
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self.security.stop()
        self.ctx.close()
        log.info("kafka_endpoint_stopped", port=self.port)

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Accept connections and start each one's task; nothing of a socket is read here."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, addr = await loop.sock_accept(listener)
            except OSError as e:  # out of file descriptors, mostly: asyncio's own server waits too
                log.warning("kafka_accept_failed", error=str(e))
                await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            self._admit(sock, addr)
            for _ in range(_ACCEPT_BATCH):  # what else is queued, without a trip through the loop
                try:
                    sock, addr = listener.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as e:
                    log.warning("kafka_accept_failed", error=str(e))
                    break
                sock.setblocking(False)
                self._admit(sock, addr)

    def _admit(self, sock: socket.socket, addr: Any) -> None:
        """Admit an accepted socket (creation rate, then slots) before a byte of it is read or any
        TLS work is done, and start its task; a refused one gets no task (a storm of them costs
        an accept, a timer and a close each)."""
        address = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        peer = str(addr)
        slot = _Slot(peer)
        wait_s = self.creation.take(address)
        refused = "connection_creation_rate" if wait_s else self.slots.admit(slot, address)
        if refused is not None:
            self._refused(refused, peer)
            self._hold(sock, min(wait_s, _REFUSED_HOLD_S) if wait_s else _REFUSED_HOLD_S)
            return
        self.stats["accepted"] += 1
        task = slot.task = asyncio.create_task(self._serve(sock, address, peer, slot))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        task.add_done_callback(functools.partial(self._never_started, slot, sock))

    def _never_started(self, slot: _Slot, sock: socket.socket, _task: object) -> None:
        """A task cancelled before its first step (its slot given to a newer connection in the
        same accept batch, or stop()) never ran its ``finally``: its socket and slot go here."""
        if not slot.started:
            sock.close()
            self.slots.release(slot)

    def _hold(self, sock: socket.socket, hold_s: float) -> None:
        """Close a refused socket after ``hold_s`` (unread; at most ``max_connections`` held at
        once, beyond that at once), as Kafka delays closing a throttled connection: its client
        learns of the refusal only then, so a storm of reconnects does not come straight back
        (one over its creation rate is held until the rate would allow it, at most a second)."""
        if len(self._held) >= self.settings.max_connections:
            sock.close()
            return
        self._held[sock] = asyncio.get_running_loop().call_later(hold_s, self._close_held, sock)

    def _close_held(self, sock: socket.socket) -> None:
        self._held.pop(sock, None)
        sock.close()

    async def _serve(self, sock: socket.socket, address: str, peer: str, slot: _Slot) -> None:
        """An admitted socket: its TLS handshake, then the connection."""
        task = slot.task
        assert task is not None
        slot.started = True
        try:
            stream = await self._open(sock, peer)
            if stream is None:
                return
            conn = slot.conn = Connection(self.ctx, *stream, peer, self.slots, self.budget, slot=slot)
            conn._task = task  # close_now() cancels this task
            conn.guard = self.security.guard(peer, address)
            self._pending.discard(task)
            self._conns[task] = conn
            await conn.run()
        except asyncio.CancelledError:
            pass  # stop() or close_now()
        finally:
            self._conns.pop(task, None)
            self.slots.release(slot)

    async def _open(
        self, sock: socket.socket, peer: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The admitted socket as a stream, through the TLS handshake when there is TLS (within the
        login deadline; the context's SNI callback picks the current certificate, so a reload
        applies to the next handshake); None when the handshake failed (the socket is closed)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 16, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        handshake_s = None
        if self._ssl is not None:
            self.stats["tls_handshakes"] += 1
            handshake_s = self.settings.login_timeout_ms / 1000
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, sock, ssl=self._ssl, ssl_handshake_timeout=handshake_s
            )
        except (OSError, ssl.SSLError, TimeoutError) as e:  # the loop has closed the socket
            self.stats["tls_failed"] += 1
            log.info("kafka_tls_handshake_failed", peer=peer, error=repr(e))
            return None
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    def _refused(self, reason: str, peer: str) -> None:
        """Count a refusal; log it, but under a storm once per :data:`_REFUSAL_LOG_S` per reason
        with the count since (a log line per refused connection would cost more than refusing)."""
        key = f"refused:{reason}"
        self.stats[key] += 1
        now = time.monotonic()
        at, count_at = self._refusals_logged.get(reason, (-_REFUSAL_LOG_S, 0))
        if now - at < _REFUSAL_LOG_S:
            return
        self._refusals_logged[reason] = (now, self.stats[key])
        s = self.settings
        limit = {
            "max_connections_per_ip": s.max_connections_per_ip,
            "max_connections": s.max_connections,
            "unauthenticated_connections_full": s.max_unauthenticated_connections,
            "connection_creation_rate": s.connection_creation_rate_per_ip,
        }.get(reason)
        log.warning("kafka_connection_refused", peer=peer, reason=reason, limit=limit,
                    refused_since_last_logged=self.stats[key] - count_at)


def _mark_retrieved(task: asyncio.Future[Any]) -> None:
    """Mark a read's outcome as seen: when the connection is torn down while a frame read fails
    (a reset peer: :class:`_Close`), nobody awaits it, and asyncio would log "Task exception was
    never retrieved" once per connection - noise, the close is logged where it is raised."""
    if not task.cancelled():
        task.exception()


class _Close(Exception):
    """Close this connection (the reason is logged where raised)."""


class Connection:
    """One client connection: a reader loop feeding ordered handler tasks to a writer loop."""

    def __init__(
        self,
        ctx: EndpointContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
        connections: ConnectionSlots | None = None,
        budget: ByteBudget | None = None,
        slot: Closable | None = None,
    ) -> None:
        self.ctx = ctx
        self.reader = reader
        self.writer = writer
        self.peer = peer
        s = ctx.settings
        self.idle_s = s.idle_timeout_ms / 1000
        if connections is None:  # a connection of its own (tests): nothing shared to count against
            connections = ConnectionSlots(s.max_connections, 0, s.max_connections)
        self.connections = connections
        self.slot: Closable = self if slot is None else slot  # what the slots know it by
        self.budget = ByteBudget(s.queued_max_request_bytes) if budget is None else budget
        self.logged_in = False  # SASL: authenticated; without: its first request was read
        self._task: asyncio.Task[Any] | None = None
        self._login_timer: asyncio.TimerHandle | None = None
        self._aborted = False
        self.slots = asyncio.Semaphore(s.max_in_flight)
        self.pending: asyncio.Queue[asyncio.Task[ResponseFrame] | None] = asyncio.Queue()
        self._draining = asyncio.Event()
        self.guard: ConnectionGuard | None = None
        self.tls = writer.get_extra_info("sslcontext") is not None

    def drain(self) -> None:
        """Read no further request; answer those already read, then close (listener shutdown)."""
        self._draining.set()

    def close_now(self, reason: str) -> None:
        """Close at once, dropping requests in progress (login deadline, a slot given to a newer
        connection): nothing this connection holds outlives it."""
        if self._aborted:
            return
        self._aborted = True
        log.info("kafka_connection_closed", peer=self.peer, reason=reason)
        self.writer.transport.abort()
        if self._task is not None:
            self._task.cancel()

    def _release(self, held: tuple[int, int], _task: object) -> None:
        """A handler is done (or was cancelled before it started): its request's bytes go back."""
        self.budget.give_back(held)

    def _login_expired(self) -> None:
        if not self.logged_in:
            self.close_now("login_timeout")

    def _note_login(self) -> None:
        """Count the connection as logged in once it is (its slot leaves the not-logged-in cap)."""
        if self.logged_in or (self.guard is not None and not self.guard.authenticated):
            return
        self.logged_in = True
        if self._login_timer is not None:
            self._login_timer.cancel()
        self.connections.logged_in(self.slot)

    async def run(self) -> None:
        peer = self.writer.get_extra_info("peername")  # (host, port[, ...]) as Kafka shows "/host"
        CLIENT_HOST.set(f"/{peer[0]}" if isinstance(peer, tuple) and peer else "/")  # tasks inherit it
        self._task = asyncio.current_task()
        login_s = self.ctx.settings.login_timeout_ms / 1000
        self._login_timer = asyncio.get_running_loop().call_later(login_s, self._login_expired)
        writer_task = asyncio.create_task(self._write_loop())
        try:
            while not writer_task.done() and not self._draining.is_set():
                await self.slots.acquire()
                got = await self._unless_draining(self._read_frame())
                if got is None:
                    break
                frame, held = got
                if self.guard is None:
                    self._note_login()  # no SASL: a first whole request is the login
                key = int.from_bytes(frame[:2], "big", signed=True)
                # before login, and for SASL requests always, one request at a time: the next is
                # read only when this one's answer is ready (the broker mutes the channel likewise)
                serial = self.guard is not None and (not self.logged_in or key in _SASL_KEYS)
                task = asyncio.create_task(self._answer(frame))
                task.add_done_callback(functools.partial(self._release, held))
                await self.pending.put(task)
                if serial:
                    await asyncio.wait((task,))
                    if self.guard is not None and self.guard.failed:
                        break  # a refused login: its answer goes out, then the connection closes
                    self._note_login()
        except (_Close, ConnectionError, asyncio.IncompleteReadError):
            pass
        except TimeoutError:
            log.info(
                "kafka_connection_idle_closed", peer=self.peer, idle_ms=self.ctx.settings.idle_timeout_ms
            )
        finally:
            if self._login_timer is not None:
                self._login_timer.cancel()
            if self._aborted:
                writer_task.cancel()
            self.pending.put_nowait(None)
            try:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await writer_task  # the answers of requests already read (drain)
            finally:
                self._drain_pending()  # requests read after the writer stopped (it closed): dropped
                self.writer.close()  # also when stop() cancels a drain that took too long
                if self.guard is not None:
                    self.guard.close()  # the broker connections go with the client's, whatever happened
                self.ctx.fetch_sessions.close_connection(self)  # its fetch sessions are no one else's
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self.writer.wait_closed()

    async def _unless_draining(
        self, read: Coroutine[Any, Any, tuple[bytes, tuple[int, int]] | None]
    ) -> tuple[bytes, tuple[int, int]] | None:
        """The next frame, or None as soon as :meth:`drain` is called (the partial read is dropped:
        that request was never started)."""
        reading = asyncio.ensure_future(read)
        reading.add_done_callback(_mark_retrieved)  # a caller cancelled meanwhile never reads it
        draining = asyncio.ensure_future(self._draining.wait())
        try:
            await asyncio.wait((reading, draining), return_when=asyncio.FIRST_COMPLETED)
        finally:
            draining.cancel()
            if not reading.done():
                reading.cancel()  # also when this connection is closed meanwhile (close_now)
        if reading.done() and not reading.cancelled():
            return reading.result()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reading
        return None

    async def _read_frame(self) -> tuple[bytes, tuple[int, int]] | None:
        """The next request and the bytes of the listener's budget it holds (until its handler is
        done), or None at the end of the stream."""
        try:
            head = await asyncio.wait_for(self.reader.readexactly(4), self.idle_s)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.warning("kafka_request_truncated", peer=self.peer, got=len(e.partial), expected=4)
            return None
        (size,) = _SIZE.unpack(head)
        s = self.ctx.settings
        # before login (SASL) Kafka's sasl.server.max.receive.size: nobody buffers 100 MiB unasked
        limit = s.max_request_bytes if self.logged_in or self.guard is None else s.sasl_max_receive_size
        if size < _MIN_REQUEST or size > limit:
            log.warning(
                "kafka_request_size_refused",
                peer=self.peer,
                size=size,
                max=limit,
                logged_in=self.logged_in,
            )
            raise _Close
        held = await asyncio.wait_for(self.budget.take(size, self.logged_in), self.idle_s)
        try:
            return await asyncio.wait_for(self.reader.readexactly(size), self.idle_s), held
        except asyncio.IncompleteReadError as e:
            self.budget.give_back(held)
            log.warning("kafka_request_truncated", peer=self.peer, got=len(e.partial), expected=size)
            raise _Close from None
        except BaseException:
            self.budget.give_back(held)
            raise

    async def _write_loop(self) -> None:
        while True:
            task = await self.pending.get()
            if task is None:
                return
            try:
                data = await task
            except _Close:
                self._drain_pending()
                self.writer.close()
                self.slots.release()
                return
            try:
                await self._send(data)
            except (TimeoutError, ConnectionError) as e:
                if isinstance(e, TimeoutError):
                    log.warning("kafka_response_stalled", peer=self.peer, bytes=len(data))
                self._drain_pending()
                self.writer.transport.abort()
                self.slots.release()
                return
            self.slots.release()

    async def _send(self, data: ResponseFrame) -> None:
        """Write one response frame, part by part (large values are the handler's own buffers,
        see :class:`ResponseFrame`). Over TLS in slices of :data:`_TLS_SLICE`: the SSL transport
        encrypts a whole write into memory before the first byte leaves; sliced, encryption of
        the next slice overlaps with the client reading the previous one (the per-slice drain is
        also where other connections get the event loop)."""
        for part in data.parts:
            if not self.tls or len(part) <= _TLS_SLICE:
                self.writer.write(part)
                continue
            view = memoryview(part)
            for at in range(0, len(view), _TLS_SLICE):
                self.writer.write(view[at : at + _TLS_SLICE])
                await asyncio.wait_for(self.writer.drain(), self.idle_s)
        await asyncio.wait_for(self.writer.drain(), self.idle_s)

    def _drain_pending(self) -> None:
        while not self.pending.empty():
            t = self.pending.get_nowait()
            if t is None:
                continue
            if t.done():  # answered or failed (a _Close) already: nothing to cancel, nothing to report
                if not t.cancelled():
                    t.exception()
            else:
                t.cancel()
        self.reader.feed_eof()

    async def _answer(self, frame: bytes) -> ResponseFrame:
        """The response frame for one request; raises :class:`_Close` when Kafka would close."""
        try:
            key, version, corr = peek_header(frame)
        except FrameError as e:
            log.warning("kafka_request_invalid", peer=self.peer, error=str(e))
            raise _Close from None
        if self.guard is not None and not self.guard.admits(key):
            log.warning("kafka_request_before_authentication", peer=self.peer, api_key=key)
            raise _Close
        lo_hi = SUPPORTED.get(key) if self.guard is None else self.guard.versions(key)
        if key == API_VERSIONS_KEY and lo_hi is not None and not lo_hi[0] <= version <= lo_hi[1]:
            return encode_response(corr, api_versions_response(0, ErrorCode.unsupported_version))
        cls = request_class(key, version)
        if cls is None:
            log.warning("kafka_request_unknown", peer=self.peer, api_key=key, api_version=version)
            raise _Close
        if lo_hi is None or not lo_hi[0] <= version <= lo_hi[1]:
            log.info("kafka_request_unsupported", peer=self.peer, api_key=key, api_version=version)
            return encode_response(
                corr, error_response(response_class(key, version), ErrorCode.unsupported_version)
            )
        try:
            header, body = decode_request(frame, cls)
        except FrameError as e:
            log.warning(
                "kafka_request_invalid", peer=self.peer, api_key=key, api_version=version, error=str(e)
            )
            raise _Close from None
        try:
            CONNECTION.set(self)  # fetch sessions belong to the connection (fetcher.kafka.requester)
            if self.guard is not None:
                resp = await self.guard.dispatch(self.ctx, key, version, header, body, HANDLERS.get(key))
            else:
                resp = await HANDLERS[key](self.ctx, body, version, header)
            return encode_response(corr, resp)
        except CloseConnection:
            raise _Close from None
        except InvalidRequest as e:  # a field out of its range: the client's fault, no traceback
            log.warning("kafka_request_field_invalid", peer=self.peer, api_key=key, api_version=version,
                        error=str(e))
            return encode_response(corr, e.answer(response_class(key, version)))
        except Exception as e:
            log.exception(
                "kafka_handler_failed", peer=self.peer, api_key=key, api_version=version, error=str(e)
            )
            return encode_response(
                corr, error_response(response_class(key, version), ErrorCode.unknown_server_error)
            )
