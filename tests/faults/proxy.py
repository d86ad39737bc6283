"""A small TCP fault proxy for the storage-fault tests (what Toxiproxy does, in the test tree).

Toxiproxy is a Go program; this is an asyncio proxy in a thread of the test process, so nothing is
installed globally and a fixture starts and stops it. It listens on ``127.0.0.1:<free port>`` and
forwards every connection to one upstream (the session's SeaweedFS S3 gateway). The fault in force
is switched at runtime, from any thread, with :meth:`FaultProxy.set` / :meth:`FaultProxy.clear`
(or ``with proxy.fault(...)``):

* pass-through (no fault);
* ``latency_s``: every chunk of bytes, both ways, is delivered that much later (pipelined, like
  Toxiproxy's latency toxic: a round trip gets slower, throughput does not collapse);
* ``bandwidth``: at most this many bytes per second, per connection and direction (paced where
  the proxy reads, so the sender's writes block as on a slow link);
* ``reset_new``: a new connection is accepted and at once reset (RST: ``SO_LINGER`` 0, close);
  ``reset_after_bytes``: a connection is reset once it has carried that many bytes (both ways,
  counted from when the fault was set): an upload or a download cut in the middle;
  :meth:`FaultProxy.reset_in_flight` resets every open connection now;
* ``blackhole``: connections are accepted and their bytes never forwarded nor answered (what a
  frozen server looks like); when the fault clears, the connections it held are closed;
* ``slowdown_fraction`` / ``slowdown_count``: that fraction of S3 requests, or the next N of them,
  are answered by the proxy itself with ``503`` and S3's XML error ``<Code>SlowDown</Code>``
  (what S3 says when throttling) and the connection closed, without reaching the server.

The client-to-server stream is parsed as HTTP/1.1 requests (head, then ``Content-Length`` bytes of
body) so that the 503 decision is taken per request, on fresh and kept-alive connections alike; a
chunked request body makes the rest of that connection plain TCP forwarding.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

CHUNK = 64 * 1024
_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class Faults:
    """The fault in force; the default is pass-through."""

    latency_s: float = 0.0
    bandwidth: int | None = None
    reset_new: bool = False
    reset_after_bytes: int | None = None
    blackhole: bool = False
    slowdown_fraction: float = 0.0
    slowdown_count: int = 0


@dataclass
class ProxyStats:
    """Counts since start (read them for assertions that the fault was really injected)."""

    connections: int = 0
    requests: int = 0
    resets: int = 0
    slowdowns: int = 0
    blackholed: int = 0


def slowdown_response(method: str) -> bytes:
    """S3's throttling answer: 503 with an XML error body whose Code is SlowDown."""
    rid = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
        f"<RequestId>{rid}</RequestId></Error>"
    ).encode()
    head = (
        "HTTP/1.1 503 Slow Down\r\n"
        "Content-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"x-amz-request-id: {rid}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return head if method == "HEAD" else head + body


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (RST) instead of an orderly FIN: linger on, timeout 0, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Conn:
    """One client connection and (unless reset or blackholed at accept) its upstream connection.

    Each direction is a reader stage and a writer stage joined by a bounded queue of
    ``(arrival time, bytes)``. The reader paces itself by the bandwidth cap; the writer applies
    latency, resets and the blackhole to every chunk, latency counted from the chunk's arrival
    (pipelined) rather than added once per chunk in sequence.
    """

    def __init__(self, proxy: FaultProxy, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        self.proxy = proxy
        self.client_r, self.client_w = client_r, client_w
        self.up_w: asyncio.StreamWriter | None = None
        self.carried = 0  # bytes carried (both ways) since the fault in force was set
        self.generation = proxy.generation
        self.closed = False
        self.stalled = False
        self.answering = False  # a 503 is being answered here: the upstream's end is expected
        self.tasks: list[asyncio.Task[None]] = []

    # ---- ends ---------------------------------------------------------------------------------
    def _cancel_others(self) -> None:
        me = asyncio.current_task()
        for t in self.tasks:
            if t is not me:
                t.cancel()

    def reset(self) -> None:
        """End both sides at once; the client sees a reset (RST)."""
        if self.closed:
            return
        self.closed = True
        self.proxy.stats.resets += 1
        _rst(self.client_w)
        if self.up_w is not None:
            self.up_w.transport.abort()
        self._cancel_others()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.stalled:
            self.client_w.transport.abort()
        else:
            self.client_w.close()
        if self.up_w is not None:
            self.up_w.transport.abort()
        self._cancel_others()

    # ---- the connection's life ----------------------------------------------------------------
    async def run(self) -> None:
        f = self.proxy.faults
        if f.reset_new:
            self.reset()
            return
        if f.blackhole:
            await self._stall()
            return
        try:
            up_r, self.up_w = await asyncio.open_connection(*self.proxy.upstream)
        except OSError:
            self.reset()
            return
        to_up: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
        to_client: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
        self.tasks = [
            asyncio.ensure_future(self._read_requests(to_up)),
            asyncio.ensure_future(self._read_raw(up_r, to_client)),
            asyncio.ensure_future(self._writer(to_up, self.up_w, upstream=True)),
            asyncio.ensure_future(self._writer(to_client, self.client_w, upstream=False)),
        ]
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.close()

    async def _stall(self) -> None:
        """Blackhole: hold the connection, forward nothing, until the fault clears; then close."""
        if not self.stalled:
            self.stalled = True
            self.proxy.stats.blackholed += 1
        while self.proxy.faults.blackhole and not self.closed and not self.proxy.stopping:
            await self.proxy.wait_change()
        self.close()

    # ---- readers --------------------------------------------------------------------------------
    async def _take(self, r: asyncio.StreamReader, n: int = CHUNK) -> bytes:
        """Read up to ``n`` bytes, paced by the bandwidth cap: the sender feels the cap as TCP
        backpressure (its writes block) rather than as a proxy buffering behind its back."""
        bw = self.proxy.faults.bandwidth
        if not bw:
            return await r.read(n)
        data = await r.read(min(n, max(1024, bw // 20)))
        await asyncio.sleep(len(data) / bw)
        return data

    async def _read_raw(self, r: asyncio.StreamReader, q: asyncio.Queue[Any]) -> None:
        try:
            while True:
                data = await self._take(r)
                if not data:
                    break
                await q.put((time.monotonic(), data))
        except OSError:
            pass
        await q.put(None)

    async def _read_requests(self, q: asyncio.Queue[Any]) -> None:
        """Client to server: HTTP/1.1 requests; each one forwarded or to be answered 503 SlowDown."""
        r = self.client_r
        try:
            while True:
                try:
                    head = await r.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:  # not HTTP as we know it: plain forwarding
                    await self._read_raw(r, q)
                    return
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        await q.put((time.monotonic(), e.partial))
                    break
                method, length, chunked = _parse_head(head)
                self.proxy.stats.requests += 1
                if self.proxy.take_slowdown():
                    await q.put(("slowdown", method))
                    return
                await q.put((time.monotonic(), head))
                if chunked:
                    await self._read_raw(r, q)
                    return
                left = length
                while left > 0:
                    data = await self._take(r, min(CHUNK, left))
                    if not data:
                        break
                    left -= len(data)
                    await q.put((time.monotonic(), data))
        except OSError:
            pass
        await q.put(None)

    # ---- writers --------------------------------------------------------------------------------
    async def _writer(self, q: asyncio.Queue[Any], w: asyncio.StreamWriter, *, upstream: bool) -> None:
        try:
            while not self.closed:
                item = await q.get()
                if item is None:  # that side finished sending
                    if upstream and w.can_write_eof():
                        w.write_eof()
                    elif not self.answering:
                        self.close()
                    return
                if item[0] == "slowdown":
                    await self._answer_slowdown(item[1])
                    return
                arrived, data = item
                if not await self._deliver(w, data, arrived):
                    return
        except OSError:
            self.close()

    async def _gate(self, n: int, arrived: float) -> bool:
        """Apply the fault in force to ``n`` bytes about to be written; False = connection ended."""
        f = self.proxy.faults
        if f.blackhole:
            await self._stall()
            return False
        if f.latency_s > 0:
            delay = arrived + f.latency_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        if self.generation != self.proxy.generation:
            self.generation, self.carried = self.proxy.generation, 0
        self.carried += n
        if f.reset_after_bytes is not None and self.carried >= f.reset_after_bytes:
            self.reset()
        return not self.closed

    async def _deliver(self, w: asyncio.StreamWriter, data: bytes, arrived: float) -> bool:
        if not await self._gate(len(data), arrived):
            return False
        w.write(data)
        await w.drain()
        return True

    async def _answer_slowdown(self, method: str) -> None:
        """503 SlowDown, then an orderly close: FIN, drain what the client still sends, close."""
        self.proxy.stats.slowdowns += 1
        self.answering = True
        if self.up_w is not None:
            self.up_w.transport.abort()
        w = self.client_w
        w.write(slowdown_response(method))
        with contextlib.suppress(OSError, TimeoutError):
            await w.drain()
            if w.can_write_eof():
                w.write_eof()
            async with asyncio.timeout(5):
                while await self.client_r.read(CHUNK):
                    pass
        self.close()


def _parse_head(head: bytes) -> tuple[str, int, bool]:
    """(method, Content-Length, chunked) of a request head; unknown framing counts as no body."""
    lines = head.decode("latin-1").split("\r\n")
    method = lines[0].split(" ", 1)[0].upper()
    length, chunked = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length" and value.strip().isdigit():
            length = int(value.strip())
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    return method, length, chunked


class FaultProxy:
    """The proxy: ``start()``, point a client at :attr:`endpoint_url`, switch faults, ``stop()``."""

    def __init__(self, upstream_host: str, upstream_port: int, *, seed: int = 13) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.faults = Faults()
        self.generation = 0  # bumped by every set(): byte counts restart with each new fault
        self.stats = ProxyStats()
        self.port = 0
        self.stopping = False
        self._rnd = random.Random(seed)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._changed: asyncio.Event | None = None
        self._conns: set[_Conn] = set()

    @classmethod
    def in_front_of(cls, endpoint_url: str) -> FaultProxy:
        """A started proxy for an ``http://host:port`` endpoint."""
        hostport = endpoint_url.split("://", 1)[-1].rstrip("/")
        host, _, port = hostport.rpartition(":")
        return cls(host, int(port)).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- life ---------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def main() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._open())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    async def _open(self) -> None:
        self._changed = asyncio.Event()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, limit=_MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = _Conn(self, r, w)
        self._conns.add(conn)
        self.stats.connections += 1
        try:
            await conn.run()
        except Exception:  # a proxy bug must not look like a storage fault: end the connection
            conn.reset()
        finally:
            self._conns.discard(conn)

    def stop(self) -> None:
        """Close the listener and every connection; the loop thread ends. Idempotent."""
        if self._loop is None or self.stopping:
            return
        self.stopping = True

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for c in list(self._conns):
                c.close()
            self._notify()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- switching faults (any thread) --------------------------------------------------------
    def set(self, **faults: Any) -> None:
        """Replace the fault in force by ``Faults(**faults)`` (no argument: pass-through)."""
        new = Faults(**faults)
        with self._lock:
            self.faults = new
            self.generation += 1
        self._call(self._notify)

    def clear(self) -> None:
        """Back to pass-through (connections held by a blackhole are closed)."""
        self.set()

    @contextlib.contextmanager
    def fault(self, **faults: Any) -> Iterator[FaultProxy]:
        """``with proxy.fault(latency_s=0.2): ...`` — the fault for the block, pass-through after."""
        self.set(**faults)
        try:
            yield self
        finally:
            self.clear()

    def reset_in_flight(self) -> int:
        """Reset (RST) every open connection now; returns how many."""

        async def do() -> int:
            conns = [c for c in self._conns if not c.closed]
            for c in conns:
                c.reset()
            return len(conns)

        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(do(), self._loop).result(10)

    def take_slowdown(self) -> bool:
        """Whether the request just read gets a 503 SlowDown (consumes one of ``slowdown_count``)."""
        with self._lock:
            f = self.faults
            if f.slowdown_count > 0:
                self.faults = dataclasses.replace(f, slowdown_count=f.slowdown_count - 1)
                return True
            return f.slowdown_fraction > 0 and self._rnd.random() < f.slowdown_fraction

    # ---- loop side ----------------------------------------------------------------------------
    def _call(self, fn: Any) -> None:
        if self._loop is not None and not self._loop.is_closed() and self._loop.is_running():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(fn)

    def _notify(self) -> None:
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self) -> None:
        assert self._changed is not None
        await self._changed.wait()
