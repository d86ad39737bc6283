"""Who gets a connection slot, and how many request bytes the listener holds at once.

Why: before a client has logged in it is anybody, and the listener's resources must not be
anybody's to take. :class:`ConnectionSlots` counts connections per client address (Kafka's
``max.connections.per.ip``) and keeps connections that have not logged in to a cap of their own
inside the listener's total, so the rest of the slots stay for logged-in clients. When that cap
is full the slots are shared out by address: a new connection takes the place of the oldest one
not logged in of the address holding the most of them (which is closed), provided its own
address would then still hold fewer; otherwise the oldest connection not logged in gives way if
it has waited ``min_wait_s`` (half the login deadline on the listener: time enough to log in);
otherwise the new one is refused. So a flood of idle or half-open sockets cannot keep a client
from logging in (a host opening a few connections at once among flood addresses holding as many
included), and the flood cannot churn faster than its slots' minimum wait: its reconnects are
refused on accept, before any TLS work (a reconnect storm above the cap made every reconnect pay
a full TLS handshake and push out another of the flood's, which the flood opened again).

:class:`CreationRate` limits how fast one address may open connections (Kafka's KIP-612
connection creation rate quota per IP): a token bucket per address, so an address over its rate
is refused without taking anything from another address's.

:class:`ByteBudget` bounds the request bytes read and held over all connections until their
handlers finish (Kafka's ``queued.max.request.bytes``). A request that does not fit is not read:
its connection waits (the bytes stay in the socket, TCP pushes back on the client) until others
finish, as a broker's memory pool mutes channels; the wait counts against the connection's own
timeouts (idle, login deadline), which close it. Waiters are served in arrival order, so a large
request is not starved by small ones; one larger than the whole budget waits for it to be empty.
Requests of connections not logged in take their bytes from a share of the budget first
(``prelogin_share``, half on the listener): however many stalled half-sent frames anybody parks,
the other half stays for logged-in clients, who are served meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Protocol


class Closable(Protocol):
    def close_now(self, reason: str) -> None:
        """Close the connection at once (no further answers)."""
        ...


class ConnectionSlots:
    """Connection counts of one listener: in all, per address, and not logged in (event loop only)."""

    def __init__(self, max_connections: int, max_per_address: int, max_unauthenticated: int,
                 min_wait_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_connections = max_connections
        self.min_wait_s = min_wait_s
        self._clock = clock
        self.max_per_address = max_per_address
        self.max_unauthenticated = max(1, min(max_unauthenticated, max_connections))
        self._address: dict[Closable, str] = {}
        self._per_address: dict[str, int] = {}
        self._waiting: OrderedDict[Closable, float] = OrderedDict()  # not logged in, oldest first: since
        self._waiting_at: dict[str, int] = {}  # connections not logged in, per address

    def __len__(self) -> int:
        return len(self._address)

    @property
    def unauthenticated(self) -> int:
        return len(self._waiting)

    def admit(self, conn: Closable, address: str) -> str | None:
        """Take a slot for a new connection (not logged in yet); the reason it may not have one, or
        None. May close a connection not logged in to make room (the module doc says which)."""
        if self.max_per_address and self._per_address.get(address, 0) >= self.max_per_address:
            return "max_connections_per_ip"
        if len(self._waiting) >= self.max_unauthenticated:
            victim = self._victim(address)
            if victim is None:
                return "unauthenticated_connections_full"
            self.release(victim)
            victim.close_now("unauthenticated_connections_full")
        if len(self._address) >= self.max_connections:
            return "max_connections"
        self._address[conn] = address
        self._per_address[address] = self._per_address.get(address, 0) + 1
        self._waiting[conn] = self._clock()
        self._waiting_at[address] = self._waiting_at.get(address, 0) + 1
        return None

    def _victim(self, address: str) -> Closable | None:
        """The connection not logged in that gives way to a new one from ``address``, or None when
        the new one is refused: the oldest of the address holding the most, if ``address`` would
        still hold fewer after taking it; else the oldest overall if it has waited long enough."""
        heaviest = max(self._waiting_at.values())
        if self._waiting_at.get(address, 0) + 1 < heaviest:
            return next(c for c in self._waiting if self._waiting_at[self._address[c]] == heaviest)
        oldest, since = next(iter(self._waiting.items()))
        return oldest if self._clock() - since >= self.min_wait_s else None

    def logged_in(self, conn: Closable) -> None:
        """The connection has logged in: it no longer counts against the cap of those that have not."""
        self._leave_waiting(conn)

    def _leave_waiting(self, conn: Closable) -> None:
        if conn not in self._waiting:
            return
        del self._waiting[conn]
        address = self._address[conn]
        n = self._waiting_at[address] - 1
        if n:
            self._waiting_at[address] = n
        else:
            del self._waiting_at[address]

    def release(self, conn: Closable) -> None:
        """The connection is closed (idempotent)."""
        self._leave_waiting(conn)
        address = self._address.pop(conn, None)
        if address is None:
            return
        n = self._per_address[address] - 1
        if n:
            self._per_address[address] = n
        else:
            del self._per_address[address]


class CreationRate:
    """New connections per second per address: a token bucket each, ``rate`` a second refilled up
    to ``burst`` (Kafka measures its quota over about ten one-second windows, so a burst of ten
    seconds' worth passes and a sustained rate above it does not). ``rate`` 0: no limit.

    Memory: an address whose bucket is full again is the same as one never seen, so such entries
    are dropped whenever the table has doubled since the last sweep; it holds at most the
    addresses that opened a connection within the last ``burst / rate`` seconds."""

    def __init__(self, rate: float, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = max(1.0, rate * 10 if burst is None else burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, when counted)
        self._sweep_at = 1024

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, address: str) -> float:
        """Count a new connection from ``address``: 0.0 when it is within the rate, else the
        seconds until it would be (the connection is refused; nothing is taken)."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        tokens, at = self._buckets.get(address, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1.0:
            self._buckets[address] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self._buckets[address] = (tokens - 1.0, now)
        if len(self._buckets) >= self._sweep_at:
            self._sweep(now)
        return 0.0

    def _sweep(self, now: float) -> None:
        full = [a for a, (t, at) in self._buckets.items() if t + (now - at) * self.rate >= self.burst]
        for a in full:
            del self._buckets[a]
        self._sweep_at = max(1024, 2 * len(self._buckets))


class ByteBudget:
    """Bytes of requests held at once, over all connections (event loop only)."""

    def __init__(self, limit: int, prelogin_share: float = 0.0) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        #: what requests of connections not logged in may hold at most (None: no share of their own)
        self.prelogin = ByteBudget(max(1, int(limit * prelogin_share))) if prelogin_share else None

    @property
    def waiting(self) -> int:
        """Requests waiting for bytes, of the budget or of its share (unread in their sockets)."""
        return len(self._waiters) + (self.prelogin.waiting if self.prelogin is not None else 0)

    async def take(self, n: int, logged_in: bool) -> tuple[int, int]:
        """:meth:`acquire` for one request; before login from the not-logged-in share first.
        Returns what was taken (of the budget, of the share), for :meth:`give_back`."""
        share = self.prelogin if not logged_in else None
        pre = await share.acquire(n) if share is not None else 0
        try:
            return await self.acquire(n), pre
        except BaseException:
            if share is not None:
                share.release(pre)
            raise

    def give_back(self, held: tuple[int, int]) -> None:
        self.release(held[0])
        if held[1] and self.prelogin is not None:
            self.prelogin.release(held[1])

    async def acquire(self, n: int) -> int:
        """Wait until ``n`` bytes fit (arrival order); returns what was taken, for :meth:`release`."""
        n = min(n, self.limit)
        if not self._waiters and self.used + n <= self.limit:
            self.used += n
            return n
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiters.append(entry)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():  # granted just as it was cancelled: give it back
                self.release(n)
            else:
                self._waiters.remove(entry)
                self._grant()
            raise
        return n

    def release(self, n: int) -> None:
        self.used -= n
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.limit:
            n, fut = self._waiters.popleft()
            if not fut.done():
                self.used += n
                fut.set_result(None)
