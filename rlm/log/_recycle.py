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
no fault and no zeroing. They hold at most ``RLM_DECODE_CACHE_MB`` MiB of written pages (0 turns
recycling off); capacity never written costs nothing and is not counted (see :func:`note_used`).
Idle pages are marked ``MADV_FREE``, so under memory pressure the kernel may take them back
(they then read as zeros, which nothing relies on: the decoder writes before it reads).

The default budget (:func:`default_budget`) is an eighth of the memory this process may use, at
least 256 MiB and at most 2 GiB. Why that large: a whole-file read of a 256 MB zstd segment builds
a table of ~1 GB, and with the former fixed 256 MiB three quarters of it was fresh memory again
at every read, whose zeroing by the kernel (``clear_page_erms``) took 38 % of the decode's CPU and
put it at 0.35-0.56x of decompression alone (0.75-0.84x with the pages kept). Idle memory never
exceeds what the decodes of this process once held at the same time, and the kernel reclaims it
first under pressure.
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


#: Bounds of the default idle budget (see the module docstring).
BUDGET_MIN = 256 << 20
BUDGET_MAX = 2 << 30


def _memory_limit() -> int | None:
    """Bytes this process may use: physical memory, or the cgroup (v2) limit if lower; None if unknown."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    with contextlib.suppress(ValueError, OSError):
        with open("/sys/fs/cgroup/memory.max") as f:
            raw = f.read().strip()
        if raw != "max":
            limits.append(int(raw))
    positive = [n for n in limits if n > 0]
    return min(positive) if positive else None


def default_budget() -> int:
    """An eighth of :func:`_memory_limit`, within [:data:`BUDGET_MIN`, :data:`BUDGET_MAX`]."""
    limit = _memory_limit()
    if limit is None:
        return BUDGET_MIN
    return max(BUDGET_MIN, min(BUDGET_MAX, limit // 8))


def _budget_from_env() -> int:
    raw = os.environ.get("RLM_DECODE_CACHE_MB", "").strip()
    try:
        return max(0, int(raw)) << 20 if raw else default_budget()
    except ValueError:
        return default_budget()


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
        (a far larger one would pin pages the new owner never uses, and a later, larger request
        would find none); of equal ones, the one with the most pages already written. Why:
        an output's four data buffers are of one size but filled very unequally (values vs
        header keys); handing the value buffer the mapping a small column had used left most of
        it to be faulted in and zeroed again."""
        with self._lock:
            best, best_key = -1, (0, 0)
            for i, (have, _, _, touched) in enumerate(self._idle):
                key = (-have, min(touched, size))
                if size <= have <= 2 * size and (best < 0 or key > best_key):
                    best, best_key = i, key
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


def mapping(nbytes: int) -> tuple[Any, mmap.mmap, int] | None:
    """A recycled mapping of at least ``nbytes`` for a file window (:mod:`rlm.log.source`): the
    ``uint8`` array that holds its lease, the ``mmap`` to ``madvise`` and its address; ``None``
    when recycling is off or ``nbytes`` is below :data:`MIN_BYTES`. Why: a file read into a fresh
    mapping at every decode paid its page faults and zeroing each time; after other work had
    churned memory that cost 0.024 -> 0.058 s CPU for a 16 MB lz4 file whose decode alone takes
    0.021 s. The window must not close the ``mmap``: the pool owns it, and takes it back when the
    array and every view of it are gone."""
    if not POOL.budget or nbytes < MIN_BYTES:
        return None
    arr = POOL.array(nbytes)
    lease = arr.base.lease
    return arr, lease.mm, lease.address


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
