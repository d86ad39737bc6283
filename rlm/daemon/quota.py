"""Copy rate quota: a token bucket shared by every copy thread.

Kafka records a segment's size against a byte-rate sensor *before* uploading it and makes the
next copy wait while the rate is over the bound; a token bucket with one second of burst gives
the same long-run rate with a simpler, testable state. A segment larger than the bucket is let
through once the bucket is full and drives the balance negative, so later copies wait it off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class CopyQuota:
    """``acquire(n)`` blocks until ``n`` bytes may be copied, or returns False if ``stop`` is set."""

    def __init__(self, bytes_per_second: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = float(bytes_per_second)
        self.capacity = float(bytes_per_second)
        self._tokens = self.capacity
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()

    @property
    def unlimited(self) -> bool:
        return self.rate >= 2**62

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def acquire(self, nbytes: int, stop: threading.Event | None = None) -> bool:
        if self.unlimited:
            return True
        while True:
            with self._lock:
                self._refill()
                if self._tokens >= min(nbytes, self.capacity):
                    self._tokens -= nbytes
                    return True
                wait = (min(nbytes, self.capacity) - self._tokens) / self.rate
            if stop is not None:
                if stop.wait(min(wait, 1.0)):
                    return False
            else:
                time.sleep(min(wait, 1.0))
