"""Producer state rebuilt from batches, as the broker's ``ProducerStateManager`` keeps it.

Needed when the broker has already deleted the ``<offset>.snapshot`` that belongs with a
segment being tiered: scan the batches below the offset (starting from an older snapshot
when one exists) and produce the same entries, hence the same snapshot bytes, Kafka would.
The same state machine drives the LSO computation (:mod:`rlm.log.lso`) and the writer's
``.txnindex`` and snapshots (:mod:`rlm.log.writer`).

Rules (``ProducerAppendInfo``/``ProducerStateEntry`` with origin REPLICATION, i.e. without
sequence validation): a data batch with producer id >= 0 sets the producer's epoch (a new
epoch drops the retained batch metadata), records (last sequence, last offset, offset delta,
max timestamp) and, if transactional with no open transaction, opens one at its base offset.
A non-empty control batch carrying COMMIT/ABORT sets epoch, coordinator epoch and timestamp
and closes the open transaction; an ABORT of a non-empty transaction is recorded with the
LSO right after it (``ProducerStateManager.lastStableOffset``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from rlm.errors import LogFormatError
from rlm.log._fileio import read_bytes
from rlm.log._scan import read_entry, scan_batches
from rlm.log.partition import PartitionDir
from rlm.log.producer_snapshot import ProducerSnapshotEntry, encode_snapshot, parse_snapshot, read_snapshot
from rlm.log.records import BatchHeader, ControlRecordType, decode_control_records
from rlm.log.txn_index import AbortedTxn

NUM_BATCHES_TO_RETAIN = 5
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _BatchMeta:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int


@dataclass(slots=True)
class ProducerState:
    """One producer's mutable state (Kafka's ``ProducerStateEntry``)."""

    producer_id: int
    producer_epoch: int = -1
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[_BatchMeta] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def to_snapshot_entry(self) -> ProducerSnapshotEntry:
        last = self.batches[-1] if self.batches else None
        return ProducerSnapshotEntry(
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            last_sequence=last.last_seq if last else -1, last_offset=last.last_offset if last else -1,
            offset_delta=last.offset_delta if last else 0, timestamp=self.last_timestamp,
            coordinator_epoch=self.coordinator_epoch,
            current_txn_first_offset=(-1 if self.current_txn_first_offset is None
                                      else self.current_txn_first_offset))

    @classmethod
    def from_snapshot_entry(cls, e: ProducerSnapshotEntry) -> ProducerState:
        s = cls(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.timestamp,
                e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None)
        if e.last_offset >= 0:
            s.batches.append(_BatchMeta(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp))
        return s


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateTracker:
    """Producers, open transactions and completed ones, fed batch by batch in offset order."""

    def __init__(self, entries: Iterable[ProducerSnapshotEntry] = (), *, map_end_offset: int = 0) -> None:
        self.producers: dict[int, ProducerState] = {}
        self.ongoing: dict[int, int] = {}  # first offset -> producer id
        self.completed: list[CompletedTxn] = []
        self.aborted: list[AbortedTxn] = []
        self.map_end_offset = map_end_offset
        for e in entries:
            st = ProducerState.from_snapshot_entry(e)
            self.producers[e.producer_id] = st
            if st.current_txn_first_offset is not None:
                self.ongoing[st.current_txn_first_offset] = e.producer_id

    def append(self, header: BatchHeader, marker: tuple[ControlRecordType | int, int, int] | None = None
               ) -> CompletedTxn | None:
        """Apply one batch. ``marker`` = (control type, coordinator epoch, record timestamp) of a
        control batch's first record, None for a data batch or an empty control batch."""
        completed = None
        if header.magic >= 2 and header.producer_id >= 0:
            st = self.producers.get(header.producer_id)
            if st is None:
                st = self.producers[header.producer_id] = ProducerState(header.producer_id)
            if header.is_control:
                if marker is not None and marker[0] in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    completed = self._end_txn(st, header, marker)
            else:
                st._set_epoch(header.producer_epoch)
                st.batches.append(_BatchMeta(header.last_sequence, header.last_offset,
                                             header.last_offset_delta, header.max_timestamp))
                st.last_timestamp = header.max_timestamp
                if header.is_transactional and st.current_txn_first_offset is None:
                    st.current_txn_first_offset = header.base_offset
                    self.ongoing[header.base_offset] = header.producer_id
        self.map_end_offset = header.last_offset + 1
        return completed

    def _end_txn(self, st: ProducerState, header: BatchHeader,
                 marker: tuple[ControlRecordType | int, int, int]) -> CompletedTxn | None:
        kind, coordinator_epoch, timestamp = marker
        completed = None
        if st.current_txn_first_offset is not None:
            completed = CompletedTxn(st.producer_id, st.current_txn_first_offset, header.base_offset,
                                     kind == ControlRecordType.ABORT)
        st._set_epoch(header.producer_epoch)
        st.coordinator_epoch = coordinator_epoch
        st.last_timestamp = timestamp
        st.current_txn_first_offset = None
        if completed is not None:
            if completed.is_aborted:
                lso = self.last_stable_offset_after(completed)
                self.aborted.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                               completed.last_offset, lso))
            self.ongoing.pop(completed.first_offset, None)
            self.completed.append(completed)
        return completed

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """``ProducerStateManager.lastStableOffset``: first offset of the earliest transaction of
        another producer still open, else the marker offset + 1."""
        others = [first for first, pid in self.ongoing.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def first_undecided_offset(self) -> int | None:
        return min(self.ongoing) if self.ongoing else None

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return {pid: first for first, pid in sorted(self.ongoing.items())}

    def snapshot_entries(self) -> list[ProducerSnapshotEntry]:
        """Entries in the order producers were first seen (see ``encode_snapshot`` for file order)."""
        return [st.to_snapshot_entry() for st in self.producers.values()]

    def snapshot_bytes(self) -> bytes:
        return encode_snapshot(self.snapshot_entries())


def control_marker(path: str | Path, header: BatchHeader) -> tuple[ControlRecordType | int, int, int] | None:
    """(type, coordinator epoch, timestamp) of a control batch's first record, or None if empty."""
    if header.records_count == 0:
        return None
    records = decode_control_records(read_entry(path, header), path=str(path), position=header.position)
    if not records:
        return None
    r = records[0]
    return r.type, r.coordinator_epoch if r.coordinator_epoch is not None else -1, r.timestamp


def _load_snapshot(partition: PartitionDir,
                   below_or_at: int) -> tuple[int, list[ProducerSnapshotEntry]] | None:
    """The newest readable snapshot at or below the offset; corrupt ones are skipped, as Kafka does."""
    for off in reversed([o for o in partition.snapshot_offsets if o <= below_or_at]):
        try:
            return off, read_snapshot(partition.snapshot_path(off))
        except LogFormatError as e:  # corrupt (SnapshotFormatError) or deleted meanwhile
            log.warning("producer_snapshot_skipped", partition=str(partition.topic_partition), offset=off,
                        error=str(e))
            continue
    return None


def feed(tracker: ProducerStateTracker, partition: PartitionDir, start: int, end: int) -> None:
    """Apply every batch with offsets in [start, end) to ``tracker``. ``start`` and ``end`` must be
    batch boundaries (segment bases, snapshot offsets, the log end offset)."""
    for seg in partition.segments:
        nxt = partition.next_segment(seg)
        if nxt is not None and nxt.base_offset <= start:
            continue
        if seg.base_offset >= end:
            break
        pos = 0
        if seg.base_offset < start:
            pos = partition.verified_position(seg, partition.offset_index(seg).lookup(start - 1))
        for h in scan_batches(seg.log_path, start_position=pos):
            if h.last_offset < start:
                continue
            if h.base_offset >= end:
                return
            if h.base_offset < start or h.last_offset >= end:
                raise LogFormatError(f"offset range [{start}, {end}) splits the batch "
                                     f"[{h.base_offset}, {h.last_offset}]", path=str(seg.log_path),
                                     position=h.position)
            tracker.append(h, control_marker(seg.log_path, h) if h.is_control else None)


def rebuild_producer_state(partition: PartitionDir, offset: int, *, use_snapshots: bool = True,
                           start_offset: int | None = None) -> ProducerStateTracker:
    """Producer state after every record below ``offset`` (what ``<offset>.snapshot`` holds).

    Starts from the newest readable snapshot at or below ``offset`` (unless ``use_snapshots``
    is false), else from ``start_offset`` or the first segment's base offset.
    """
    loaded = _load_snapshot(partition, offset) if use_snapshots else None
    if loaded is not None:
        start, entries = loaded
        tracker = ProducerStateTracker(entries, map_end_offset=start)
    else:
        start = start_offset if start_offset is not None else (partition.log_start_offset or 0)
        tracker = ProducerStateTracker(map_end_offset=start)
    if start < offset:
        feed(tracker, partition, start, offset)
    tracker.map_end_offset = offset
    return tracker


def snapshot_bytes_at(partition: PartitionDir, offset: int) -> bytes:
    """The ``<offset>.snapshot`` file content: the broker's own file if it still exists (read
    and CRC-checked), otherwise rebuilt from the log."""
    path = partition.snapshot_path(offset)
    try:
        data = read_bytes(path)
        parse_snapshot(data, path=path)
        return data
    except LogFormatError:
        pass
    return rebuild_producer_state(partition, offset).snapshot_bytes()
