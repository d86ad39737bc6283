"""Copy eligible segments of one led partition to remote storage (Kafka's ``RLMCopyTask``).

Eligible: a rolled (not active) segment whose last offset is below the LSO and which is not
already covered on the current epoch lineage. The resume point is found by walking the epoch
history backwards (``lineage.find_highest_remote_offset``). Each copy follows the protocol
COPY_SEGMENT_STARTED → RSM copy → COPY_SEGMENT_FINISHED with a fresh segment id; a failed RSM
copy is undone (DELETE_SEGMENT_STARTED → RSM delete → DELETE_SEGMENT_FINISHED) and the error is
re-raised so the scheduler retries the partition with backoff (and a new id).

Compacted topics (:mod:`rlm.daemon.compacted`): a ``compact`` topic's segments are eligible only
wholly below the broker cleaner's checkpoint too; a segment the cleaner rewrote so that it straddles
the remote end is copied from the remote end on, never whole (a tiered range is never copied again);
a copied segment's remote ``.txnindex`` also names the aborted transactions whose data it holds and
whose ABORT marker is still local (:mod:`rlm.daemon.aborts_ahead`: the cleaner may drop that entry
before the marker's segment is tiered).
"""

from __future__ import annotations

from pathlib import Path

import structlog

from rlm.config import ResolvedTopicConfig
from rlm.daemon.aborts_ahead import aborts_ahead, remote_txn_index
from rlm.daemon.compacted import (
    RewriteGuard,
    TailSegment,
    cleaner_checkpoint,
    is_compact_only,
    is_compacted,
    swap_in_progress,
    write_tail_segment,
)
from rlm.daemon.context import EpochHistory, TaskContext, now_ms
from rlm.daemon.local_log import LocalLogView, LocalSegment
from rlm.daemon.producer_snapshot import producer_snapshot_for
from rlm.daemon.remote_ops import CustomMetadataTooLargeError as CustomMetadataTooLargeError  # re-exported
from rlm.daemon.remote_ops import LeadershipLostError as LeadershipLostError  # (the copy protocol's)
from rlm.daemon.remote_ops import publish_segment
from rlm.errors import LogFormatError
from rlm.lineage import checkpoint_bytes, epochs_for_range, find_highest_remote_offset
from rlm.log.txn_index import AbortedTxn
from rlm.types import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

log = structlog.get_logger(__name__)


def uncopied_offsets(candidates: list[LocalSegment], from_offset: int) -> int:
    """The copy lag: offsets in eligible (rolled, below the LSO) segments not yet in remote storage.

    The active segment and anything at or above the LSO never count: they cannot be copied yet.
    """
    return sum(
        s.next_offset - max(s.base_offset, from_offset) for s in candidates if s.next_offset is not None
    )


