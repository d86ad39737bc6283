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
"""

from __future__ import annotations

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


class ChunkBufferPool:
    """At most ``max_buffers`` buffers of ``chunk_bytes`` out at a time (the read-ahead budget).

    Thread-safe. Counts what a memory-bound test and the docs need: bytes held (allocated by the
    pool and not dropped, free or out), their peak, and buffers retired by the guard.
    """

    def __init__(self, chunk_bytes: int, max_buffers: int) -> None:
        self.chunk_bytes = chunk_bytes
        self.max_buffers = max(1, max_buffers)
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
        return _allocate(self.chunk_bytes)

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
        """Drop the free buffers (a finished scan keeps no memory)."""
        with self._lock:
            self.held_bytes -= self.chunk_bytes * len(self._free)
            self._free.clear()
