"""Columnar storage of one partition's segments, sized for millions of rows.

A Python object per segment costs several hundred bytes; here a segment is one row across
numpy columns (~82 bytes), its leader epochs live in two flat arrays, custom metadata in one
``bytearray``, and segment ids are found through an open-addressing hash table of ``int32`` row
numbers (linear probing, backward-shift deletion, no per-key objects). Rows of segments that
reached DELETE_SEGMENT_FINISHED are marked dead and reclaimed by :meth:`SegmentTable.compact`,
which returns the old-to-new row mapping so the owner can renumber its epoch indexes.

Not thread-safe: :class:`rlmm.cache.RemoteLogMetadataCache` serialises access.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

Col = npt.NDArray[Any]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

COLUMNS: tuple[tuple[str, type[np.generic]], ...] = (
    ("id_hi", np.uint64), ("id_lo", np.uint64),
    ("start", np.int64), ("end", np.int64), ("max_ts", np.int64), ("event_ts", np.int64),
    ("broker", np.int32), ("size", np.int32), ("state", np.int8), ("txn", np.int8),
    ("ep_start", np.int64), ("ep_cnt", np.int32), ("cm_off", np.int64), ("cm_len", np.int32),
)
DEAD = -1
_MIX = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
_MAX_LOAD = 0.7


_ID = struct.Struct(">QQ")


def split_id(raw: bytes) -> tuple[int, int]:
    hi, lo = _ID.unpack(raw)
    return int(hi), int(lo)


def _grown(arr: Col, cap: int) -> Col:
    out = np.empty(cap, dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


@dataclass(frozen=True, slots=True)
class RowsView:
    """A point-in-time copy of some rows, turned into value objects lazily.

    The flat epoch arrays and the custom-metadata buffer are only ever appended to or replaced,
    never rewritten in place, so holding references to them is a consistent snapshot.
    """

    tp: TopicIdPartition
    cols: dict[str, Col]
    fe_epoch: I32
    fe_off: I64
    cm_buf: bytes | bytearray

    def __len__(self) -> int:
        return len(self.cols["start"])

    def metadata(self, i: int) -> RemoteLogSegmentMetadata:
        c = self.cols
        es, n = int(c["ep_start"][i]), int(c["ep_cnt"][i])
        epochs = tuple(zip(self.fe_epoch[es:es + n].tolist(), self.fe_off[es:es + n].tolist(), strict=True))
        cm_len = int(c["cm_len"][i])
        custom = None
        if cm_len >= 0:
            off = int(c["cm_off"][i])
            custom = bytes(self.cm_buf[off:off + cm_len])
        raw = int(c["id_hi"][i]).to_bytes(8, "big") + int(c["id_lo"][i]).to_bytes(8, "big")
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(self.tp, KafkaUuid(raw)),
            start_offset=int(c["start"][i]), end_offset=int(c["end"][i]),
            max_timestamp_ms=int(c["max_ts"][i]), broker_id=int(c["broker"][i]),
            event_timestamp_ms=int(c["event_ts"][i]), segment_size_in_bytes=int(c["size"][i]),
            segment_leader_epochs=epochs, state=RemoteLogSegmentState(int(c["state"][i])),
            custom_metadata=custom, txn_index_empty=bool(c["txn"][i]))


class SegmentTable:
    """Rows of segments of one partition plus the id -> row hash index."""

    __slots__ = ("c", "cap", "cm_buf", "fe_epoch", "fe_n", "fe_off", "ht", "live", "n", "shift")

    def __init__(self, capacity: int = 8) -> None:
        self.cap = max(1, capacity)
        self.c: dict[str, Col] = {
            name: np.zeros(self.cap, dtype=dt) for name, dt in COLUMNS}
        self.n = 0
        self.live = 0
        self.fe_epoch: I32 = np.zeros(max(1, capacity), dtype=np.int32)
        self.fe_off: I64 = np.zeros(max(1, capacity), dtype=np.int64)
        self.fe_n = 0
        self.cm_buf = bytearray()
        self.ht: I32 = np.full(16, -1, dtype=np.int32)
        self.shift = 64 - 4

    # ---- hash index -------------------------------------------------------------------------
    def _home(self, hi: int, lo: int) -> int:
        return (((hi ^ lo) * _MIX) & _MASK64) >> self.shift

    def find(self, raw: bytes) -> int:
        """Row of a live segment id, or -1."""
        hi, lo = split_id(raw)
        ht, id_hi, id_lo = self.ht, self.c["id_hi"], self.c["id_lo"]
        mask = len(ht) - 1
        slot = (((hi ^ lo) * _MIX) & _MASK64) >> self.shift
        while True:
            row: int = ht.item(slot)
            if row < 0:
                return -1
            if id_lo.item(row) == lo and id_hi.item(row) == hi:
                return row
            slot = (slot + 1) & mask

    def _hash_insert(self, row: int) -> None:
        ht = self.ht
        mask = len(ht) - 1
        slot = self._home(self.c["id_hi"].item(row), self.c["id_lo"].item(row))
        while ht[slot] >= 0:
            slot = (slot + 1) & mask
        ht[slot] = row

    def _hash_delete(self, row: int) -> None:
        ht, id_hi, id_lo = self.ht, self.c["id_hi"], self.c["id_lo"]
        mask = len(ht) - 1
        i = self._home(id_hi.item(row), id_lo.item(row))
        while ht.item(i) != row:
            i = (i + 1) & mask
        j = i
        while True:  # backward-shift deletion keeps every probe chain gap-free
            j = (j + 1) & mask
            other = ht.item(j)
            if other < 0:
                break
            k = self._home(id_hi.item(other), id_lo.item(other))
            if (i < k <= j) if i <= j else (i < k or k <= j):
                continue
            ht[i] = other
            i = j
        ht[i] = -1

    def rebuild_index(self) -> None:
        """Rebuilds the hash table from the live rows, vectorised (used after load/compaction)."""
        rows = np.flatnonzero(self.c["state"][: self.n] >= 0).astype(np.int32)
        size = 16
        while size * _MAX_LOAD < len(rows) + 1:
            size *= 2
        ht = np.full(size, -1, dtype=np.int32)
        if len(rows):
            bits = size.bit_length() - 1
            mixed = (self.c["id_hi"][rows] ^ self.c["id_lo"][rows]) * np.uint64(_MIX)
            pos = (mixed >> np.uint64(64 - bits)).astype(np.int64)
            pending = rows
            mask = size - 1
            while len(pending):
                taken = ht[pos] >= 0
                pos[taken] = (pos[taken] + 1) & mask
                free = ~taken
                cand_pos = pos[free]
                uniq, first = np.unique(cand_pos, return_index=True)
                winners = np.flatnonzero(free)[first]
                ht[uniq] = pending[winners]
                keep = np.ones(len(pending), dtype=bool)
                keep[winners] = False
                pending, pos = pending[keep], pos[keep]
        self.ht = ht
        self.shift = 64 - (size.bit_length() - 1)

    # ---- rows ---------------------------------------------------------------------------------
    def _ensure_row_capacity(self) -> None:
        if self.n < self.cap:
            return
        cap = self.cap + max(8, self.cap // 2)
        self.c = {name: _grown(arr, cap) for name, arr in self.c.items()}
        self.cap = cap

    def _append_epochs(self, epochs: tuple[tuple[int, int], ...]) -> int:
        need = self.fe_n + len(epochs)
        if need > len(self.fe_epoch):
            cap = max(need, len(self.fe_epoch) + max(8, len(self.fe_epoch) // 2))
            self.fe_epoch = _grown(self.fe_epoch, cap)
            self.fe_off = _grown(self.fe_off, cap)
        start = self.fe_n
        for i, (e, o) in enumerate(epochs):
            self.fe_epoch[start + i] = e
            self.fe_off[start + i] = o
        self.fe_n = need
        return start

    def _set_custom(self, row: int, custom: bytes | None) -> None:
        if custom is None:
            self.c["cm_len"][row] = -1
            self.c["cm_off"][row] = 0
        else:
            self.c["cm_off"][row] = len(self.cm_buf)
            self.c["cm_len"][row] = len(custom)
            self.cm_buf += custom

    def write_row(self, row: int, md: RemoteLogSegmentMetadata) -> None:
        """(Re)writes all fields of ``row`` from ``md`` (ids must already be set for new rows)."""
        c = self.c
        c["start"][row] = md.start_offset
        c["end"][row] = md.end_offset
        c["max_ts"][row] = md.max_timestamp_ms
        c["event_ts"][row] = md.event_timestamp_ms
        c["broker"][row] = md.broker_id
        c["size"][row] = md.segment_size_in_bytes
        c["state"][row] = int(md.state)
        c["txn"][row] = 1 if md.txn_index_empty else 0
        c["ep_start"][row] = self._append_epochs(md.segment_leader_epochs)
        c["ep_cnt"][row] = len(md.segment_leader_epochs)
        self._set_custom(row, md.custom_metadata)

    def append(self, md: RemoteLogSegmentMetadata) -> int:
        self._ensure_row_capacity()
        row = self.n
        hi, lo = split_id(md.remote_log_segment_id.id.raw)
        self.c["id_hi"][row] = hi
        self.c["id_lo"][row] = lo
        self.write_row(row, md)
        self.n += 1
        self.live += 1
        if (self.live + 1) > len(self.ht) * _MAX_LOAD:
            self.rebuild_index()
        else:
            self._hash_insert(row)
        return row

    def update(self, row: int, state: int, broker_id: int, event_ts: int, custom: bytes | None) -> None:
        c = self.c
        c["state"][row] = state
        c["broker"][row] = broker_id
        c["event_ts"][row] = event_ts
        if custom is None:
            c["cm_len"][row] = -1
        else:
            self._set_custom(row, custom)

    def kill(self, row: int) -> None:
        """Forgets a segment (DELETE_SEGMENT_FINISHED); the row is reclaimed by :meth:`compact`."""
        self._hash_delete(row)
        self.c["state"][row] = DEAD
        self.live -= 1

    def state(self, row: int) -> int:
        return int(self.c["state"][row])

    def epochs(self, row: int) -> list[tuple[int, int]]:
        es, n = int(self.c["ep_start"][row]), int(self.c["ep_cnt"][row])
        return list(zip(self.fe_epoch[es:es + n].tolist(), self.fe_off[es:es + n].tolist(), strict=True))

    def epoch_end(self, row: int, epoch: int) -> int:
        """Last offset of ``epoch`` inside the segment: next epoch's start - 1, or the end offset."""
        es, n = self.c["ep_start"].item(row), self.c["ep_cnt"].item(row)
        fe_epoch = self.fe_epoch
        for k in range(es, es + n):  # a segment has very few epochs
            if fe_epoch.item(k) > epoch:
                return int(self.fe_off.item(k)) - 1
        return int(self.c["end"].item(row))

    def metadata(self, tp: TopicIdPartition, row: int) -> RemoteLogSegmentMetadata:
        """One row as a value object (the single-segment fast path of :class:`RowsView`)."""
        c = self.c
        es, n = c["ep_start"].item(row), c["ep_cnt"].item(row)
        epochs = tuple(zip(self.fe_epoch[es:es + n].tolist(), self.fe_off[es:es + n].tolist(), strict=True))
        cm_len = c["cm_len"].item(row)
        custom = None
        if cm_len >= 0:
            off = c["cm_off"].item(row)
            custom = bytes(self.cm_buf[off:off + cm_len])
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(tp, KafkaUuid(_ID.pack(c["id_hi"].item(row),
                                                                            c["id_lo"].item(row)))),
            start_offset=c["start"].item(row), end_offset=c["end"].item(row),
            max_timestamp_ms=c["max_ts"].item(row), broker_id=c["broker"].item(row),
            event_timestamp_ms=c["event_ts"].item(row), segment_size_in_bytes=c["size"].item(row),
            segment_leader_epochs=epochs, state=RemoteLogSegmentState(c["state"].item(row)),
            custom_metadata=custom, txn_index_empty=bool(c["txn"].item(row)))

    def view(self, tp: TopicIdPartition, rows: npt.NDArray[np.integer]) -> RowsView:
        return RowsView(tp, {name: arr[rows] for name, arr in self.c.items()}, self.fe_epoch, self.fe_off,
                        self.cm_buf)

    def live_rows(self) -> npt.NDArray[np.intp]:
        return np.flatnonzero(self.c["state"][: self.n] >= 0)

    def nbytes(self) -> int:
        return (sum(a.nbytes for a in self.c.values()) + self.fe_epoch.nbytes + self.fe_off.nbytes
                + len(self.cm_buf) + self.ht.nbytes)

    def compact(self) -> I32:
        """Drops dead rows, packs epochs and custom metadata; returns old row -> new row (-1 = dead)."""
        live = self.live_rows()
        remap: I32 = np.full(self.n, -1, dtype=np.int32)
        remap[live] = np.arange(len(live), dtype=np.int32)
        cols = {name: arr[live].copy() for name, arr in self.c.items()}
        cnt = cols["ep_cnt"].astype(np.int64)
        new_start = np.zeros(len(live), dtype=np.int64)
        if len(live):
            np.cumsum(cnt[:-1], out=new_start[1:])
        idx = np.repeat(cols["ep_start"] - new_start, cnt) + np.arange(int(cnt.sum()), dtype=np.int64)
        self.fe_epoch = self.fe_epoch[idx].copy()
        self.fe_off = self.fe_off[idx].copy()
        self.fe_n = len(idx)
        cols["ep_start"] = new_start
        buf = bytearray()
        cm_off, cm_len = cols["cm_off"], cols["cm_len"]
        for i in np.flatnonzero(cm_len >= 0).tolist():
            off, ln = int(cm_off[i]), int(cm_len[i])
            cm_off[i] = len(buf)
            buf += self.cm_buf[off:off + ln]
        self.cm_buf = buf
        self.c = cols
        self.n = self.cap = len(live)
        self.live = len(live)
        self.rebuild_index()
        return remap

    @classmethod
    def from_columns(cls, cols: dict[str, Col], fe_epoch: I32, fe_off: I64,
                     cm_buf: bytearray) -> SegmentTable:
        t = cls(capacity=1)
        n = len(cols["start"])
        t.c = cols
        t.n = t.cap = n
        t.live = int(np.count_nonzero(cols["state"] >= 0))
        t.fe_epoch, t.fe_off, t.fe_n = fe_epoch, fe_off, len(fe_epoch)
        t.cm_buf = cm_buf
        t.rebuild_index()
        return t
