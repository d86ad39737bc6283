"""Warm memory for the decoder's output buffers: anonymous mappings recycled between decodes.

Why: the decoder writes every key, value and header it decodes into fresh Arrow buffers. Fresh
memory costs a page fault and the kernel's zeroing of every page on first touch; measured on the
2-core VM this project benchmarks on, that is ~0.7-2 ms per MiB, as much as zstd takes to
decompress the same bytes, so a decode into fresh memory can never come within 1.5x of
decompression alone. Arrow's allocator (mimalloc) hands freed memory back to the kernel after a
few milliseconds, so segment after segment paid it again.

Here a buffer of at least :data:`MIN_BYTES` is a private anonymous mapping (transparent huge
pages requested) seen through a ctypes array that holds its :class:`_Lease`; numpy views and
the Arrow buffers made from them keep that array alive: only when every Arrow array, slice and
numpy view of the buffer is gone does the lease die and give the mapping back, so memory a
reader can still see is never handed out again (reference counting is the guard, not a
convention). Idle mappings wait for the next decode with their pages still mapped: reuse costs
no fault and no zeroing. They hold at most ``RLM_DECODE_CACHE_MB`` MiB of written pages
(default 256; 0 turns recycling off); capacity never written costs nothing and is not counted
(see :func:`note_used`). Idle pages are marked ``MADV_FREE``, so under memory pressure the
kernel may take them back (they then read as zeros, which nothing relies on: the decoder
writes before it reads).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import mmap
import os
import threading
from typing import Any

import numpy as np
import pyarrow as pa

#: Buffers below this come from Arrow's pool as before (small, and the pool reuses them well).
MIN_BYTES = 1 << 20
_HUGE = 2 << 20
_FREE = getattr(mmap, "MADV_FREE", None)


def _budget_from_env() -> int:
    raw = os.environ.get("RLM_DECODE_CACHE_MB", "").strip()
    try:
        return max(0, int(raw)) << 20 if raw else 256 << 20
    except ValueError:
        return 256 << 20


class _Lease:
    """Owns one mapping while any buffer of it is alive; gives it back to its pool on death."""

    __slots__ = ("__weakref__", "address", "mm", "noted", "pool", "size", "touched")

    def __init__(self, pool: RecyclePool, mm: mmap.mmap, size: int, address: int, touched: int) -> None:
        self.pool, self.mm, self.size, self.address = pool, mm, size, address
        self.touched = touched  # bytes from the start that may hold pages (earlier owners' too)
        self.noted = False  # whether this owner said how much it wrote; if not, count it all

    def __del__(self) -> None:
        self.pool._give_back(self.mm, self.size, self.address, self.touched if self.noted else self.size)


class RecyclePool:
    """Mappings lent as Arrow buffers and recycled when the last reference to them dies."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._idle: list[tuple[int, mmap.mmap, int, int]] = []  # (size, mapping, address, touched)
        self._idle_bytes = 0
        self._lock = threading.Lock()
        # mappings given back while the lock was held: a lease may die inside the garbage collector,
        # which can run in this very thread while it holds the lock (in _take): waiting for the lock
        # there deadlocked the decoder. deque.append and popleft take no lock of ours.
        self._returned: collections.deque[tuple[mmap.mmap, int, int, int]] = collections.deque()
        self.reused = 0  # mappings handed out again (for tests and benchmarks)
        self.created = 0

    @property
    def idle_bytes(self) -> int:
        self._drain()
        return self._idle_bytes

    def array(self, nbytes: int, *, sparse: bool = False) -> Any:
        """A writable ``uint8`` array of at least ``nbytes`` (uninitialised), in a recycled or
        new mapping. Its base is a ctypes array over the whole mapping that holds the lease.
        ``sparse``: the owner writes a prefix only and says how much with :func:`note_used`
        (until it does, the whole mapping counts against the budget); otherwise all counts."""
        size = -(-max(nbytes, 1) // _HUGE) * _HUGE
        self._drain()
        got = self._take(size)
        if got is None:
            mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            if hasattr(mmap, "MADV_HUGEPAGE"):
                mm.madvise(mmap.MADV_HUGEPAGE)
            probe = ctypes.c_char.from_buffer(mm)
            address = ctypes.addressof(probe)
            del probe  # no buffer export may outlive this: the mapping must stay closable
            touched = 0
            with self._lock:
                self.created += 1
        else:
            size, mm, address, touched = got
        # sized by the mapping (a multiple of 2 MiB), so that ctypes makes few array types
        memory = (ctypes.c_uint8 * size).from_address(address)
        lease = _Lease(self, mm, size, address, touched if sparse else size)
        lease.noted = not sparse
        memory.lease = lease  # type: ignore[attr-defined]
        return np.frombuffer(memory, np.uint8)  # type: ignore[call-overload]

    def _take(self, size: int) -> tuple[int, mmap.mmap, int, int] | None:
        """The smallest idle mapping that holds ``size`` bytes and is not more than twice that
        (a far larger one would pin pages the new owner never uses)."""
        with self._lock:
            best = -1
            for i, (have, *_) in enumerate(self._idle):
                if size <= have <= 2 * size and (best < 0 or have < self._idle[best][0]):
                    best = i
            if best < 0:
                return None
            got = self._idle.pop(best)
            self._idle_bytes -= _round(min(got[0], got[3]))
            self.reused += 1
            return got

    def _give_back(self, mm: mmap.mmap, size: int, address: int, touched: int) -> None:
        """From a dying lease: never waits for the lock (see ``_returned``)."""
        if not self._lock.acquire(blocking=False):
            self._returned.append((mm, size, address, touched))  # kept at the next array()/clear()
            return
        try:
            keep = self._keep(mm, size, address, touched)
        finally:
            self._lock.release()
        self._settle(mm, keep, _round(min(size, touched)))

    def _drain(self) -> None:
        """Keep or unmap the mappings given back while the lock was held (called holding none)."""
        while True:
            try:
                mm, size, address, touched = self._returned.popleft()
            except IndexError:
                return
            with self._lock:
                keep = self._keep(mm, size, address, touched)
            self._settle(mm, keep, _round(min(size, touched)))

    def _keep(self, mm: mmap.mmap, size: int, address: int, touched: int) -> bool:
        """Under the lock: whether the mapping fits the idle budget (then it is idle now)."""
        cost = _round(min(size, touched))
        if self._idle_bytes + cost > self.budget:
            return False
        self._idle.append((size, mm, address, touched))
        self._idle_bytes += cost
        return True

    def _settle(self, mm: mmap.mmap, keep: bool, cost: int) -> None:
        """Outside the lock: unmap what was not kept; mark kept pages free for the kernel."""
        if not keep:
            mm.close()
        elif _FREE is not None and cost:
            with contextlib.suppress(OSError):  # a kernel without MADV_FREE: the pages simply stay
                mm.madvise(_FREE, 0, cost)

    def clear(self) -> None:
        """Unmap every idle mapping (tests; a process that wants its memory back now)."""
        self._drain()
        with self._lock:
            idle, self._idle, self._idle_bytes = self._idle, [], 0
        for _, mm, _, _ in idle:
            mm.close()


def _round(n: int) -> int:
    return -(-n // _HUGE) * _HUGE



POOL = RecyclePool(_budget_from_env())


def empty(shape: int | tuple[int, ...], dtype: type[np.generic], *, sparse: bool = False) -> Any:
    """An uninitialised numpy array: recycled memory when large and recycling is on, else
    Arrow's memory pool (``sparse``: see :meth:`RecyclePool.array`)."""
    count = int(np.prod(shape))
    nbytes = count * np.dtype(dtype).itemsize
    if POOL.budget and nbytes >= MIN_BYTES:
        return POOL.array(nbytes, sparse=sparse)[:nbytes].view(dtype).reshape(shape)
    buf = pa.allocate_buffer(nbytes)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


def recycled(arr: Any) -> bool:
    """Whether ``arr`` (a numpy view) was made by :func:`empty` from a recycled mapping."""
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    return isinstance(getattr(root.base, "lease", None), _Lease)


def note_used(arr: Any, nbytes: int) -> None:
    """Record that the first ``nbytes`` of ``arr`` (an array from :func:`empty`) were written:
    its mapping then counts only those pages against the idle budget. No-op for other arrays."""
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    lease = getattr(root.base, "lease", None)
    if isinstance(lease, _Lease):
        start = arr.__array_interface__["data"][0] - lease.address
        lease.touched = max(lease.touched, start + nbytes)
        lease.noted = True
