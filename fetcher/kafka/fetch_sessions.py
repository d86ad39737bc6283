"""Incremental fetch sessions (KIP-227), as a broker's ``FetchSessionCache`` keeps them.

A client with many partitions sends its whole partition list once (session epoch 0) and gets a
session id; later requests (epoch 1, 2, ...) carry only partitions whose fetch position or limits
changed, and the ``forgotten`` ones; the answer carries only partitions with records, an error,
or a changed high watermark / LSO / log start. That keeps requests and responses small for
clients that read hundreds of partitions (Java's consumer uses sessions; librdkafka does not and
sends full, session-less requests — both work).

Request semantics (``FetchMetadata`` in Kafka): id 0 + epoch -1 = session-less full fetch; id 0 +
epoch 0 = a new session; id N + epoch -1 = close N (full fetch); id N + epoch 0 = close N and
start a new one; id N + epoch E > 0 = incremental, refused with FETCH_SESSION_ID_NOT_FOUND or
INVALID_FETCH_SESSION_EPOCH when N is unknown or E is not the next epoch. The cache is bounded
(slots; the least recently used session is evicted when full, and idle ones expire).
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

#: the key a partition is known by in a request: (topic name or topic id, partition)
PartKey = tuple[Any, int]


@dataclass(slots=True)
class SessionPartition:
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    #: what the last response said (None: never sent), to leave out partitions that did not change
    sent: tuple[int, int, int] | None = None


@dataclass(slots=True)
class FetchSession:
    session_id: int
    epoch: int = 1  # the next incremental request's epoch
    parts: OrderedDict[PartKey, SessionPartition] = field(default_factory=OrderedDict)
    used: float = field(default_factory=time.monotonic)


class FetchSessionCache:
    """Sessions of one endpoint process (event loop only: no locking)."""

    def __init__(self, slots: int = 1000, idle_s: float = 120.0) -> None:
        self.slots = slots
        self.idle_s = idle_s
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._rng = random.Random()

    def __len__(self) -> int:
        return len(self._sessions)

    def new(self) -> FetchSession | None:
        """A new session, evicting the least recently used one when full (None: no slots)."""
        self._expire()
        if self.slots <= 0:
            return None
        while len(self._sessions) >= self.slots:
            self._sessions.popitem(last=False)
        sid = 0
        while sid == 0 or sid in self._sessions:
            sid = self._rng.randint(1, 0x7FFFFFFF)
        s = self._sessions[sid] = FetchSession(sid)
        return s

    def get(self, session_id: int) -> FetchSession | None:
        self._expire()
        s = self._sessions.get(session_id)
        if s is not None:
            self._sessions.move_to_end(session_id)
            s.used = time.monotonic()
        return s

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def _expire(self) -> None:
        now = time.monotonic()
        for sid in [sid for sid, s in self._sessions.items() if now - s.used > self.idle_s]:
            del self._sessions[sid]
