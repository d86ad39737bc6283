"""Remote retention for one led partition (Kafka's ``RLMExpirationTask``).

Per run: (1) COPY_SEGMENT_STARTED segments nobody is copying are undone (this node's own, left by
a crash, at once; another node's when older than ``stale_copy_grace_ms``, an age that wall-clock
jumps cannot change, see :class:`StaleCopyWatch`); (2) DELETE_SEGMENT_STARTED segments are
deleted again; (3) finished segments off the current epoch lineage that no read needs are
quarantined and deleted only after ``off_lineage_grace_ms`` (:mod:`rlm.daemon.quarantine`; the
lineage and the verdict come from :mod:`rlm.lineage`, shared with the read core); (4) lineage
segments past ``retention.ms`` or beyond ``retention.bytes`` (remote + not-yet-tiered local
bytes) are deleted oldest first, stopping at the first one kept, and the remote log start
advances past them; quarantined segments past retention or below that start go with them.
A ``compact`` topic (without ``delete``) keeps its lineage segments whatever their age or size, as
the broker keeps its log: only compaction replaces a compacted history, retention never shortens it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from rlm.config import ResolvedTopicConfig
from rlm.daemon.compacted import is_compact_only
from rlm.daemon.context import EpochHistory, TaskContext, now_ms
from rlm.daemon.local_log import LocalLogView
from rlm.daemon.log_start import LogStartKeeper
from rlm.daemon.quarantine import OffLineageQuarantine, Quarantined
from rlm.daemon.remote_ops import delete_remote_segment
from rlm.lineage import LineageVerdict, finished_only, judge_segments
from rlm.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

log = structlog.get_logger(__name__)
S = RemoteLogSegmentState


@dataclass
class ExpiryResult:
    deleted: int = 0
    remote_start: int = -1
    remote_end: int = -1
    remote_bytes: int = 0
    remote_segments: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    retention_moved_start: bool = False
    log_start: int = -1


def coverage_gaps(kept: list[RemoteLogSegmentMetadata], local_start: int) -> list[tuple[int, int]]:
    """Offset ranges ``[first, last]`` missing from the remote log: holes between finished lineage
    segments, and the range between the remote end and the local start (deleted locally before it
    was copied). Derived from the metadata store on every run, so it survives restarts; ranges
    drop out as remote retention deletes the segments around them.
    """
    gaps: list[tuple[int, int]] = []
    covered = -1
    for md in sorted(kept, key=lambda m: m.start_offset):
        if covered >= 0 and md.start_offset > covered + 1:
            gaps.append((covered + 1, md.start_offset - 1))
        covered = max(covered, md.end_offset)
    if covered >= 0 and local_start > covered + 1:
        gaps.append((covered + 1, local_start - 1))
    return gaps


class StaleCopyWatch:
    """When another node's COPY_SEGMENT_STARTED counts as abandoned: when its age exceeds
    ``stale_copy_grace_ms``, the age being read from the wall clock *once*, when this process
    first sees the record, and advanced by the monotonic clock from then on.

    Why: judged by the wall clock on every run, a forward jump of ours (NTP step, VM resume)
    would make a copy still uploading look abandoned and delete it, and a backward jump would
    keep an orphan for as long as the jump. With the age fixed at first sight, a jump while the
    daemon runs changes nothing; a record stamped in our future (the other node's clock ahead)
    counts as new, so it is cleaned up at most one grace period after first sight. A record
    already long abandoned at first sight (a ``--once`` pass, a restart) is cleaned up at once.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._first_seen: dict[RemoteLogSegmentId, tuple[float, int]] = {}  # monotonic s, age ms

    def abandoned(self, md: RemoteLogSegmentMetadata, grace_ms: int, wall_now_ms: int) -> bool:
        now = self._clock()
        seen, age_then = self._first_seen.setdefault(
            md.remote_log_segment_id, (now, max(0, wall_now_ms - md.event_timestamp_ms))
        )
        return age_then + (now - seen) * 1000 > grace_ms

    def watching(self) -> set[RemoteLogSegmentId]:
        """The other nodes' COPY_SEGMENT_STARTED segments being aged now."""
        return set(self._first_seen)

    def keep_only(self, tp: TopicIdPartition, started: set[RemoteLogSegmentId]) -> None:
        """Forget ``tp``'s segments that are no longer COPY_SEGMENT_STARTED."""
        for sid in [s for s in self._first_seen if s.topic_id_partition == tp and s not in started]:
            del self._first_seen[sid]


class RemoteExpirer:
    def __init__(self, ctx: TaskContext, history: EpochHistory) -> None:
        self.ctx = ctx
        self.history = history
        self.stale = StaleCopyWatch()
        self.quarantine = OffLineageQuarantine(ctx.work_dir)
        self.log_start = LogStartKeeper(ctx)

    def run(
        self, tp: TopicIdPartition, view: LocalLogView, lso: int, cfg: ResolvedTopicConfig
    ) -> ExpiryResult:
        ctx = self.ctx
        res = ExpiryResult()
        segments = list(ctx.rlmm.list_remote_log_segments(tp))
        now = now_ms()
        with ctx.in_flight_lock:
            in_flight = set(ctx.in_flight)
        self.stale.keep_only(
            tp, {m.remote_log_segment_id for m in segments if m.state is S.COPY_SEGMENT_STARTED}
        )
        for md in segments:
            if ctx.stop.is_set():
                return res
            if md.state is S.COPY_SEGMENT_STARTED and md.remote_log_segment_id not in in_flight:
                mine = md.broker_id == ctx.node_id
                if mine or self.stale.abandoned(md, ctx.config.stale_copy_grace_ms, now):
                    log.warning(
                        "stale_copy_cleanup",
                        topic=tp.topic,
                        partition=tp.partition,
                        segment_id=md.remote_log_segment_id.id.text,
                        broker_id=md.broker_id,
                    )
                    delete_remote_segment(ctx, md, "stale_copy")
                    res.deleted += 1
            elif md.state is S.DELETE_SEGMENT_STARTED:
                delete_remote_segment(ctx, md, "retry_delete")
                res.deleted += 1
        finished = finished_only(segments)
        active = view.active
        leo = max(active.base_offset if active else 0, lso)
        verdict = judge_segments(finished, self.history.merge(tp, view.epochs, finished, leo))
        due, held = self.quarantine.review(
            tp, list(verdict.off_lineage), ctx.config.off_lineage_grace_ms, now
        )
        for md in due:
            if ctx.stop.is_set():
                return res
            log.warning(
                "segment_off_lineage",
                topic=tp.topic,
                partition=tp.partition,
                segment_id=md.remote_log_segment_id.id.text,
                start_offset=md.start_offset,
                end_offset=md.end_offset,
                epochs=[list(e) for e in md.segment_leader_epochs],
                lineage=[list(e) for e in verdict.lineage],
            )
            delete_remote_segment(ctx, md, "off_lineage")
            res.deleted += 1
        kept = sorted(verdict.kept, key=lambda m: (m.start_offset, m.end_offset))
        # Kafka's log-start breach (DeleteRecords): publish the bound, delete what lies wholly below
        res.deleted += self.log_start.enforce(tp, view, kept)
        res.log_start = ctx.status.partition(tp.topic, tp.partition).log_start
        res.deleted += self._retention(tp, view, kept, cfg, now, res)
        res.deleted += self._expire_quarantined(tp, held, verdict, cfg, now, res)
        labels = (tp.topic, str(tp.partition))
        ctx.metrics.quarantined_segments.labels(*labels).set(len(res.quarantined))
        ctx.status.partition(tp.topic, tp.partition).quarantined = [q.as_list() for q in res.quarantined]
        if due:
            self.quarantine.release(tp, {m.remote_log_segment_id for m in due})
        return res

    def _expire_quarantined(
        self,
        tp: TopicIdPartition,
        held: list[Quarantined],
        verdict: LineageVerdict,
        cfg: ResolvedTopicConfig,
        now: int,
        res: ExpiryResult,
    ) -> int:
        """Retention applies to quarantined segments too: past ``retention.ms``, wholly below the
        partition's log start (DeleteRecords), or wholly below the remote log start once retention
        has moved it past them, they go without waiting."""
        by_id = {m.remote_log_segment_id.id.text: m for m in verdict.off_lineage}
        gone: set[RemoteLogSegmentId] = set()
        for q in held:
            md = by_id[q.segment_id]
            reason = None
            if cfg.retention_ms > -1 and md.max_timestamp_ms <= now - cfg.retention_ms:
                reason = "retention_ms"
            elif md.end_offset < res.log_start:
                reason = "log_start"
            elif res.retention_moved_start and md.end_offset < res.remote_start:
                reason = "below_log_start"
            if reason is None or self.ctx.stop.is_set():
                res.quarantined.append(q)
                continue
            delete_remote_segment(self.ctx, md, reason)
            gone.add(md.remote_log_segment_id)
        if gone:
            self.quarantine.release(tp, gone)
        return len(gone)

    def _retention(
        self,
        tp: TopicIdPartition,
        view: LocalLogView,
        finished: list[RemoteLogSegmentMetadata],
        cfg: ResolvedTopicConfig,
        now: int,
        res: ExpiryResult,
    ) -> int:
        remote_bytes = sum(m.segment_size_in_bytes for m in finished)
        highest = max((m.end_offset for m in finished), default=-1)
        local_only = sum(s.size for s in view.segments if s.base_offset > highest)
        remaining = remote_bytes + local_only - cfg.retention_bytes if cfg.retention_bytes > -1 else 0
        deleted = 0
        kept = list(finished)
        keep_all = is_compact_only(cfg.cleanup_policy)
        for md in finished:
            if keep_all or self.ctx.stop.is_set():
                break
            reason = None
            if cfg.retention_ms > -1 and md.max_timestamp_ms <= now - cfg.retention_ms:
                reason = "retention_ms"
            elif remaining > 0 and remaining - md.segment_size_in_bytes >= 0:
                reason = "retention_bytes"
            if reason is None:
                break
            if reason == "retention_bytes" or remaining > 0:
                remaining -= md.segment_size_in_bytes
            res.remote_start = max(res.remote_start, md.end_offset + 1)
            res.retention_moved_start = True
            delete_remote_segment(self.ctx, md, reason)
            kept.remove(md)
            deleted += 1
        if kept:
            res.remote_start = kept[0].start_offset
        res.remote_end = max((m.end_offset for m in kept), default=-1)
        res.remote_bytes = sum(m.segment_size_in_bytes for m in kept)
        res.remote_segments = len(kept)
        res.gaps = coverage_gaps(kept, view.local_start_offset)
        return deleted
