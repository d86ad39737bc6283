"""How many chunks a scan keeps in flight: as many as add bytes per second, within the budget.

Why not a GET's answer time: by Little's law the bytes in flight are the delivered rate times a
GET's time, whatever the depth, so a depth derived from the answer time only confirms itself. On a
store that is its own bound (SeaweedFS on the cores the scan uses, a throttled bucket) four
parallel GETs each take four times as long as one, so a latency rule keeps four in flight: the
store serves no more bytes, and the extra GETs take CPU from the decoder. What decides is whether
one more chunk in flight makes the scan deliver more bytes per second; on a store far away (a real
bucket: tens of milliseconds before the first byte, a per-connection rate) it does, up to the
bandwidth-delay product, on a store that is CPU-bound it does not.

So the depth climbs on the scan's own throughput, measured in epochs of consumed chunks:

* an epoch in which the decoder hardly waited (under ``stall_share`` of its time) says the
  depth is enough: the decoder is the bound, more in flight cannot help, the depth stays;
* an epoch in which the decoder waited asks for more: the depth grows, doubling while every
  growth still paid (``gain``) and by one chunk after the first that did not;
* a growth that did not pay (the bytes per second of the epoch after it are not ``gain`` above
  the epoch before) is undone, and the depth that paid is the ceiling for ``hold_epochs``
  epochs; then one more step is tried (the store's load may have changed).

The depth is never below ``min_depth`` (the chunk being decoded and the next on the wire) nor
above ``max_depth`` (the read-ahead budget over the chunk size). Fed and read on the scan's
thread only; the clock is injectable for the tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Epoch:
    """What one epoch measured (kept for tests and the benchmark's notes)."""

    depth: int
    bytes_per_s: float
    stall_share: float
    next_depth: int


class ThroughputDepth:
    """The read-ahead depth of one scan, in chunks (see the module docstring)."""

    def __init__(self, max_depth: int, *, min_depth: int = 2, start_depth: int | None = None,
                 gain: float = 1.10, stall_share: float = 0.10, hold_epochs: int = 8,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_depth = max(1, max_depth)
        self.min_depth = min(max(1, min_depth), self.max_depth)
        start = self.min_depth if start_depth is None else start_depth
        self.depth = min(self.max_depth, max(self.min_depth, start))
        self.gain = gain
        self.stall_limit = stall_share
        self.hold_epochs = hold_epochs
        self._clock = clock
        self._startup = True  # doubling until a growth does not pay
        self._ceiling = self.max_depth
        self._hold = 0  # epochs left before the ceiling is tried again
        self._grew_from: tuple[int, float] | None = None  # (depth, its rate) before the last growth
        self._t0: float | None = None
        self._bytes = 0
        self._chunks = 0
        self._waited = 0.0
        self.history: list[Epoch] = []

    def waited(self, seconds: float) -> None:
        """The decoder waited ``seconds`` for a chunk that was not received yet."""
        self._waited += max(0.0, seconds)

    def consumed(self, nbytes: int) -> None:
        """The decoder is done with a chunk of ``nbytes``; an epoch ends every ``depth`` chunks."""
        now = self._clock()
        if self._t0 is None:  # the first chunk starts the first epoch (its wait is the store's start-up)
            self._t0, self._waited = now, 0.0
            return
        self._bytes += nbytes
        self._chunks += 1
        if self._chunks >= max(2, self.depth):
            self._end_epoch(now)

    def _end_epoch(self, now: float) -> None:
        span = max(now - (self._t0 or now), 1e-9)
        rate = self._bytes / span
        stalled = min(1.0, self._waited / span)
        depth = self.depth
        if self._hold:
            self._hold -= 1
            if not self._hold:
                self._ceiling = self.max_depth
        grew = self._grew_from
        if grew is not None and rate < grew[1] * self.gain and stalled >= self.stall_limit:
            # the last growth bought no bytes per second: back to the depth that had them
            back = grew[0]
            self._ceiling, self._hold, self._startup = back, self.hold_epochs, False
            self.depth = back
            self._grew_from = None
        elif stalled >= self.stall_limit and depth < min(self._ceiling, self.max_depth):
            grown = depth * 2 if self._startup else depth + 1
            self.depth = min(grown, self._ceiling, self.max_depth)
            self._grew_from = (depth, rate)
        else:
            if self._grew_from is not None:  # the growth paid (or the decoder is the bound now)
                self._grew_from = None
            if stalled < self.stall_limit:
                self._startup = False
        self.history.append(Epoch(depth, rate, stalled, self.depth))
        self._t0, self._bytes, self._chunks, self._waited = now, 0, 0, 0.0
