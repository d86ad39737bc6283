"""How many chunks a scan keeps in flight: the bandwidth-delay product of the decoder and the store.

The decoder consumes chunks at its own rate; a GET delivers a chunk some time after it is issued.
To keep the decoder from waiting, the chunks in flight must cover one GET's time at the decoder's
rate: ``ceil(GET time / decode time per chunk)`` chunks on the wire, plus the one being decoded.
Fewer, and the decoder waits; more, and the extra GETs only queue in the store and hold buffers,
and on the cores the scan shares with the store they take CPU from the decoder.

Which GET time: not the average. By Little's law the bytes in flight are the delivered rate times a
GET's time, so on a store that is its own bound (SeaweedFS on the scan's cores, a throttled
bucket) four parallel GETs each take four times as long as one, and a depth derived from the
average GET time confirms itself. The delay in the product is the *shortest* GET time seen (over
the last ``window`` GETs): what a GET costs when it does not queue behind the scan's own, as TCP's
congestion control uses the minimum round trip. On a store far away (a real bucket: tens of
milliseconds before the first byte, a per-connection rate) even the shortest GET is long, and the
depth covers it, up to the budget.

Until a GET and a chunk's decode are both measured the depth is the whole budget (a scan starts as
fast as a plain download does). Fed and read on the scan's thread only.
"""

from __future__ import annotations

import math
from collections import deque


class ReadAheadDepth:
    """The read-ahead depth of one scan, in chunks (see the module docstring)."""

    def __init__(self, max_depth: int, *, window: int = 64) -> None:
        self.max_depth = max(1, max_depth)
        self._gets: deque[float] = deque(maxlen=window)  # seconds of the last GETs (running, not queued)
        self._use_s: float | None = None  # seconds the decoder spends on one chunk (moving average)

    def got(self, seconds: float) -> None:
        """One GET took ``seconds`` from its start to its last byte."""
        self._gets.append(max(0.0, seconds))

    def used(self, seconds: float) -> None:
        """The decoder spent ``seconds`` on one chunk (from having it to giving it back)."""
        s = max(0.0, seconds)
        self._use_s = s if self._use_s is None else 0.7 * self._use_s + 0.3 * s

    @property
    def shortest_get_s(self) -> float | None:
        return min(self._gets) if self._gets else None

    @property
    def depth(self) -> int:
        get_s, use_s = self.shortest_get_s, self._use_s
        if get_s is None or use_s is None:
            return self.max_depth
        return max(1, min(self.max_depth, math.ceil(get_s / max(use_s, 1e-4)) + 1))