class SegmentCopier:
    """Copies the eligible segments of one partition per :meth:`run`."""

    def __init__(self, ctx: TaskContext, history: EpochHistory) -> None:
        self.ctx = ctx
        self.history = history
        self._gap_reported: dict[TopicIdPartition, int] = {}

    def run(self, tp: TopicIdPartition, view: LocalLogView, lso: int, topic_cfg: ResolvedTopicConfig) -> int:
        """Copy what is eligible now, oldest first; returns the number of segments copied."""
        if is_compacted(topic_cfg.cleanup_policy) and swap_in_progress(view.dir):
            log.debug("cleaner_swap_in_progress", topic=tp.topic, partition=tp.partition)
            return 0  # the next pass sees the cleaner's result
        ctx = self.ctx
        st = ctx.status.partition(tp.topic, tp.partition)
        labels = (tp.topic, str(tp.partition))
        active = view.active
        leo = max(active.base_offset if active else 0, lso)
        epochs = self.history.merge(tp, view.epochs, ctx.rlmm.list_remote_log_segments(tp), leo)
        copied, _ = find_highest_remote_offset(
            epochs, leo, lambda e: ctx.meta(ctx.rlmm.highest_offset_for_epoch(tp, e))
        )
        self._check_gap(tp, view, copied)
        from_offset = max(copied + 1, view.local_start_offset)
        limit = lso
        if is_compact_only(topic_cfg.cleanup_policy):  # what the broker's cleaner has finished with
            limit = min(lso, cleaner_checkpoint(view.dir, view.topic_partition) or 0)
        candidates = [
            s
            for s in view.rolled
            if s.next_offset is not None and s.next_offset > from_offset and s.next_offset <= limit
        ]
        st.copy_lag = uncopied_offsets(candidates, from_offset)
        ctx.metrics.copy_lag_offsets.labels(*labels).set(st.copy_lag)
        ctx.metrics.copy_lag_segments.labels(*labels).set(len(candidates))
        self._check_lag_vs_local_retention(tp, candidates, topic_cfg)
        if tp in ctx.copy_disabled or lso <= 0 or copied >= lso - 1:
            return 0
        done = 0
        compacted = is_compacted(topic_cfg.cleanup_policy)
        for seg in candidates:
            if ctx.stop.is_set():
                break
            # only a compacted topic's cleaner moves segment boundaries under the remote end
            start = from_offset if compacted and seg.base_offset < from_offset else None
            if not self.copy_segment(tp, view, seg, epochs, from_offset=start, compacted=compacted):
                break
            done += 1
            st.remote_end = max(st.remote_end, seg.end_offset)
            st.copy_lag = uncopied_offsets(candidates[done:], from_offset)
            ctx.metrics.copy_lag_offsets.labels(*labels).set(st.copy_lag)
            ctx.metrics.copy_lag_segments.labels(*labels).set(len(candidates) - done)
        return done

    def _check_gap(self, tp: TopicIdPartition, view: LocalLogView, copied: int) -> None:
        """Loud error + metric when offsets between the remote end and the local start were never copied."""
        if copied < 0 or copied + 1 >= view.local_start_offset:
            return
        missing_from = copied + 1
        if self._gap_reported.get(tp) == missing_from:
            return
        self._gap_reported[tp] = missing_from
        n = view.local_start_offset - missing_from
        labels = (tp.topic, str(tp.partition))
        self.ctx.metrics.gap_segments.labels(*labels).inc()
        self.ctx.metrics.gap_offsets.labels(*labels).inc(n)
        log.error(
            "remote_copy_gap",
            topic=tp.topic,
            partition=tp.partition,
            first_missing_offset=missing_from,
            local_start_offset=view.local_start_offset,
            missing_offsets=n,
            hint="local retention deleted segments before they were copied; raise local.retention.* "
            "or the copy rate",
        )

    def _check_lag_vs_local_retention(
        self, tp: TopicIdPartition, candidates: list[LocalSegment], topic_cfg: ResolvedTopicConfig
    ) -> None:
        labels = (tp.topic, str(tp.partition))
        limit = topic_cfg.local_retention_ms
        near = 0
        if candidates and limit > 0:
            try:
                oldest_mtime_ms = int(candidates[0].log_path.stat().st_mtime * 1000)
            except FileNotFoundError:
                oldest_mtime_ms = now_ms()
            age = now_ms() - oldest_mtime_ms
            if age >= limit * self.ctx.config.copy_lag_warn_ratio:
                near = 1
                log.warning(
                    "remote_copy_lag_near_local_retention",
                    topic=tp.topic,
                    partition=tp.partition,
                    oldest_uncopied_offset=candidates[0].base_offset,
                    age_ms=age,
                    local_retention_ms=limit,
                )
        self.ctx.metrics.copy_lag_near_retention.labels(*labels).set(near)

    def copy_segment(
        self,
        tp: TopicIdPartition,
        view: LocalLogView,
        seg: LocalSegment,
        epochs: list[tuple[int, int]],
        *,
        from_offset: int | None = None,
        compacted: bool = False,
    ) -> bool:
        """One segment through the copy protocol. False = stopped (quota wait interrupted).

        With ``from_offset`` (a cleaned segment straddling the remote end) only its batches from
        that offset on are copied, as a segment of their own written in the staging dir. For a
        ``compacted`` topic the files must stay the view's segment until the upload is done (the
        broker's cleaner swaps rewritten segments in), else the copy is undone.
        """
        ctx = self.ctx
        assert seg.next_offset is not None
        if not ctx.quota.acquire(seg.size, ctx.stop):
            return False
        guard = RewriteGuard.take(seg) if compacted else None
        ahead = aborts_ahead(view.dir, seg.next_offset) if compacted else []
        tail: TailSegment | None = None
        if from_offset is not None:
            if view.topic_id is None:
                raise LogFormatError("no topic id to write a segment's tail with", path=view.dir)
            tail = write_tail_segment(seg, from_offset, ctx.staging_dir(tp), view.topic_id)
            log.info(
                "cleaned_segment_tail_copy",
                topic=tp.topic,
                partition=tp.partition,
                local_base_offset=seg.base_offset,
                from_offset=from_offset,
                end_offset=seg.end_offset,
                reason="the broker's cleaner merged tiered offsets into this segment",
            )
        try:
            return self._copy(tp, view, seg, epochs, tail, guard, ahead)
        finally:
            if tail is not None:
                tail.remove()

    def _copy(
        self,
        tp: TopicIdPartition,
        view: LocalLogView,
        seg: LocalSegment,
        epochs: list[tuple[int, int]],
        tail: TailSegment | None,
        guard: RewriteGuard | None,
        ahead: list[AbortedTxn],
    ) -> bool:
        ctx = self.ctx
        assert seg.next_offset is not None
        base = tail.base_offset if tail is not None else seg.base_offset
        size = tail.size if tail is not None else seg.size
        files = tail.path if tail is not None else seg.path
        seg_id = RemoteLogSegmentId.generate_new(tp)
        bind = log.bind(topic=tp.topic, partition=tp.partition, base_offset=base, segment_id=seg_id.id.text)
        own_txn = seg.path(".txnindex")
        staged_txn = files(".txnindex") if tail is not None else ctx.staging_dir(tp) / own_txn.name
        txn_path = remote_txn_index(own_txn, seg.base_offset, base, ahead, staged_txn)
        if ahead:
            bind.info("aborts_ahead_indexed",
                      aborted=[[a.producer_id, a.first_offset, a.last_offset] for a in ahead],
                      reason="ABORT markers still local: the cleaner may drop their entries before tiering")
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=seg_id,
            start_offset=base,
            end_offset=seg.end_offset,
            max_timestamp_ms=tail.max_timestamp if tail is not None else seg.max_timestamp(),
            broker_id=ctx.node_id,
            event_timestamp_ms=now_ms(),
            segment_size_in_bytes=size,
            segment_leader_epochs=tuple(epochs_for_range(epochs, base, seg.next_offset)),
            txn_index_empty=txn_path is None,
        )
        snapshot = producer_snapshot_for(view, seg.next_offset, ctx.staging_dir(tp))
        data = LogSegmentData(
            log_segment=files(".log"),
            offset_index=files(".index"),
            time_index=files(".timeindex"),
            transaction_index=txn_path,
            producer_snapshot_index=snapshot,
            leader_epoch_index=checkpoint_bytes(epochs, seg.next_offset),
        )
        try:
            publish_segment(ctx, md, data, check_upload=guard.check if guard is not None else None)
        finally:
            _cleanup_staged(snapshot, view)
            if tail is None and txn_path == staged_txn:
                staged_txn.unlink(missing_ok=True)
        st = ctx.status.partition(tp.topic, tp.partition)
        st.last_copy_ms = now_ms()
        bind.info(
            "segment_copied",
            end_offset=seg.end_offset,
            bytes=size,
            epochs=[list(e) for e in md.segment_leader_epochs],
        )
        return True


def _cleanup_staged(snapshot: Path, view: LocalLogView) -> None:
    if snapshot.parent != view.dir:
        snapshot.unlink(missing_ok=True)
