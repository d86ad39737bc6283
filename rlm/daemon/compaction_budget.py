"""The daemon-wide memory budget of remote compaction: every running job's key maps, one cap.

Each remote compaction holds two key maps for its whole run: the engine's offset map
(:class:`rlm.compaction.OffsetMap`, Kafka's ``log.cleaner.dedupe.buffer.size``, 128 MiB by
default) and the newer-keys set (:class:`rlm.compaction.NewerKeys`). Partitions compact on the
daemon's task threads, so without a shared bound ``thread_pool_size`` of them at once would add
up to gigabytes. Kafka's cleaner splits its one dedupe buffer evenly between its cleaner threads;
here the split is dynamic, because a sidecar usually compacts one partition at a time and an even
split would give that one a tenth of the memory:

* a job asks for what it wants and gets it if that leaves at least a *floor*
  (``cap // (4 * slots)``) for every other task thread that could start one;
* otherwise it gets what is left above those floors: a smaller offset map means more passes over
  the input (the engine's multi-pass map), a smaller newer-keys set only compacts less; the
  result is correct either way (docs/remote-compaction-job.md, "Memory");
* so every job finds at least a floor, and the reservations together never exceed the cap.
  Should more jobs than slots run (they cannot: one partition per task thread), one that finds
  less than :data:`MIN_GRANT` is refused and the partition waits for its next run.

Only the key maps are counted (they are the memory that grows with the keys); the engine's
per-segment decode buffers are not.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from rlm.compaction import BYTES_PER_SLOT

log = structlog.get_logger(__name__)

#: the smallest reservation worth running with: an offset map and a newer-keys set of a few keys
MIN_GRANT = 16 * BYTES_PER_SLOT


@dataclass(frozen=True)
class Grant:
    """Memory one job may use: ``offset_map_bytes`` for the engine, ``newer_keys_bytes`` for the set."""

    offset_map_bytes: int
    newer_keys_bytes: int

    @property
    def total(self) -> int:
        return self.offset_map_bytes + self.newer_keys_bytes


class CompactionBudget:
    """The shared budget: :meth:`reserve` before a compaction, released when it ends.

    ``slots`` is how many jobs can run at once (the daemon's ``thread_pool_size``). ``used``,
    ``peak_bytes`` and ``peak_jobs`` are what the metrics and the tests read.
    """

    def __init__(self, cap_bytes: int, slots: int) -> None:
        self.cap = cap_bytes
        self.slots = max(1, slots)
        self.floor = cap_bytes // (4 * self.slots)
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}
        self._next = 0
        self.peak_bytes = 0
        self.peak_jobs = 0

    @property
    def used(self) -> int:
        with self._lock:
            return sum(self._held.values())

    def _grant(self, offset_map: int, newer_keys: int) -> Grant | None:
        """What a new job gets now (under the lock): see the module docstring."""
        want = offset_map + newer_keys
        used = sum(self._held.values())
        idle_others = max(0, self.slots - len(self._held) - 1)
        room = self.cap - used - self.floor * idle_others
        if room < MIN_GRANT:
            room = self.cap - used  # more jobs than slots: what is left, if any
        total = min(want, room)
        if total < MIN_GRANT:
            return None
        map_bytes = total * offset_map // want if want else 0
        return Grant(map_bytes, total - map_bytes)

    @contextmanager
    def reserve(self, offset_map: int, newer_keys: int) -> Iterator[Grant | None]:
        """Reserve up to ``offset_map + newer_keys`` bytes, split in that ratio, for a ``with``
        block; None when not even :data:`MIN_GRANT` is left (the caller skips this run)."""
        with self._lock:
            grant = self._grant(offset_map, newer_keys)
            if grant is not None:
                ticket = self._next
                self._next += 1
                self._held[ticket] = grant.total
                self.peak_bytes = max(self.peak_bytes, sum(self._held.values()))
                self.peak_jobs = max(self.peak_jobs, len(self._held))
        try:
            yield grant
        finally:
            if grant is not None:
                with self._lock:
                    del self._held[ticket]
