"""How many chunks a scan keeps in flight: as many as add bytes per second, within the budget.

Why not a GET's answer time: by Little's law the bytes in flight are the delivered rate times a
GET's time, whatever the depth, so a depth derived from the answer time only confirms itself. On a
store that is its own bound (SeaweedFS on the cores the scan uses, a throttled bucket) four
parallel GETs each take four times as long as one, so a latency rule keeps four in flight: the
store serves no more bytes, and the extra GETs take CPU from the decoder. What decides is whether
more chunks in flight make the scan deliver more bytes per second; on a store far away (a real
bucket: tens of milliseconds before the first byte, a per-connection rate) they do, up to the
bandwidth-delay product; on a store that is its own bound they do not.

So the depth is a hill climb on the scan's own throughput, measured in epochs of consumed chunks.
It starts at the whole budget (a scan starts as fast as a plain download does) and probes:

* down (half the depth) after ``hold_epochs`` epochs in which the decoder waited (over
  ``stall_share`` of the epoch) at the ceiling: fewer GETs may deliver as much from a store that
  is its own bound; the probe is kept if the bytes per second fell by no more than ``down_loss``;
* up (twice the depth) when the decoder waited below the ceiling; kept only if the bytes per
  second rose by ``up_gain`` at least.

An epoch in which the decoder hardly waited changes nothing: the decoder is the bound, and fewer
chunks in flight would only give back memory the budget allows.

The two are not symmetric on purpose: a depth too low costs throughput (on the pinned benchmark,
load 8-9: a fixed depth of 2 chunks read at 0.6 times the rate of 8, for 1.4 times the reader's
CPU), a depth too high only memory the budget allows. So a probe down must not cost anything
measurable, and a probe up need only pay.

A probe is judged on the epoch after the one in which it settles (the chunks of the new depth have
to arrive first, and after a probe down those fetched ahead at the old depth be used up). A probe
that did not pay is undone, and the depth it left is a floor (after a failed probe down) or a
ceiling (up) for ``hold_epochs`` epochs; then the store's answer is asked again (its load may have
changed). The depth is never below ``min_depth`` (the chunk being decoded and the next on the wire)
nor above ``max_depth`` (the read-ahead budget over the chunk size). Fed and read on the scan's
thread only; the clock is injectable for the tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

#: chunks an epoch lasts at least (fewer measure the store's jitter rather than its rate)
MIN_EPOCH = 4


@dataclass(frozen=True, slots=True)
class Epoch:
    """What one epoch measured and what it decided (tests, debugging)."""

    depth: int
    bytes_per_s: float
    stall_share: float
    next_depth: int
    judged: bool  # False: the epoch in which a new depth settled


@dataclass(slots=True)
class _Probe:
    """A depth change being tried: where from, the rate there, and which way."""

    from_depth: int
    from_rate: float
    up: bool
    settled: bool = False


class ThroughputDepth:
    """The read-ahead depth of one scan, in chunks (see the module docstring)."""

    def __init__(self, max_depth: int, *, min_depth: int = 2, start_depth: int | None = None,
                 up_gain: float = 1.10, down_loss: float = 0.03, stall_share: float = 0.10,
                 hold_epochs: int = 16,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_depth = max(1, max_depth)
        self.min_depth = min(max(1, min_depth), self.max_depth)
        start = self.max_depth if start_depth is None else start_depth
        self.depth = min(self.max_depth, max(self.min_depth, start))
        self.up_gain, self.down_loss = up_gain, down_loss
        self.stall_limit = stall_share
        self.hold_epochs = hold_epochs
        self._clock = clock
        self._floor, self._ceiling = self.min_depth, self.max_depth
        self._hold = 0  # judged epochs left before the floor and ceiling are reset
        self._since_down = 0  # judged epochs stalled at the ceiling since the last probe down
        self._probe: _Probe | None = None
        self._failed_up = False
        self._t0: float | None = None
        self._bytes = 0
        self._chunks = 0
        self._waited = 0.0
        self.history: list[Epoch] = []

    def waited(self, seconds: float) -> None:
        """The decoder waited ``seconds`` for a chunk that was not received yet."""
        self._waited += max(0.0, seconds)

    def consumed(self, nbytes: int) -> None:
        """The decoder is done with a chunk of ``nbytes`` (an epoch ends every :meth:`_epoch_chunks`)."""
        now = self._clock()
        if self._t0 is None:  # the first chunk starts the first epoch (its wait is the store's start-up)
            self._t0, self._waited = now, 0.0
            return
        self._bytes += nbytes
        self._chunks += 1
        if self._chunks >= self._epoch_chunks():
            self._end_epoch(now)

    def _epoch_chunks(self) -> int:
        """An epoch's length: the depth, at least ``MIN_EPOCH``; while a new depth settles, the
        old one if deeper (a probe down shows only once the chunks fetched ahead at the old depth
        are used up: judged earlier, it would be judged on them)."""
        n = max(MIN_EPOCH, self.depth)
        probe = self._probe
        if probe is not None and not probe.settled:
            n = max(n, probe.from_depth)
        return n

    def _end_epoch(self, now: float) -> None:
        span = max(now - (self._t0 or now), 1e-9)
        rate, stalled = self._bytes / span, min(1.0, self._waited / span)
        depth, probe = self.depth, self._probe
        judged = probe is None or probe.settled
        if probe is not None and not probe.settled:
            probe.settled = True  # the next epoch is the new depth's
        else:
            self._judge(rate, stalled >= self.stall_limit)
        self.history.append(Epoch(depth, rate, stalled, self.depth, judged))
        self._t0, self._bytes, self._chunks, self._waited = now, 0, 0, 0.0

    def _judge(self, rate: float, stalled: bool) -> None:
        if self._hold:
            self._hold -= 1
            if not self._hold:
                self._floor, self._ceiling = self.min_depth, self.max_depth
        probe, self._probe = self._probe, None
        if probe is not None:
            if probe.up:
                paid = rate >= probe.from_rate * self.up_gain
            else:
                paid = rate >= probe.from_rate * (1 - self.down_loss)
            self._failed_up = probe.up and not paid  # then down is tried before up again
            if not paid:  # undone; the depth it left bounds the next probes for a while
                if probe.up:
                    self._ceiling = probe.from_depth
                else:
                    self._floor = probe.from_depth
                self.depth, self._hold = probe.from_depth, self.hold_epochs
            return
        up = min(self.depth * 2, self._ceiling, self.max_depth)
        down = max(self.depth // 2, self._floor, self.min_depth)
        if not stalled:  # the decoder is the bound: more in flight cannot help
            return
        if up > self.depth and not self._failed_up:
            self._try(up, rate, up=True)
        elif down < self.depth:  # at the ceiling: fewer GETs may deliver as much, now and then
            self._since_down += 1
            if self._since_down >= self.hold_epochs:
                self._try(down, rate, up=False)
        elif up > self.depth:
            self._try(up, rate, up=True)

    def _try(self, depth: int, rate: float, *, up: bool) -> None:
        self._probe = _Probe(self.depth, rate, up)
        self._since_down = 0
        self.depth = depth
