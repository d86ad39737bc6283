"""Kafka's ``RemoteLogLeaderEpochState`` on sorted numpy arrays instead of a skip-list map.

Per leader epoch: ``offsetToId`` (the epoch's start offset inside a COPY_SEGMENT_FINISHED
segment -> segment row), the set of unreferenced rows (copy in progress, being deleted, or
replaced by a newer overlapping upload) and the highest offset copied for the epoch.

The sorted map is two parallel arrays (keys, rows) with a live window ``[head, tail)``.
Segments finish in ascending order and are deleted oldest first, so appends and removals at
either end are O(1); a removal in the middle leaves a tombstone (row -1), compacted once
tombstones outnumber live entries; an insertion in the middle (overlapping uploads after a
leader change) shifts the tail.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
TOMB = -1
PACK_MIN_TOMBS = 16  # tombstones tolerated before packing (module-level so tests can lower it)


class EpochState:
    __slots__ = ("head", "highest", "keys", "rows", "tail", "tombs", "unref")

    def __init__(self) -> None:
        self.keys: I64 = np.zeros(4, dtype=np.int64)
        self.rows: I32 = np.zeros(4, dtype=np.int32)
        self.head = 0
        self.tail = 0
        self.tombs = 0
        self.highest: int | None = None
        self.unref: set[int] = set()

    # ---- sorted map -----------------------------------------------------------------------------
    def _normalise(self) -> None:
        rows = self.rows
        while self.tail > self.head and rows[self.tail - 1] == TOMB:
            self.tail -= 1
            self.tombs -= 1
        while self.head < self.tail and rows[self.head] == TOMB:
            self.head += 1
            self.tombs -= 1
        if self.head == self.tail:
            self.head = self.tail = self.tombs = 0
        elif self.tombs > PACK_MIN_TOMBS and self.tombs * 2 > self.tail - self.head:
            self._pack()

    def _pack(self) -> None:
        window = slice(self.head, self.tail)
        keep = self.rows[window] != TOMB
        keys, rows = self.keys[window][keep], self.rows[window][keep]
        n = len(keys)
        cap = max(4, n + n // 2)
        self.keys = np.zeros(cap, dtype=np.int64)
        self.rows = np.zeros(cap, dtype=np.int32)
        self.keys[:n], self.rows[:n] = keys, rows
        self.head, self.tail, self.tombs = 0, n, 0

    def _find(self, key: int) -> int:
        """Index of ``key`` in the window (live or tombstone), or -1."""
        i = self.head + int(np.searchsorted(self.keys[self.head:self.tail], key))
        return i if i < self.tail and int(self.keys[i]) == key else -1

    def last(self) -> tuple[int, int] | None:
        if self.tail == self.head:
            return None
        return self.keys.item(self.tail - 1), self.rows.item(self.tail - 1)

    def floor(self, offset: int) -> int:
        """Row of the greatest key <= offset, or -1 (``NavigableMap.floorEntry``)."""
        i = self.head + int(np.searchsorted(self.keys[self.head:self.tail], offset, side="right")) - 1
        while i >= self.head:
            row: int = self.rows.item(i)
            if row != TOMB:
                return row
            i -= 1
        return -1

    def put(self, key: int, row: int) -> None:
        """``offsetToId.put``: replaces the row of an existing key, else inserts in order."""
        if self.tail == self.head or key > self.keys.item(self.tail - 1):
            if self.tail == len(self.keys):
                if self.head > (self.tail - self.head):
                    self._pack()
                else:
                    cap = len(self.keys) + max(4, len(self.keys) // 2)
                    self.keys = np.concatenate([self.keys, np.zeros(cap - len(self.keys), np.int64)])
                    self.rows = np.concatenate([self.rows, np.zeros(cap - len(self.rows), np.int32)])
            self.keys[self.tail] = key
            self.rows[self.tail] = row
            self.tail += 1
            return
        i = self._find(key)
        if i >= 0:
            if self.rows[i] == TOMB:
                self.tombs -= 1
            self.rows[i] = row
            return
        pos = self.head + int(np.searchsorted(self.keys[self.head:self.tail], key))
        keys = np.concatenate([self.keys[self.head:pos], [key], self.keys[pos:self.tail]]).astype(np.int64)
        rows = np.concatenate([self.rows[self.head:pos], [row], self.rows[pos:self.tail]]).astype(np.int32)
        n = len(keys)
        self.keys = np.zeros(n + max(4, n // 2), dtype=np.int64)
        self.rows = np.zeros(len(self.keys), dtype=np.int32)
        self.keys[:n], self.rows[:n] = keys, rows
        self.head, self.tail = 0, n

    def remove_at_tail(self) -> None:
        self.rows[self.tail - 1] = TOMB
        self.tombs += 1
        self._normalise()

    def remove(self, key: int, row: int) -> None:
        """``offsetToId.remove(key, row)``: only if the key currently maps to ``row``."""
        i = self._find(key)
        if i >= 0 and int(self.rows[i]) == row:
            self.rows[i] = TOMB
            self.tombs += 1
            self._normalise()

    def referenced(self) -> I32:
        """Referenced rows in key order."""
        rows = self.rows[self.head:self.tail]
        return rows[rows != TOMB] if self.tombs else rows.copy()

    def entries(self) -> tuple[I64, I32]:
        window = slice(self.head, self.tail)
        keep = self.rows[window] != TOMB
        return self.keys[window][keep].copy(), self.rows[window][keep].copy()

    def is_empty(self) -> bool:
        return self.tail == self.head and not self.unref and self.highest is None

    # ---- Kafka's state transitions --------------------------------------------------------------
    def on_copy_finished(self, start: int, row: int, epoch_end: int) -> None:
        """``handleSegmentWithCopySegmentFinishedState``: a newer overlapping upload wins."""
        last = self.last()
        while (last is not None and last[0] >= start
               and self.highest is not None and self.highest <= epoch_end):
            self.remove_at_tail()
            self.unref.add(last[1])
            last = self.last()
        self.put(start, row)
        self.unref.discard(row)
        if self.highest is None or epoch_end > self.highest:
            self.highest = epoch_end

    def on_delete_started(self, start: int, row: int) -> None:
        self.remove(start, row)
        self.unref.add(row)

    def remap(self, mapping: I32) -> None:
        """Renumbers rows after the segment table was compacted (referenced rows are all live)."""
        keys, rows = self.entries()
        new_rows = mapping[rows]
        keep = new_rows >= 0
        keys, new_rows = keys[keep], new_rows[keep]
        n = len(keys)
        self.keys = np.zeros(max(4, n), dtype=np.int64)
        self.rows = np.zeros(max(4, n), dtype=np.int32)
        self.keys[:n] = keys
        self.rows[:n] = new_rows
        self.head, self.tail, self.tombs = 0, n, 0
        self.unref = {int(mapping[r]) for r in self.unref if mapping[r] >= 0}

    @classmethod
    def restore(cls, keys: I64, rows: I32, highest: int | None, unref: set[int]) -> EpochState:
        s = cls()
        n = len(keys)
        s.keys = np.zeros(max(4, n), dtype=np.int64)
        s.rows = np.zeros(max(4, n), dtype=np.int32)
        s.keys[:n], s.rows[:n] = keys, rows
        s.tail = n
        s.highest = highest
        s.unref = unref
        return s
