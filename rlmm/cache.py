"""In-memory remote log metadata with Kafka's exact semantics, compact enough for millions of segments.

Mirrors ``RemoteLogMetadataCache`` + ``RemoteLogLeaderEpochState`` + ``RemotePartitionMetadataStore``
(Apache Kafka, storage module): which segments :meth:`remote_log_segment_metadata` can see
(COPY_SEGMENT_FINISHED only, floor lookup per epoch then the epoch's end inside the segment),
how a newer overlapping upload replaces older ones, how DELETE_SEGMENT_STARTED hides a segment
from reads but keeps it listed, and that DELETE_SEGMENT_FINISHED forgets it.

Two entry points for events: :meth:`validate` raises a typed error without changing anything
(writers call it before writing), :meth:`apply` applies an event read back from the log and,
like Kafka's consumer, logs and drops an invalid one instead of raising.

Deliberate differences from Kafka, all invisible to Kafka's own API: the partition-deletion
state is validated with ``RemotePartitionDeleteState.is_valid_transition`` and kept after
DELETE_PARTITION_FINISHED (the segments are dropped) so :meth:`remote_partition_delete_state`
can answer; unknown partitions read as empty instead of raising; and per-epoch listings are
always sorted by start offset (Kafka skips the sort when the epoch has no unreferenced ids,
which breaks its own documented order when a segment's epoch begins after the segment does).

Thread-safe: every public method holds one re-entrant lock; iterators run over a copy.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import numpy as np
import structlog

from rlm.errors import InvalidStateTransitionError, RemoteLogMetadataError, RemoteLogSegmentNotFoundError
from rlm.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm import _partition
from rlmm._partition import PartitionState
from rlmm._segment_table import Col, RowsView
from rlmm.serde import RemoteLogMetadata, RemoteLogSegmentMetadataSnapshot

log = structlog.get_logger(__name__)

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


def _iter_view(view: RowsView) -> Iterator[RemoteLogSegmentMetadata]:
    for i in range(len(view)):
        yield view.metadata(i)


class RemoteLogMetadataCache:
    """All user partitions' segment metadata and deletion states."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._parts: dict[TopicIdPartition, PartitionState] = {}
        self._deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    # ---- validation ----------------------------------------------------------------------------------
    def _segment_row(self, sid: RemoteLogSegmentId) -> tuple[PartitionState | None, int]:
        p = self._parts.get(sid.topic_id_partition)
        if p is None:
            return None, -1
        return p, p.table.find(sid.id.raw)

    def _check(self, md: RemoteLogMetadata) -> tuple[PartitionState | None, int]:
        """Raises if ``md`` is invalid; else returns the segment's partition state and row (-1 if new)."""
        p: PartitionState | None = None
        row = -1
        if isinstance(md, RemoteLogSegmentMetadata):
            if md.state is not _STARTED:
                raise InvalidStateTransitionError(
                    f"a new segment must be in state COPY_SEGMENT_STARTED, got {md.state.name}: "
                    f"{md.remote_log_segment_id}")
            p, row = self._segment_row(md.remote_log_segment_id)
            if p is not None and row >= 0 and p.table.state(row) != _STARTED:
                current = RemoteLogSegmentState(p.table.state(row))
                raise InvalidStateTransitionError(
                    f"segment {md.remote_log_segment_id} is {current.name}; it cannot go back to "
                    "COPY_SEGMENT_STARTED")
        elif isinstance(md, RemoteLogSegmentMetadataUpdate):
            if md.state is _STARTED:
                raise InvalidStateTransitionError(
                    f"an update cannot set COPY_SEGMENT_STARTED (use add): {md.remote_log_segment_id}")
            p, row = self._segment_row(md.remote_log_segment_id)
            if p is None or row < 0:
                raise RemoteLogSegmentNotFoundError(
                    f"no remote log segment metadata found for {md.remote_log_segment_id}")
            current = RemoteLogSegmentState(p.table.state(row))
            if not RemoteLogSegmentState.is_valid_transition(current, md.state):
                raise InvalidStateTransitionError(
                    f"segment {md.remote_log_segment_id}: {current.name} cannot be transitioned to "
                    f"{md.state.name}")
        elif isinstance(md, RemotePartitionDeleteMetadata):
            existing = self._deletes.get(md.topic_id_partition)
            cur_state = existing.state if existing is not None else None
            if not RemotePartitionDeleteState.is_valid_transition(cur_state, md.state):
                raise InvalidStateTransitionError(
                    f"partition {md.topic_id_partition}: {cur_state.name if cur_state else 'none'} cannot be "
                    f"transitioned to {md.state.name}")
        elif isinstance(md, RemoteLogSegmentMetadataSnapshot):
            raise RemoteLogMetadataError("RemoteLogSegmentMetadataSnapshot records carry no partition and "
                                         "are not metadata log events")
        else:
            raise TypeError(f"not a remote log metadata value: {type(md).__name__}")
        return p, row

    def validate(self, md: RemoteLogMetadata) -> None:
        """Raises InvalidStateTransitionError / RemoteLogSegmentNotFoundError if ``md`` would be
        dropped by :meth:`apply`; changes nothing."""
        with self._lock:
            self._check(md)

    # ---- applying ----------------------------------------------------------------------------------
    def apply(self, md: RemoteLogMetadata) -> bool:
        """Applies an event; an invalid one is logged and dropped (False), as Kafka's consumer does."""
        with self._lock:
            try:
                p, row = self._check(md)
            except RemoteLogSegmentNotFoundError as e:
                log.warning("rlmm_event_dropped", reason="unknown_segment", detail=str(e))
                return False
            except RemoteLogMetadataError as e:
                log.error("rlmm_event_dropped", reason=type(e).__name__, detail=str(e))
                return False
            if isinstance(md, RemoteLogSegmentMetadata):
                self._add_segment(md, p, row)
            elif isinstance(md, RemoteLogSegmentMetadataUpdate):
                assert p is not None
                self._update_segment(md, p, row)
            elif isinstance(md, RemotePartitionDeleteMetadata):
                self._deletes[md.topic_id_partition] = md
                if md.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                    self._parts.pop(md.topic_id_partition, None)
            return True

    def _add_segment(self, md: RemoteLogSegmentMetadata, p: PartitionState | None, row: int) -> None:
        if p is None:
            tp = md.topic_id_partition
            p = self._parts[tp] = PartitionState(tp)
        if row >= 0:  # an idempotent re-add while still COPY_SEGMENT_STARTED replaces the metadata
            p.table.write_row(row, md)
        else:
            row = p.table.append(md)
        for epoch, _ in md.segment_leader_epochs:
            p.epoch(epoch).unref.add(row)

    def _update_segment(self, u: RemoteLogSegmentMetadataUpdate, p: PartitionState, row: int) -> None:
        t = p.table
        epochs = t.epochs(row)
        if u.state is _FINISHED:
            for epoch, start in epochs:
                p.epoch(epoch).on_copy_finished(start, row, t.epoch_end(row, epoch))
        elif u.state is _DELETE_STARTED:
            for epoch, start in epochs:
                p.epoch(epoch).on_delete_started(start, row)
        elif u.state is _DELETE_FINISHED:
            for epoch, _ in epochs:
                p.epoch(epoch).unref.discard(row)
            t.kill(row)
            p.maybe_compact()
            return
        # Kafka's createWithUpdates: state, broker, event time and custom metadata come from the update
        t.update(row, int(u.state), u.broker_id, u.event_timestamp_ms, u.custom_metadata)

    # ---- queries ------------------------------------------------------------------------------------
    def remote_log_segment_metadata(self, tp: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            p = self._parts.get(tp)
            es = p.epochs.get(leader_epoch) if p is not None else None
            if p is None or es is None:
                return None
            row = es.floor(offset)
            if row < 0 or offset > p.table.epoch_end(row, leader_epoch):
                return None
            return p.table.metadata(tp, row)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        with self._lock:
            p = self._parts.get(tp)
            es = p.epochs.get(leader_epoch) if p is not None else None
            return es.highest if es is not None else None

    def _epoch_rows(self, p: PartitionState, leader_epoch: int) -> Col | None:
        es = p.epochs.get(leader_epoch)
        if es is None:
            return None
        rows = es.referenced()
        if es.unref:
            rows = np.concatenate([rows, np.array(sorted(es.unref), dtype=np.int32)])
        # Kafka sorts only when there are unreferenced ids, assuming the epoch-start key order is
        # start-offset order; it is not when a segment's epoch starts after its start offset.
        # Sorting always keeps Kafka's documented contract (and its order whenever it holds).
        return rows[np.argsort(p.table.c["start"][rows], kind="stable")]

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        """All but DELETE_SEGMENT_FINISHED, by start offset; with an epoch, Kafka's per-epoch listing."""
        with self._lock:
            p = self._parts.get(tp)
            if p is None:
                return iter(())
            if leader_epoch is None:
                rows = p.table.live_rows()
                rows = rows[np.argsort(p.table.c["start"][rows], kind="stable")]
            else:
                epoch_rows = self._epoch_rows(p, leader_epoch)
                if epoch_rows is None:
                    return iter(())
                rows = epoch_rows
            return _iter_view(p.table.view(tp, rows))

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        with self._lock:
            p = self._parts.get(tp)
            rows = self._epoch_rows(p, leader_epoch) if p is not None else None
            if p is None or rows is None:
                return 0
            return int(p.table.c["size"][rows].astype(np.int64).sum())

    def segment_metadata(self, sid: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        """The segment's current metadata in any state but DELETE_SEGMENT_FINISHED."""
        with self._lock:
            p, row = self._segment_row(sid)
            if p is None or row < 0:
                return None
            return p.table.metadata(sid.topic_id_partition, row)

    def remote_partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        with self._lock:
            md = self._deletes.get(tp)
            return md.state if md is not None else None

    def partitions(self) -> set[TopicIdPartition]:
        """Partitions with segments or a deletion state."""
        with self._lock:
            return set(self._parts) | set(self._deletes)

    def segment_count(self, tp: TopicIdPartition | None = None) -> int:
        with self._lock:
            if tp is not None:
                p = self._parts.get(tp)
                return p.table.live if p is not None else 0
            return sum(p.table.live for p in self._parts.values())

    def drop_partition(self, tp: TopicIdPartition) -> None:
        """Forgets everything about ``tp`` (e.g. it is no longer managed here)."""
        with self._lock:
            self._parts.pop(tp, None)
            self._deletes.pop(tp, None)

    def nbytes(self) -> int:
        """Bytes held in the numpy columns and indexes (excludes small per-object overheads)."""
        with self._lock:
            total = 0
            for p in self._parts.values():
                total += p.table.nbytes()
                total += sum(es.keys.nbytes + es.rows.nbytes for es in p.epochs.values())
            return total

    # ---- snapshots ----------------------------------------------------------------------------------
    def to_snapshot_bytes(self, tps: Iterable[TopicIdPartition] | None = None) -> bytes:
        """A versioned, CRC-checked image of ``tps`` (default: all partitions) for fast restart."""
        with self._lock:
            chosen = sorted(self.partitions() if tps is None else set(tps))
            return _partition.encode((tp, self._parts.get(tp), self._deletes.get(tp)) for tp in chosen)

    def load_snapshot_bytes(self, data: bytes) -> list[TopicIdPartition]:
        """Replaces the state of the partitions in the snapshot; returns them.

        Raises :class:`~rlm.errors.MetadataDecodeError` (and changes nothing) if the snapshot is
        corrupt or of an unknown format, so the caller can fall back to replaying the log.
        """
        decoded = _partition.decode(data)
        with self._lock:
            for tp, p, delete in decoded:
                self._parts.pop(tp, None)
                self._deletes.pop(tp, None)
                if p is not None:
                    self._parts[tp] = p
                if delete is not None:
                    self._deletes[tp] = delete
            return [tp for tp, _, _ in decoded]
