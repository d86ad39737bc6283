"""Who gets a connection slot, and how many request bytes the listener holds at once.

Why: before a client has logged in it is anybody, and the listener's resources must not be
anybody's to take. :class:`ConnectionSlots` counts connections per client address (Kafka's
``max.connections.per.ip``) and keeps connections that have not logged in to a cap of their own
inside the listener's total, so the rest of the slots stay for logged-in clients; when that cap
is full a new connection takes the place of the oldest one not logged in (which is closed), so a
flood of idle or half-open sockets cannot keep a real client from logging in: it would have to
open ``max_unauthenticated`` new connections during that client's login to push it out.

:class:`ByteBudget` bounds the request bytes read and held over all connections until their
handlers finish (Kafka's ``queued.max.request.bytes``). A request that does not fit is not read:
its connection waits (the bytes stay in the socket, TCP pushes back on the client) until others
finish, as a broker's memory pool mutes channels; the wait counts against the connection's own
timeouts (idle, login deadline), which close it. Waiters are served in arrival order, so a large
request is not starved by small ones; one larger than the whole budget waits for it to be empty.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Protocol


class Closable(Protocol):
    def close_now(self, reason: str) -> None:
        """Close the connection at once (no further answers)."""
        ...


class ConnectionSlots:
    """Connection counts of one listener: in all, per address, and not logged in (event loop only)."""

    def __init__(self, max_connections: int, max_per_address: int, max_unauthenticated: int) -> None:
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.max_unauthenticated = max(1, min(max_unauthenticated, max_connections))
        self._address: dict[Closable, str] = {}
        self._per_address: dict[str, int] = {}
        self._waiting: OrderedDict[Closable, None] = OrderedDict()  # not logged in, oldest first

    def __len__(self) -> int:
        return len(self._address)

    @property
    def unauthenticated(self) -> int:
        return len(self._waiting)

    def admit(self, conn: Closable, address: str) -> str | None:
        """Take a slot for a new connection (not logged in yet); the reason it may not have one, or
        None. May close the oldest connection not logged in to make room."""
        if self.max_per_address and self._per_address.get(address, 0) >= self.max_per_address:
            return "max_connections_per_ip"
        if len(self._waiting) >= self.max_unauthenticated:
            oldest = next(iter(self._waiting))
            self.release(oldest)
            oldest.close_now("unauthenticated_connections_full")
        if len(self._address) >= self.max_connections:
            return "max_connections"
        self._address[conn] = address
        self._per_address[address] = self._per_address.get(address, 0) + 1
        self._waiting[conn] = None
        return None

    def logged_in(self, conn: Closable) -> None:
        """The connection has logged in: it no longer counts against the cap of those that have not."""
        self._waiting.pop(conn, None)

    def release(self, conn: Closable) -> None:
        """The connection is closed (idempotent)."""
        self._waiting.pop(conn, None)
        address = self._address.pop(conn, None)
        if address is None:
            return
        n = self._per_address[address] - 1
        if n:
            self._per_address[address] = n
        else:
            del self._per_address[address]


class ByteBudget:
    """Bytes of requests held at once, over all connections (event loop only)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

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
