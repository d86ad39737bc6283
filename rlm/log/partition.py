"""Read-only model of a broker's log dir and partition directories: what tiering a segment needs.

A partition directory ``<topic>-<partition>`` holds segments named by their 20-digit base
offset (``.log`` plus ``.index``/``.timeindex``/``.txnindex``), producer snapshots
``<offset>.snapshot``, ``leader-epoch-checkpoint`` and ``partition.metadata``. Files with an
extra suffix (``.deleted``, ``.cleaned``, ``.swap``) are the broker's work in progress and are
ignored, as are ``-delete``/``-future``/``-stray`` directories. The segment with the largest
base offset is the active one; only the others are complete. Nothing here writes, and a file
that vanishes mid-read raises :class:`~rlm.errors.LogFileGoneError`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from rlm.errors import LogFileGoneError
from rlm.log import checkpoints as ckpt
from rlm.log._fileio import SEGMENT_FILE_RE, segment_file_name
from rlm.log._scan import header_at, scan_batches
from rlm.log.checkpoints import EpochEntry
from rlm.log.offset_index import OffsetIndex, OffsetPosition, read_offset_index
from rlm.log.records import BatchHeader
from rlm.log.time_index import TimeIndex, TimestampOffset, read_time_index
from rlm.log.txn_index import AbortedTxn, read_txn_index
from rlm.types import KafkaUuid, TopicPartition

_SPECIAL_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)-(delete|future|stray)$")
_NO_TIMESTAMP = -1
_EMPTY = np.zeros(0, dtype=np.int64)


def parse_partition_dir_name(name: str) -> tuple[TopicPartition, str | None]:
    """``<topic>-<partition>`` (split at the last ``-``) and the rename suffix if any
    (``delete``/``future``/``stray``), as ``UnifiedLog.parseTopicPartitionName``."""
    suffix = None
    m = _SPECIAL_DIR.match(name)
    if m:
        suffix = m.group(4)
        name = name[:name.rindex(".")]
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not re.fullmatch(r"[0-9]+", part) or int(part) > 2**31 - 1:
        raise ValueError(f"not a partition directory name: {name!r}")
    return TopicPartition(topic, int(part)), suffix


@dataclass(frozen=True, slots=True)
class Segment:
    """The files of one segment (any of them may vanish at any time)."""

    dir: Path
    base_offset: int

    def file(self, suffix: str) -> Path:
        return self.dir / segment_file_name(self.base_offset, suffix)

    @property
    def log_path(self) -> Path:
        return self.file("log")

    @property
    def index_path(self) -> Path:
        return self.file("index")

    @property
    def time_index_path(self) -> Path:
        return self.file("timeindex")

    @property
    def txn_index_path(self) -> Path:
        return self.file("txnindex")

    def size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError as e:
            raise LogFileGoneError("segment file does not exist", path=self.log_path, position=0) from e


class PartitionDir:
    """One partition directory, listed once at construction (call :meth:`refresh` to re-list)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.topic_partition, self.suffix = parse_partition_dir_name(self.path.name)
        self.segments: list[Segment] = []
        self.snapshot_offsets: list[int] = []
        self.refresh()

    def __repr__(self) -> str:
        return f"PartitionDir({str(self.path)!r}, segments={len(self.segments)})"

    def refresh(self) -> None:
        logs, snaps = [], []
        try:
            names = os.listdir(self.path)
        except FileNotFoundError as e:
            raise LogFileGoneError("partition directory does not exist", path=self.path, position=0) from e
        for name in names:
            m = SEGMENT_FILE_RE.match(name)
            if m and m.group(2) == "log":
                logs.append(int(m.group(1)))
            elif m and m.group(2) == "snapshot":
                snaps.append(int(m.group(1)))
        self.segments = [Segment(self.path, b) for b in sorted(logs)]
        self.snapshot_offsets = sorted(snaps)

    # ---- metadata files ----------------------------------------------------------------------
    @property
    def topic_id(self) -> KafkaUuid:
        return ckpt.read_partition_metadata(self.path / ckpt.PARTITION_METADATA)

    def leader_epochs(self) -> list[EpochEntry]:
        """``leader-epoch-checkpoint`` entries (empty if the file does not exist)."""
        try:
            return ckpt.read_leader_epoch_checkpoint(self.path / ckpt.LEADER_EPOCH_CHECKPOINT)
        except LogFileGoneError:
            return []

    def epochs_for_range(self, start: int, end: int) -> list[tuple[int, int]]:
        """Leader epochs covering offsets [start, end) as ``[(epoch, first_offset)]``.

        ``LeaderEpochFileCache.epochEntriesInRange``, what RLM stores as a remote segment's
        leader epochs (``end`` = next segment's base offset): entries starting at or before
        ``start`` collapse into one starting at ``start``; entries starting at or after ``end``
        are dropped.
        """
        entries = self.leader_epochs()
        before = [e for e in entries if e.start_offset <= start]
        out = [(before[-1].epoch, start)] if before and start >= 0 else []
        out += [(e.epoch, e.start_offset) for e in entries if e.start_offset > start]
        while out and end >= 0 and out[-1][1] >= end:
            out.pop()
        return out

    # ---- segments ----------------------------------------------------------------------------
    @property
    def active_segment(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def inactive_segments(self) -> list[Segment]:
        return self.segments[:-1]

    def is_active(self, segment: Segment) -> bool:
        return bool(self.segments) and segment.base_offset == self.segments[-1].base_offset

    def segment_for(self, offset: int) -> Segment | None:
        """The segment with the largest base offset <= ``offset``."""
        found = None
        for s in self.segments:
            if s.base_offset > offset:
                break
            found = s
        return found

    def next_segment(self, segment: Segment) -> Segment | None:
        later = [s for s in self.segments if s.base_offset > segment.base_offset]
        return later[0] if later else None

    def offset_index(self, segment: Segment) -> OffsetIndex:
        """The segment's offset index (empty if the lazily created file does not exist yet)."""
        try:
            return read_offset_index(segment.index_path, segment.base_offset,
                                     stale_tail_ok=self.is_active(segment))
        except LogFileGoneError:
            if not segment.log_path.exists():
                raise
            return OffsetIndex(segment.base_offset, _EMPTY, _EMPTY, str(segment.index_path))

    def time_index(self, segment: Segment) -> TimeIndex:
        try:
            return read_time_index(segment.time_index_path, segment.base_offset,
                                   stale_tail_ok=self.is_active(segment))
        except LogFileGoneError:
            if not segment.log_path.exists():
                raise
            return TimeIndex(segment.base_offset, _EMPTY, _EMPTY, str(segment.time_index_path))

    def aborted_transactions(self, segment: Segment) -> list[AbortedTxn]:
        """The segment's ``.txnindex`` entries (none if the file does not exist)."""
        if not segment.txn_index_path.exists():
            return []
        try:
            return read_txn_index(segment.txn_index_path, segment.base_offset)
        except LogFileGoneError:
            return []

    def verified_position(self, segment: Segment, entry: OffsetPosition) -> int:
        """``entry.position`` if the batch there really ends at ``entry.offset``, else 0.

        Index files of the active segment may hold stale entries; one header read tells.
        """
        if entry.position == 0:
            return 0
        h = header_at(segment.log_path, entry.position)
        return entry.position if h is not None and h.last_offset == entry.offset else 0

    def last_batch(self, segment: Segment) -> BatchHeader | None:
        """The segment's last complete batch (scanning from the last offset-index entry)."""
        index = self.offset_index(segment)
        start = self.verified_position(segment, index.lookup(index.last_offset)) if len(index) else 0
        last = None
        for h in scan_batches(segment.log_path, start_position=start):
            last = h
        return last

    def last_offset(self, segment: Segment) -> int | None:
        """Offset of the segment's last record (its last batch's last offset); None if empty."""
        h = self.last_batch(segment)
        return h.last_offset if h is not None else None

    def next_offset(self, segment: Segment) -> int:
        """First offset after the segment: the next segment's base, or the log end offset."""
        nxt = self.next_segment(segment)
        if nxt is not None:
            return nxt.base_offset
        h = self.last_batch(segment)
        return h.next_offset if h is not None else segment.base_offset

    @property
    def log_start_offset(self) -> int | None:
        """First segment's base offset (the log-dir checkpoint may say more; see :class:`LogDir`)."""
        return self.segments[0].base_offset if self.segments else None

    def log_end_offset(self) -> int:
        active = self.active_segment
        return self.next_offset(active) if active is not None else 0

    def max_timestamp(self, segment: Segment) -> TimestampOffset:
        """Largest record timestamp in the segment and the last offset of the earliest batch
        holding it; ``(-1, base_offset)`` if no batch has a timestamp.

        For a rolled segment this is the time index's last (roll) entry, checked against the
        batch it names; otherwise (active segment, missing or inconsistent index) the batches
        after the last trustworthy entry are scanned, as ``LogSegment.readLargestTimestamp``.
        """
        tindex = self.time_index(segment)
        last = tindex.last_entry
        start = 0
        if len(tindex):
            oindex = self.offset_index(segment)
            pos = self.verified_position(segment, oindex.lookup(last.offset))
            batch = next((h for h in scan_batches(segment.log_path, start_position=pos)
                          if h.last_offset >= last.offset), None)
            consistent = batch is not None and (batch.last_offset, batch.max_timestamp) == (last.offset,
                                                                                            last.timestamp)
            if consistent:
                if not self.is_active(segment):
                    return last
                start = pos
            else:
                last = TimestampOffset(_NO_TIMESTAMP, segment.base_offset)
        best = last
        for h in scan_batches(segment.log_path, start_position=start):
            if h.max_timestamp > best.timestamp:
                best = TimestampOffset(h.max_timestamp, h.last_offset)
        return best

    # ---- producer snapshots ----------------------------------------------------------------
    def snapshot_path(self, offset: int) -> Path:
        return self.path / segment_file_name(offset, "snapshot")

    def snapshot_for_segment(self, segment: Segment) -> Path | None:
        """``<next offset>.snapshot``: the producer state after the segment, if the broker kept it."""
        nxt = self.next_segment(segment)
        offset = nxt.base_offset if nxt is not None else self.next_offset(segment)
        p = self.snapshot_path(offset)
        return p if p.exists() else None

    def latest_snapshot_at_or_below(self, offset: int) -> int | None:
        found = [o for o in self.snapshot_offsets if o <= offset and self.snapshot_path(o).exists()]
        return found[-1] if found else None


class LogDir:
    """One ``log.dirs`` entry: ``meta.properties``, the offset checkpoints, partition dirs."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @cached_property
    def meta_properties(self) -> ckpt.MetaProperties:
        return ckpt.read_meta_properties(self.path / ckpt.META_PROPERTIES)

    @property
    def had_clean_shutdown(self) -> bool:
        return ckpt.has_clean_shutdown(self.path)

    def partitions(self) -> list[PartitionDir]:
        """Live partition directories (``-delete``/``-future``/``-stray`` ones are skipped)."""
        out = []
        for entry in sorted(os.scandir(self.path), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            try:
                _tp, suffix = parse_partition_dir_name(entry.name)
            except ValueError:
                continue
            if suffix is None:
                try:
                    out.append(PartitionDir(entry.path))
                except LogFileGoneError:
                    continue
        return out

    def partition(self, tp: TopicPartition) -> PartitionDir:
        return PartitionDir(self.path / str(tp))

    def checkpoint(self, name: str) -> dict[TopicPartition, int]:
        """One of the log-dir offset checkpoints (missing file: empty)."""
        return ckpt.read_offset_checkpoint(self.path / name)

    def high_watermark(self, tp: TopicPartition) -> int | None:
        """HW from ``replication-offset-checkpoint`` (None if the file does not exist; a missing
        entry means 0, as in ``LogManager``). Up to 5 s stale, so it errs low, which is safe."""
        path = self.path / ckpt.REPLICATION_OFFSET_CHECKPOINT
        if not path.exists():
            return None
        return ckpt.read_offset_checkpoint(path).get(tp, 0)

    def log_start_offset(self, partition: PartitionDir) -> int | None:
        """Max of the first segment's base offset and the ``log-start-offset-checkpoint`` entry."""
        base = partition.log_start_offset
        if base is None:
            return None
        checkpointed = self.checkpoint(ckpt.LOG_START_OFFSET_CHECKPOINT).get(partition.topic_partition, base)
        return max(base, checkpointed)

