"""Write partition directories the way a Kafka broker does, for tests, the demo and benchmarks.

:class:`PartitionWriter` plays the leader's append path (``UnifiedLog.append`` →
``LogSegment.append``): it assigns offsets and the leader epoch, rolls segments by size and
time (``LogSegment.shouldRoll``), adds ``.index``/``.timeindex`` entries per batch every
``index.interval.bytes`` (as ``LogSegment.recover`` would rebuild them), writes the roll entry
of the time index and trims both indexes when a segment becomes inactive, appends aborted
transactions to ``.txnindex`` with the LSO of that moment, writes a producer snapshot at every
roll (and at the log end on a clean close), ``leader-epoch-checkpoint`` and
``partition.metadata``. The active segment is not modelled as preallocated: its indexes are
written trimmed, as the broker leaves them after a clean shutdown.

:func:`write_log_dir_files` adds what the log dir root needs (``meta.properties``, offset
checkpoints, ``.kafka_cleanshutdown``). A broker started on the result trusts every file
(clean shutdown, no recovery), which is how tests prove the files are right.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rlm.log import checkpoints as ckpt
from rlm.log._fileio import SEGMENT_FILE_RE, segment_file_name
from rlm.log.checkpoints import EpochEntry
from rlm.log.encode import encode_batch, encode_control_batch
from rlm.log.offset_index import encode_offset_index
from rlm.log.producer_state import ProducerStateTracker
from rlm.log.records import BatchHeader, Compression, ControlRecordType, Record, TimestampType, iter_batches
from rlm.log.time_index import encode_time_index
from rlm.log.txn_index import AbortedTxn, encode_txn_index
from rlm.types import KafkaUuid, TopicPartition

INT32_MAX = 2**31 - 1
RecordLike = Record | tuple[object, ...]


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``<path>.tmp``, fsync, rename over ``path`` (how Kafka writes its small files)."""
    tmp = Path(f"{path}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Topic settings that shape the files (Kafka's names and defaults)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME


@dataclass
class _Segment:
    base_offset: int
    file: BinaryIO
    created_ms: int
    size: int = 0
    index: list[tuple[int, int]] = field(default_factory=list)
    time_index: list[tuple[int, int]] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)
    bytes_since_index: int = 0
    max_ts: int = -1
    offset_of_max_ts: int = -1
    rolling_ts: int | None = None

    def maybe_append_time_entry(self) -> None:
        last_ts = self.time_index[-1][0] if self.time_index else -1
        if self.max_ts > last_ts:
            self.time_index.append((self.max_ts, self.offset_of_max_ts))


def _normalise(record: RecordLike, now: int) -> Record | tuple[Any, Any, Any, int]:
    if isinstance(record, Record):
        return record
    key, value, *rest = record
    headers = rest[0] if rest else ()
    ts = rest[1] if len(rest) > 1 and rest[1] is not None else now
    return key, value, headers, int(ts)  # type: ignore[call-overload]


