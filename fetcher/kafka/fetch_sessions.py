"""Incremental fetch sessions (KIP-227), kept as a broker's ``FetchSessionCache`` keeps them,
but bound to the connection and principal that created them.

A client with many partitions sends its whole partition list once (session epoch 0) and gets a
session id; later requests (epoch 1, 2, ...) carry only partitions whose fetch position or limits
changed, and the ``forgotten`` ones; the answer carries only partitions with records, an error,
or a changed high watermark / LSO / log start. That keeps requests and responses small for
clients that read hundreds of partitions (Java's consumer uses sessions; librdkafka does not and
sends full, session-less requests — both work).

Request semantics (``FetchMetadata`` in Kafka): id 0 + epoch -1 = session-less full fetch; id 0 +
epoch 0 = a new session; id N + epoch -1 = close N (full fetch); id N + epoch 0 = close N and
start a new one; id N + epoch E > 0 = incremental, refused with FETCH_SESSION_ID_NOT_FOUND or
INVALID_FETCH_SESSION_EPOCH when N is unknown or E is not the next epoch.

Ownership: a session id is a capability, so it is worth nothing outside the connection that got
it. Ids come from :mod:`secrets` (not guessable from earlier ids), each session records its
connection and principal, and an id used by any other connection or principal is unknown there
(FETCH_SESSION_ID_NOT_FOUND; a full request naming it closes nothing). Sessions of a connection
go when it closes. (A broker keeps sessions per broker, any connection may use an id; a Java
consumer uses one session per broker connection anyway, so binding costs it nothing.)

Bounded as Kafka's cache (``max.incremental.fetch.session.cache.slots``, 1000, and
``min.incremental.fetch.session.eviction.ms``, 120 s): when every slot is taken, a new session
(1) evicts the least recently used session if that one has been idle longer than the eviction
time; otherwise (2) evicts the session with the fewest partitions among those created longer
ago than the eviction time, provided the new one has more partitions (not as many: Kafka's
``EvictableKey`` gives the new session id 0, which sorts below every live session of the same
size, so a tie never evicts); otherwise
(3) it is not created and the request is answered as a session-less full fetch (session id 0),
which every client handles. Kafka's third class, a follower's "privileged" session that may
evict any client's, has no counterpart: nothing replicates from this endpoint. So a burst of new
sessions can never push out sessions in use, and sessions nobody uses free their slots.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: the key a partition is known by in a request: (topic name or topic id, partition)
PartKey = tuple[Any, int]

_MAX_ID = 0x7FFFFFFF  # ids are positive int32; 0 means "no session"


@dataclass(slots=True)
class SessionPartition:
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    #: what the last response said (None: never sent), to leave out partitions that did not change
    sent: tuple[int, int, int] | None = None


@dataclass(slots=True, eq=False)
class FetchSession:
    session_id: int
    #: the listener connection that created it (compared by identity, never by value)
    connection: object
    #: the SASL principal that created it (None without SASL)
    principal: str | None
    created: float
    used: float
    epoch: int = 1  # the next incremental request's epoch
    parts: OrderedDict[PartKey, SessionPartition] = field(default_factory=OrderedDict)

    def owned_by(self, connection: object, principal: str | None) -> bool:
        return self.connection is connection and self.principal == principal


class FetchSessionCache:
    """Sessions of one endpoint process (event loop only: no locking). See the module doc for
    ownership and the eviction rule."""

    def __init__(
        self, slots: int = 1000, eviction_s: float = 120.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.slots = slots
        self.eviction_s = eviction_s
        self._clock = clock
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._by_connection: dict[object, set[int]] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def new(self, connection: object, principal: str | None, size: int) -> FetchSession | None:
        """A new session for ``size`` partitions, evicting one when full as the module doc says
        (None: no slot may be taken; the caller answers session-less)."""
        if self.slots <= 0:
            return None
        now = self._clock()
        if len(self._sessions) >= self.slots and not self._evict_for(size, now):
            return None
        sid = 0
        while sid == 0 or sid in self._sessions:
            sid = secrets.randbelow(_MAX_ID) + 1
        s = self._sessions[sid] = FetchSession(sid, connection, principal, now, now)
        self._by_connection.setdefault(connection, set()).add(sid)
        return s

    def get(self, session_id: int, connection: object, principal: str | None) -> FetchSession | None:
        """The session, when it exists and belongs to this connection and principal (marked used)."""
        s = self._sessions.get(session_id)
        if s is None or not s.owned_by(connection, principal):
            return None
        self._sessions.move_to_end(session_id)
        s.used = self._clock()
        return s

    def foreign(self, session_id: int, connection: object, principal: str | None) -> bool:
        """Whether the id names a live session of another connection or principal (for the log)."""
        s = self._sessions.get(session_id)
        return s is not None and not s.owned_by(connection, principal)

    def close(self, session_id: int, connection: object, principal: str | None) -> None:
        """Close the session if it is this owner's; another owner's id closes nothing."""
        s = self._sessions.get(session_id)
        if s is not None and s.owned_by(connection, principal):
            self._remove(s)

    def close_connection(self, connection: object) -> int:
        """Remove every session of a connection that closed; how many there were."""
        ids = self._by_connection.pop(connection, set())
        for sid in ids:
            self._sessions.pop(sid, None)
        return len(ids)

    def _remove(self, s: FetchSession) -> None:
        self._sessions.pop(s.session_id, None)
        ids = self._by_connection.get(s.connection)
        if ids is not None:
            ids.discard(s.session_id)
            if not ids:
                del self._by_connection[s.connection]

    def _evict_for(self, size: int, now: float) -> bool:
        oldest = next(iter(self._sessions.values()), None)
        if oldest is None:
            return False
        if now - oldest.used > self.eviction_s:
            return self._evict(oldest, "idle", now)
        settled = [s for s in self._sessions.values() if now - s.created > self.eviction_s]
        if not settled:
            return False
        smallest = min(settled, key=lambda s: (len(s.parts), s.used))
        if size <= len(smallest.parts):
            return False
        return self._evict(smallest, "fewer_partitions", now)

    def _evict(self, s: FetchSession, reason: str, now: float) -> bool:
        self._remove(s)
        self.evictions += 1
        log.info(
            "kafka_fetch_session_evicted",
            session_id=s.session_id,
            reason=reason,
            partitions=len(s.parts),
            idle_s=round(now - s.used, 1),
        )
        return True
