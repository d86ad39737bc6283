"""Receive buffers of a scan's read-ahead: preallocated, reused, and never while a view of one lives.

Why: a scan receives every chunk of every segment it reads. A fresh 8 MiB ``bytes`` per GET is
page-faulted in by the kernel (one fault per 4 KiB page) and handed back a moment later; a few
buffers received into with ``readinto`` and reused cost that once per scan.

Reuse is where a read goes wrong silently: the decoder, an Arrow array or a caller may still hold
a view of a chunk when the scan moves on, and writing the next chunk into that buffer would change
bytes they already read. The guard uses what CPython enforces itself: a ``bytearray`` cannot be
resized while any buffer export of it is alive (a ``memoryview`` or a slice of one, a numpy or Arrow
array over it). Before a buffer goes back to the free list it is grown and shrunk by one byte,
inside its allocation (no copy); a ``BufferError`` means someone still sees it, and the buffer is
retired: it is never written again, and the pool is allowed a new one in its place.

Buffers outlive their scan: a finished scan's free buffers go to a process-wide cache of idle
warm buffers (:data:`WARM`, at most ``RLM_READ_BUFFER_CACHE_MB`` MiB, 128 by default; 0 turns it
off) that the next scan of any fetcher in the process takes first. Why: a backfill, the HTTP API
and the Kafka endpoint run scan after scan, and on the VM the benchmarks run on, memory the
process has not touched lately costs a page fault per 4 KiB and the host's allocation behind it
(milliseconds per MiB: 23,600 faults per two 256 MiB scans, all of them the read-ahead's
buffers). Only buffers that passed the guard are cached, so no cached buffer is seen by anyone.
"""

from __future__ import annotations

import os
import threading

import structlog

log = structlog.get_logger(__name__)


def still_viewed(buf: bytearray) -> bool:
    """Whether a buffer export of ``buf`` is alive (the reuse guard)."""
    try:
        buf.append(0)
    except BufferError:
        return True
    del buf[-1]
    return False


def _allocate(size: int) -> bytearray:
    """A ``size``-byte buffer with room for the guard's one-byte probe (no reallocation)."""
    buf = bytearray(size + 1)
    del buf[-1]
    return buf


class WarmBuffers:
    """Idle receive buffers kept between scans, at most ``max_bytes`` of them. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(0, max_bytes)
        self._lock = threading.Lock()
        self._idle: dict[int, list[bytearray]] = {}
        self.idle_bytes = 0
        self.reused = 0  # buffers handed out again (tests, benchmarks)

    def get(self, size: int) -> bytearray | None:
        """An idle buffer of exactly ``size`` bytes, or ``None``."""
        with self._lock:
            free = self._idle.get(size)
            if not free:
                return None
            self.idle_bytes -= size
            self.reused += 1
            return free.pop()

    def put(self, buf: bytearray) -> bool:
        """Keep ``buf`` (no view of it may be alive) if it fits; ``False``: dropped."""
        with self._lock:
            if self.idle_bytes + len(buf) > self.max_bytes:
                return False
            self._idle.setdefault(len(buf), []).append(buf)
            self.idle_bytes += len(buf)
            return True

    def clear(self) -> None:
        """Drop every idle buffer (tests; a process that wants its memory back now)."""
        with self._lock:
            self._idle.clear()
            self.idle_bytes = 0


def _cache_bytes_from_env() -> int:
    raw = os.environ.get("RLM_READ_BUFFER_CACHE_MB", "").strip()
    try:
        return max(0, int(raw)) << 20 if raw else 128 << 20
    except ValueError:
        return 128 << 20


#: The process's idle receive buffers (see the module docstring).
WARM = WarmBuffers(_cache_bytes_from_env())


class ChunkBufferPool:
    """At most ``max_buffers`` buffers of ``chunk_bytes`` out at a time (the read-ahead budget).

    Thread-safe. Counts what a memory-bound test and the docs need: bytes held (allocated by the
    pool and not dropped, free or out), their peak, and buffers retired by the guard.
    """

    def __init__(self, chunk_bytes: int, max_buffers: int, *, warm: WarmBuffers | None = None) -> None:
        self.chunk_bytes = chunk_bytes
        self.max_buffers = max(1, max_buffers)
        self.warm = WARM if warm is None else warm
        self._lock = threading.Lock()
        self._free: list[bytearray] = []
        self._out = 0
        self.held_bytes = 0
        self.peak_held_bytes = 0
        self.retired = 0

    @property
    def budget_bytes(self) -> int:
        return self.max_buffers * self.chunk_bytes

    def take(self) -> bytearray | None:
        """A free buffer, a new one while under the budget, or ``None`` (all are out)."""
        with self._lock:
            if self._free:
                self._out += 1
                return self._free.pop()
            if self._out >= self.max_buffers:
                return None
            self._out += 1
            self.held_bytes += self.chunk_bytes
            self.peak_held_bytes = max(self.peak_held_bytes, self.held_bytes)
        return self.warm.get(self.chunk_bytes) or _allocate(self.chunk_bytes)

    def give_back(self, buf: bytearray) -> bool:
        """Return ``buf`` for reuse; ``False`` if a view of it is still alive (retired instead)."""
        viewed = still_viewed(buf)
        with self._lock:
            self._out -= 1
            if viewed:
                # not ours any more: whoever holds the view keeps it alive; its memory is theirs
                self.retired += 1
                self.held_bytes -= self.chunk_bytes
            else:
                self._free.append(buf)
        if viewed:
            log.warning("chunk_buffer_retired", why="a view of the buffer is still alive",
                        effect="the buffer is not reused; a new one is allocated")
        return not viewed

    def clear(self) -> None:
        """Give the free buffers to the process's warm cache (a finished scan holds no memory of
        its own; the cache, bounded, keeps them for the next scan)."""
        with self._lock:
            self.held_bytes -= self.chunk_bytes * len(self._free)
            free, self._free = self._free, []
        for buf in free:
            self.warm.put(buf)