class PartitionWriter:
    """Appends batches to a new partition directory; call :meth:`close` to finish the files."""

    def __init__(self, directory: str | Path, *, topic_id: KafkaUuid, config: WriterConfig | None = None,
                 leader_epoch: int = 0, start_offset: int = 0,
                 clock: Callable[[], int] | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        if any(SEGMENT_FILE_RE.match(n) for n in os.listdir(self.dir)):
            raise FileExistsError(f"{self.dir} already holds segment files")
        self.config = config or WriterConfig()
        self.topic_id = topic_id
        self.leader_epoch = leader_epoch
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.next_offset = start_offset
        self.epochs: list[EpochEntry] = []
        self.producers = ProducerStateTracker(map_end_offset=start_offset)
        self._sequences: dict[int, tuple[int, int]] = {}
        self._last_snapshot = start_offset
        self._closed = False
        atomic_write(self.dir / ckpt.PARTITION_METADATA, ckpt.encode_partition_metadata(topic_id))
        atomic_write(self.dir / ckpt.LEADER_EPOCH_CHECKPOINT, ckpt.encode_leader_epoch_checkpoint([]))
        self.segments: list[int] = []
        self._seg = self._open_segment(start_offset)

    # ---- public API ----------------------------------------------------------------------------
    def append(self, records: Sequence[RecordLike], *, compression: Compression = Compression.NONE,
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int | None = None,
               transactional: bool = False, now: int | None = None) -> BatchHeader:
        """Append one data batch. Records are :class:`Record` or ``(key, value[, headers[, ts]])``;
        a missing timestamp is ``now``. For an idempotent or transactional producer
        (``producer_id >= 0``) the base sequence continues the producer's own unless given."""
        now = self.clock() if now is None else now
        items = [_normalise(r, now) for r in records]
        if producer_id >= 0 and base_sequence is None:
            epoch, nxt = self._sequences.get(producer_id, (producer_epoch, 0))
            base_sequence = nxt if epoch == producer_epoch else 0
        seq = -1 if base_sequence is None else base_sequence
        log_append = self.config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
        data = encode_batch(items, base_offset=self.next_offset, partition_leader_epoch=self.leader_epoch,
                            compression=compression, timestamp_type=self.config.message_timestamp_type,
                            log_append_time=now if log_append else None, producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=seq, is_transactional=transactional)
        header = self._append(data, now, None)
        if producer_id >= 0:
            self._sequences[producer_id] = (producer_epoch, (seq + len(items)) & INT32_MAX)
        return header

    def end_transaction(self, producer_id: int, producer_epoch: int, *, commit: bool,
                        coordinator_epoch: int = 0, now: int | None = None) -> BatchHeader:
        """Append the COMMIT or ABORT marker of ``producer_id``'s open transaction."""
        now = self.clock() if now is None else now
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        data = encode_control_batch(offset=self.next_offset, producer_id=producer_id,
                                    producer_epoch=producer_epoch, control_type=kind,
                                    coordinator_epoch=coordinator_epoch, timestamp=now,
                                    partition_leader_epoch=self.leader_epoch)
        return self._append(data, now, (kind, coordinator_epoch, now))

    def commit(self, producer_id: int, producer_epoch: int, *, coordinator_epoch: int = 0,
               now: int | None = None) -> BatchHeader:
        return self.end_transaction(producer_id, producer_epoch, commit=True,
                                    coordinator_epoch=coordinator_epoch, now=now)

    def abort(self, producer_id: int, producer_epoch: int, *, coordinator_epoch: int = 0,
              now: int | None = None) -> BatchHeader:
        return self.end_transaction(producer_id, producer_epoch, commit=False,
                                    coordinator_epoch=coordinator_epoch, now=now)

    def append_encoded(self, batch: bytes, *, now: int | None = None) -> BatchHeader:
        """Append a ready-made v2 batch (e.g. an empty batch left by compaction); its base offset
        and leader epoch are overwritten (both are outside the CRC, as the broker does)."""
        if len(batch) < 61 or batch[16] != 2:
            raise ValueError("append_encoded takes one magic-2 batch")
        patched = bytearray(batch)
        patched[0:8] = self.next_offset.to_bytes(8, "big", signed=True)
        patched[12:16] = self.leader_epoch.to_bytes(4, "big", signed=True)
        return self._append(bytes(patched), self.clock() if now is None else now, None)

    def append_at_own_offsets(self, batch: bytes, *, now: int | None = None) -> BatchHeader:
        """Append one encoded batch unchanged, at its own base offset, which may leave a gap after
        the log end (a log cleaner's output does: records it removed leave holes in the offsets).
        Producer state records it as a data batch; transaction ends are not tracked, so a caller
        copying markers writes the segment's ``.txnindex`` itself."""
        header = next(iter_batches(batch, verify_crc=False))
        if header.base_offset < self.next_offset:
            raise ValueError(f"batch at offset {header.base_offset} is below the log end {self.next_offset}")
        return self._append(batch, self.clock() if now is None else now, None)

    def set_leader_epoch(self, epoch: int) -> None:
        """Later batches carry ``epoch`` (a leader change); it must not go backwards."""
        if epoch < self.leader_epoch:
            raise ValueError(f"leader epoch {epoch} is below the current {self.leader_epoch}")
        self.leader_epoch = epoch

    def roll(self, now: int | None = None) -> None:
        """Close the active segment and start a new one at the next offset (if it holds data)."""
        if self._seg.size > 0:
            self._roll(self.clock() if now is None else now)

    def close(self, *, clean: bool = True) -> None:
        """Finish the active segment like ``LogSegment.close`` (roll entry, trimmed indexes); with
        ``clean``, also the producer snapshot at the log end (``UnifiedLog.close``)."""
        if self._closed:
            return
        self._finish_segment(self._seg)
        if clean and self.next_offset > self._last_snapshot:
            self._write_snapshot(self.next_offset)
        self._write_epochs()
        self._closed = True

    def __enter__(self) -> PartitionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def log_end_offset(self) -> int:
        return self.next_offset

    # ---- internals -----------------------------------------------------------------------------
    def _open_segment(self, base_offset: int) -> _Segment:
        f = open(self.dir / segment_file_name(base_offset, "log"), "xb")  # noqa: SIM115 - closed in _finish
        self.segments.append(base_offset)
        return _Segment(base_offset, f, self.clock(), offset_of_max_ts=base_offset)

    def _should_roll(self, seg: _Segment, header: BatchHeader, now: int) -> bool:
        if seg.size == 0:
            return False
        ts = seg.rolling_ts if seg.rolling_ts is not None else -1
        waited = header.max_timestamp - ts if ts >= 0 else now - seg.created_ms
        max_entries = self.config.segment_index_bytes // 8
        max_time_entries = self.config.segment_index_bytes // 12
        return (seg.size > self.config.segment_bytes - header.size or waited > self.config.segment_ms
                or len(seg.index) >= max_entries or len(seg.time_index) >= max_time_entries - 1
                or header.last_offset - seg.base_offset > INT32_MAX)

    def _append(self, data: bytes, now: int,
                marker: tuple[ControlRecordType, int, int] | None) -> BatchHeader:
        if self._closed:
            raise ValueError("writer is closed")
        header = next(iter_batches(data, verify_crc=False))
        if self._should_roll(self._seg, header, now):
            self._roll(now)
        seg = self._seg
        if not self.epochs or self.leader_epoch > self.epochs[-1].epoch:
            self.epochs.append(EpochEntry(self.leader_epoch, header.base_offset))
            self._write_epochs()
        position = seg.size
        if position == 0:
            seg.rolling_ts = header.max_timestamp
        if header.max_timestamp > seg.max_ts:
            seg.max_ts, seg.offset_of_max_ts = header.max_timestamp, header.last_offset
        if seg.bytes_since_index > self.config.index_interval_bytes:
            seg.index.append((header.last_offset, position))
            seg.maybe_append_time_entry()
            seg.bytes_since_index = 0
        seg.bytes_since_index += len(data)
        seg.file.write(data)
        seg.size += len(data)
        self.next_offset = header.last_offset + 1
        before = len(self.producers.aborted)
        self.producers.append(header, marker)
        seg.aborted += self.producers.aborted[before:]
        return header

    def _roll(self, now: int) -> None:
        self._finish_segment(self._seg)
        self._seg = self._open_segment(self.next_offset)
        self._seg.created_ms = now
        self._write_snapshot(self.next_offset)

    def _finish_segment(self, seg: _Segment) -> None:
        """``onBecomeInactiveSegment``: roll entry, trimmed indexes, closed log."""
        seg.maybe_append_time_entry()
        seg.file.flush()
        os.fsync(seg.file.fileno())
        seg.file.close()
        base = seg.base_offset
        atomic_write(self.dir / segment_file_name(base, "index"), encode_offset_index(seg.index, base))
        atomic_write(self.dir / segment_file_name(base, "timeindex"), encode_time_index(seg.time_index, base))
        if seg.aborted:
            atomic_write(self.dir / segment_file_name(base, "txnindex"), encode_txn_index(seg.aborted))

    def _write_snapshot(self, offset: int) -> None:
        self.producers.map_end_offset = offset
        atomic_write(self.dir / segment_file_name(offset, "snapshot"), self.producers.snapshot_bytes())
        self._last_snapshot = offset

    def _write_epochs(self) -> None:
        data = ckpt.encode_leader_epoch_checkpoint(self.epochs)
        atomic_write(self.dir / ckpt.LEADER_EPOCH_CHECKPOINT, data)


def merge_offset_checkpoint(path: str | Path, updates: Mapping[TopicPartition, int]) -> None:
    """Set entries of a log-dir offset checkpoint, keeping the others (missing file: created)."""
    offsets = ckpt.read_offset_checkpoint(path)
    offsets.update(updates)
    atomic_write(path, ckpt.encode_offset_checkpoint(offsets))


def write_log_dir_files(log_dir: str | Path, partitions: Iterable[tuple[TopicPartition, int]], *,
                        meta: ckpt.MetaProperties | None = None, clean_shutdown: bool = True,
                        broker_epoch: int = -1) -> None:
    """Log-dir root files for partitions written with :class:`PartitionWriter`:
    (partition, log end offset) pairs become the recovery point and the high watermark.

    ``meta`` writes ``meta.properties`` (leave None when the broker's own is there). With
    ``clean_shutdown`` the broker will load every file as is, without recovery.
    """
    root = Path(log_dir)
    root.mkdir(parents=True, exist_ok=True)
    if meta is not None:
        atomic_write(root / ckpt.META_PROPERTIES, ckpt.encode_meta_properties(meta))
    ends = dict(partitions)
    merge_offset_checkpoint(root / ckpt.RECOVERY_POINT_CHECKPOINT, ends)
    merge_offset_checkpoint(root / ckpt.REPLICATION_OFFSET_CHECKPOINT, ends)
    for name in (ckpt.LOG_START_OFFSET_CHECKPOINT, ckpt.CLEANER_OFFSET_CHECKPOINT):
        merge_offset_checkpoint(root / name, {})
    marker = root / ckpt.CLEAN_SHUTDOWN
    if clean_shutdown and not marker.exists():  # keep a stopped broker's own marker (its broker epoch)
        atomic_write(marker, ckpt.encode_clean_shutdown(broker_epoch))
    elif marker.exists():
        marker.unlink()
