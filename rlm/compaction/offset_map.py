"""A key -> latest-offset map in a fixed amount of memory, like Kafka's ``SkimpyOffsetMap``.

Kafka's cleaner (``SkimpyOffsetMap`` in ``LogCleaner.scala``, ``storage/.../SkimpyOffsetMap.java``
since 3.x) keeps, per slot, a 16-byte MD5 digest and an 8-byte offset: 24 bytes, filled up to
``log.cleaner.io.buffer.load.factor`` (0.9). Here a slot is a 16-byte keyed digest
(:mod:`rlm.compaction.digest`) and a **4-byte** offset relative to the map's ``base_offset``:
20 bytes per slot, so the same memory holds 20 % more keys. A pass of the engine therefore covers
at most 2**32 - 2 offsets; the engine starts a new pass when the next offset would not fit, as it
does when the map is full.

Slots are probed linearly from ``hi % slots``; an all-zero digest marks an empty slot. Inserting
and looking up a whole column is one compiled call each (no per-record Python).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from rlm.compaction.digest import KeyDigests
from rlm.compaction.errors import InvalidCompactionInput, OffsetMapTooSmall

__all__ = ["BYTES_PER_SLOT", "OffsetMap"]

Arr = np.ndarray[Any, Any]
BYTES_PER_SLOT = 8 + 8 + 4  # digest halves + relative offset
MAX_RELATIVE = 2**32 - 2


@njit(cache=True, nogil=True, inline="always")
def _probe(h: Any, lw: Any, t_hi: Any, t_lo: Any) -> Any:  # pragma: no cover - jitted
    """The slot holding digest (h, lw), or the empty slot where linear probing from ``h % slots``
    ends (the load factor keeps one free)."""
    slots: Any = t_hi.shape[0]
    pos: Any = np.int64(h % np.uint64(slots))
    while not ((t_hi[pos] == h and t_lo[pos] == lw)
               or (t_hi[pos] == np.uint64(0) and t_lo[pos] == np.uint64(0))):
        pos += 1
        if pos == slots:
            pos = 0
    return pos


@njit(cache=True, nogil=True)
def _put_many(hi: Any, lo: Any, rel: Any, use: Any, t_hi: Any, t_lo: Any, t_off: Any,
              size: Any, max_size: Any) -> Any:  # pragma: no cover - jitted
    """Insert records in order; stop at the first new key that does not fit.

    Returns (records consumed, new size, largest relative offset put or -1)."""
    latest: Any = np.int64(-1)
    for i in range(hi.shape[0]):
        if not use[i]:
            continue
        h = hi[i]
        lw = lo[i]
        pos = _probe(h, lw, t_hi, t_lo)
        if t_hi[pos] != h or t_lo[pos] != lw:  # an empty slot: a new key
            if size >= max_size:
                return i, size, latest
            t_hi[pos] = h
            t_lo[pos] = lw
            size += 1
        t_off[pos] = rel[i]
        latest = np.int64(rel[i])
    return hi.shape[0], size, latest


@njit(cache=True, nogil=True)
def _get_many(hi: Any, lo: Any, has: Any, t_hi: Any, t_lo: Any, t_off: Any,
              out: Any) -> None:  # pragma: no cover - jitted
    for i in range(hi.shape[0]):
        out[i] = -1
        if not has[i]:
            continue
        pos = _probe(hi[i], lo[i], t_hi, t_lo)
        if t_hi[pos] == hi[i] and t_lo[pos] == lo[i]:
            out[i] = t_off[pos]


class OffsetMap:
    """Key digests -> latest offset, in ``memory_bytes`` of numpy arrays (never more).

    ``load_factor`` caps how full the table gets (Kafka's default 0.9); :attr:`max_keys` keys fit.
    """

    def __init__(self, memory_bytes: int, *, load_factor: float = 0.9) -> None:
        if not 0.0 < load_factor <= 0.95:
            raise InvalidCompactionInput(f"load_factor {load_factor} must be in (0, 0.95]")
        slots = memory_bytes // BYTES_PER_SLOT
        self.max_keys = int(slots * load_factor)
        if self.max_keys < 1:
            raise OffsetMapTooSmall(f"{memory_bytes} bytes of offset map hold no key "
                                    f"({BYTES_PER_SLOT} bytes per slot, load factor {load_factor})")
        self.slots = slots
        self._hi = np.zeros(slots, np.uint64)
        self._lo = np.zeros(slots, np.uint64)
        self._off = np.zeros(slots, np.uint32)
        self.size = 0
        self.base_offset = 0
        self.latest_offset = -1  # Kafka's ``map.latestOffset``: the last offset put, -1 if none

    @property
    def memory_bytes(self) -> int:
        """Bytes the table's arrays take (what the memory test measures)."""
        return int(self._hi.nbytes + self._lo.nbytes + self._off.nbytes)

    def clear(self, base_offset: int) -> None:
        """Empty the map for a new pass whose offsets start at ``base_offset``."""
        self._hi.fill(0)
        self._lo.fill(0)
        self.size = 0
        self.base_offset = base_offset
        self.latest_offset = -1

    def put_all(self, digests: KeyDigests, offsets: Arr, use: Arr) -> int:
        """Put ``offsets`` (ascending) of the keyed records where ``use``; returns how many records
        were consumed: fewer than ``len(offsets)`` when the map filled or an offset is beyond the
        map's 32-bit range (the caller ends the pass there, as Kafka's cleaner does when full)."""
        rel = offsets - self.base_offset
        in_range = rel <= MAX_RELATIVE
        stop = len(offsets) if bool(in_range.all()) else int(np.argmin(in_range))
        if stop and int(rel[0]) < 0:
            raise InvalidCompactionInput(
                f"offset {int(offsets[0])} is below the pass base {self.base_offset}")
        consumed, size, latest = _put_many(
            digests.hi[:stop], digests.lo[:stop], rel[:stop].astype(np.uint32),
            (use & digests.has_key)[:stop], self._hi, self._lo, self._off, self.size, self.max_keys)
        self.size = int(size)
        if latest >= 0:
            self.latest_offset = self.base_offset + int(latest)
        return int(consumed)

    def get_all(self, digests: KeyDigests) -> Arr:
        """Latest offset of each record's key, -1 where the key is absent or null."""
        out = np.empty(len(digests), np.int64)
        if len(digests):
            _get_many(digests.hi, digests.lo, digests.has_key, self._hi, self._lo, self._off, out)
        found = out >= 0
        out[found] += self.base_offset
        return out
