"""Failed-login rate limits, per client address and per user name, shared by both read faces.

Why: every login the sidecar checks costs a broker round trip (relay) or a PBKDF2 (standalone
users), and without a limit the sidecar is a brute-force proxy for the cluster's passwords. After
``max_per_address`` failures from one address (or ``max_per_user`` failures for one user name,
from anywhere) within ``window_s``, further logins of that address (user) are refused at once,
before the broker is contacted or a password hashed, until the oldest of those failures leaves
the window (a sliding window: the refusal lasts at most ``window_s`` after the last counted
failure). Refused attempts are not counted again, so a client that keeps trying is let in again
as soon as the window allows.

The per-user limit lets anyone lock a user out for ``window_s`` by failing logins as it (the
trade-off of every such limit; the per-user maximum is higher than the per-address one by
default, and the lock lasts only the window). A successful login clears that user's count, never
the address's: an attacker with one valid account must not reset its address's count between
guesses.

Memory is bounded: at most ``max_tracked`` addresses and as many user names are remembered
(least recently failed ones forgotten first). The class is thread-safe (one lock), so the HTTP
face's worker threads and the Kafka face's event loop can share one instance.

Usage (either face)::

    limits = LoginLimiter.from_security(read_config.kafka_security)
    if not limits.allowed(address, user):        # before any credential check
        refuse quickly (Kafka: SASL_AUTHENTICATION_FAILED; HTTP: 401 / 429)
    ok = check(credentials)
    if ok: limits.succeeded(user) else: limits.failed(address, user)
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlm.config import ListenerSecurity

#: how many addresses and user names are remembered at most (each holds at most max_* timestamps)
MAX_TRACKED = 100_000


class LoginLimiter:
    """Sliding-window counts of failed logins per address and per user name.

    ``max_per_address`` / ``max_per_user``: failures within ``window_s`` after which logins are
    refused (0: that limit is off). ``clock``: seconds, monotonic (tests may pass their own).
    """

    def __init__(
        self,
        max_per_address: int = 10,
        max_per_user: int = 20,
        window_s: float = 60.0,
        max_tracked: int = MAX_TRACKED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_per_address < 0 or max_per_user < 0 or window_s < 0 or max_tracked < 1:
            raise ValueError("LoginLimiter: limits and window must be >= 0, max_tracked >= 1")
        self.max_per_address = max_per_address
        self.max_per_user = max_per_user
        self.window_s = window_s
        self.max_tracked = max_tracked
        self._clock = clock
        self._lock = threading.Lock()
        self._by_address: OrderedDict[str, deque[float]] = OrderedDict()
        self._by_user: OrderedDict[str, deque[float]] = OrderedDict()

    @classmethod
    def from_security(cls, sec: ListenerSecurity) -> LoginLimiter:
        """The limiter ``read.kafka_security`` asks for (``login_failures_per_address``,
        ``login_failures_per_user``, ``login_failure_window_ms``)."""
        return cls(
            sec.login_failures_per_address,
            sec.login_failures_per_user,
            sec.login_failure_window_ms / 1000,
        )

    @property
    def enabled(self) -> bool:
        return self.window_s > 0 and (self.max_per_address > 0 or self.max_per_user > 0)

    def allowed(self, address: str, user: str | None = None) -> bool:
        """Whether a login from ``address`` (as ``user``, when already known) may be checked now.
        False: refuse it without checking the credentials. Call it again with the user name once
        the login message has been parsed (the address alone is known first)."""
        if not self.enabled:
            return True
        with self._lock:
            now = self._clock()
            if self._full(self._by_address, address, self.max_per_address, now):
                return False
            return user is None or not self._full(self._by_user, user, self.max_per_user, now)

    def failed(self, address: str, user: str | None = None) -> None:
        """Count one failed login (wrong password, unknown user, malformed login message)."""
        if not self.enabled:
            return
        with self._lock:
            now = self._clock()
            self._count(self._by_address, address, self.max_per_address, now)
            if user is not None:
                self._count(self._by_user, user, self.max_per_user, now)

    def succeeded(self, user: str) -> None:
        """A login as ``user`` succeeded: forget that user's failures (not its address's)."""
        with self._lock:
            self._by_user.pop(user, None)

    def _full(self, table: OrderedDict[str, deque[float]], key: str, limit: int, now: float) -> bool:
        if limit <= 0:
            return False
        times = table.get(key)
        if times is None:
            return False
        while times and now - times[0] >= self.window_s:
            times.popleft()
        if not times:
            del table[key]
            return False
        return len(times) >= limit

    def _count(self, table: OrderedDict[str, deque[float]], key: str, limit: int, now: float) -> None:
        if limit <= 0:
            return
        times = table.get(key)
        if times is None:
            times = table[key] = deque(maxlen=limit)
            while len(table) > self.max_tracked:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        times.append(now)
