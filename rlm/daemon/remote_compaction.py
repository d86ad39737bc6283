"""The remote compaction job: a compacted remote segment replaces the segments it was made from.

Per run of a led partition (after the copy task, before expiry; :mod:`rlm.daemon.service`):

1. **Finish half-done replacements** (every tiered topic): FINISHED segments the read chain no
   longer reads because a larger FINISHED segment serves all of their offsets
   (:func:`rlm.lineage.replaced_by`, the one replacement rule) are deleted through the delete
   protocol (reason ``replaced``). A crash between the new segment's FINISHED and the last old
   segment's delete converges here; a new segment left COPY_SEGMENT_STARTED by a crash is undone
   by expiry like any abandoned copy; an old one left DELETE_SEGMENT_STARTED is retried by expiry.
2. **Decide** (``compact`` / ``compact,delete`` topics): the range is the read chain from its
   start, consecutive segments served whole, up to :data:`MAX_INPUT_BYTES`. Its bytes below the
   remote cleaner checkpoint (the largest clean end marked on the chain's compacted segments,
   :mod:`rsm_plugins.compaction_mark`: in the metadata, so any leader resumes from it) are clean,
   the rest dirty; :func:`rlm.compaction.is_due` decides with the topic's
   ``min.cleanable.dirty.ratio`` / ``max.compaction.lag.ms`` (the broker's topic config, as the
   daemon reads the other topic settings). Two segments or more make an output whose range is
   strictly larger than every input's, which is what makes it win in every reader; a lone
   segment's output keeps its range and wins by finishing later
   (:mod:`rlm.daemon.remote_compaction_lone`).
3. **Compact**: the inputs are fetched through the RemoteStorageManager, the newer keys are read
   from the later remote segments and the broker's local log above the range (read only, below
   the LSO), and :func:`rlm.compaction.compact` writes one segment (``min.compaction.lag.ms``
   may stop it early: only the segments it used are replaced).
4. **Replace**: the new segment goes through the copy protocol
   (:func:`rlm.daemon.remote_ops.publish_segment`, the copier's), then each input through the delete
   protocol (:func:`rlm.daemon.remote_ops.delete_remote_segment`).

Named crash points (``RLM_TEST_CRASH_AT``) besides the copy and delete
steps inside: ``compaction_after_compact`` (the output written in staging, nothing published),
``compaction_after_new_finished`` (new FINISHED, every input still FINISHED),
``compaction_after_first_old_deleted`` (one input deleted, the others still FINISHED).
:data:`rlm.daemon.crash.REPLACE_STEPS` lists them.
See ``docs/remote-compaction-job.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from pydantic import ValidationError

from rlm.compaction import CompactionInput, CompactionResult, CompactionSettings, compact, is_due
from rlm.compaction.settings import KAFKA_NAMES
from rlm.config import ResolvedTopicConfig
from rlm.daemon.compacted import is_compacted
from rlm.daemon.compaction_budget import CompactionBudget
from rlm.daemon.compaction_progress import CompactionProgress, RunningCompaction
from rlm.daemon.context import EpochHistory, TaskContext, now_ms
from rlm.daemon.crash import crash_point
from rlm.daemon.local_log import LocalLogView
from rlm.daemon.remote_compaction_inputs import (
    NEWER_KEYS_MEMORY,
    NewerKeysBuilder,
    local_aborted,
    stage_inputs,
)
from rlm.daemon.remote_compaction_lone import LoneSegments, lone_ready
from rlm.daemon.remote_compaction_mark import marked
from rlm.daemon.remote_ops import delete_remote_segment, publish_segment
from rlm.daemon.workdir import writing
from rlm.errors import RlmError
from rlm.lineage import Link, chain, checkpoint_bytes, epochs_for_range, finished_only, judge_segments
from rlm.types import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rsm_plugins.compaction_mark import clean_end_of

log = structlog.get_logger(__name__)

#: at most this many input bytes per compaction (Kafka's default segment.bytes); the rest waits
MAX_INPUT_BYTES = 1024 * 1024 * 1024


class CompactionOutputMismatch(RlmError):
    """The engine's output does not end where its inputs end: nothing is published."""


class InvalidCompactionSettings(RlmError):
    """A topic's compaction configs (``min.cleanable.dirty.ratio``, ...) are not valid values."""


def settings_for(topic: str, cfg: ResolvedTopicConfig) -> CompactionSettings:
    """The topic's compaction settings from its broker configs; a bad value is a typed error naming it."""
    configs = dict(cfg.compaction_configs)
    try:
        return CompactionSettings.from_kafka(configs)
    except ValidationError as e:
        kafka_name = {field: name for name, field in KAFKA_NAMES.items()}
        bad = ", ".join(f"{kafka_name.get(str(err['loc'][0]), err['loc'][0])}={err.get('input')!r}: "
                        f"{err['msg']}" for err in e.errors())
        raise InvalidCompactionSettings(f"topic {topic}: invalid compaction config ({bad})") from None


@dataclass(frozen=True)
class Plan:
    """A due range: ``inputs`` (whole chain links, consecutive) and what made it due."""

    inputs: tuple[RemoteLogSegmentMetadata, ...]
    later: tuple[RemoteLogSegmentMetadata, ...]
    dirty_offset: int
    dirty_bytes: int
    total_bytes: int


def plan_range(links: Sequence[Link], dirty_offset: int, settings: CompactionSettings, now: int,
               max_bytes: int = MAX_INPUT_BYTES) -> Plan | None:
    """The range to compact now, or None (nothing due, or a single segment that finished too
    recently to be replaced by a copy of its range: :mod:`rlm.daemon.remote_compaction_lone`)."""
    inputs: list[RemoteLogSegmentMetadata] = []
    size = 0
    for md, first, last in links:
        whole = first == md.start_offset and last == md.end_offset
        follows = not inputs or md.start_offset == inputs[-1].end_offset + 1
        if not (whole and follows) or (inputs and size + md.segment_size_in_bytes > max_bytes):
            break
        inputs.append(md)
        size += md.segment_size_in_bytes
    if not inputs or (len(inputs) == 1 and not lone_ready(inputs[0], now)):
        return None
    dirty = [md for md in inputs if md.end_offset >= dirty_offset]
    dirty_bytes = sum(md.segment_size_in_bytes for md in dirty)
    oldest = min((md.max_timestamp_ms for md in dirty), default=None)
    if not is_due(settings, dirty_bytes=dirty_bytes, total_bytes=size, oldest_dirty_timestamp=oldest,
                  now_ms=now):
        return None
    later = tuple(md for md, _, _ in links[len(inputs):])
    return Plan(tuple(inputs), later, dirty_offset, dirty_bytes, size)


class RemoteCompactor:
    """Runs the job above for one partition per :meth:`run`."""

    def __init__(self, ctx: TaskContext, history: EpochHistory) -> None:
        self.ctx = ctx
        self.history = history
        self.budget = CompactionBudget(ctx.config.remote_compaction_memory_bytes, ctx.config.thread_pool_size)
        self.progress = CompactionProgress(ctx.status, ctx.metrics, self.budget)
        self.lone = LoneSegments()
        # partitions whose compaction failed with an unexpected error (a bug, not an RlmError):
        # not compacted again until the daemon restarts, as Kafka's cleaner marks a partition
        # uncleanable; copying and retention go on
        self.uncleanable: set[TopicIdPartition] = set()

    def run(self, tp: TopicIdPartition, view: LocalLogView, lso: int, cfg: ResolvedTopicConfig) -> int:
        """Finish half-done replacements, then compact a due range; returns segments replaced."""
        ctx = self.ctx
        finished = finished_only(ctx.rlmm.list_remote_log_segments(tp))
        active = view.active
        leo = max(active.base_offset if active else 0, lso)
        lineage = self.history.merge(tp, view.epochs, finished, leo)
        verdict = judge_segments(finished, lineage)
        for old, by in verdict.replaced:
            if ctx.stop.is_set():
                return 0
            log.info("replacement_finishing", topic=tp.topic, partition=tp.partition,
                     segment_id=old.remote_log_segment_id.id.text,
                     replaced_by=by.remote_log_segment_id.id.text)
            delete_remote_segment(ctx, old, "replaced")
        if (not is_compacted(cfg.cleanup_policy) or ctx.stop.is_set() or tp in ctx.copy_disabled
                or tp in self.uncleanable):
            return 0
        try:
            settings = settings_for(tp.topic, cfg)
            links = chain(verdict.kept, verdict.lineage)[0]
            plan = plan_range(links, clean_end_of(md for md, _, _ in links), settings, now_ms())
            if plan is None or self.lone.skip(tp, plan.inputs):
                return 0
            # the key maps' memory comes from the daemon-wide budget (a smaller map: more passes)
            with self.budget.reserve(settings.offset_map_memory_bytes, NEWER_KEYS_MEMORY) as grant:
                if grant is None:
                    log.info("remote_compaction_waits", topic=tp.topic, partition=tp.partition,
                             reason="remote_compaction_memory_bytes is taken by running compactions")
                    return 0
                with self.progress.running(tp, plan.inputs, grant.offset_map_bytes,
                                           grant.newer_keys_bytes) as running:
                    sized = settings.model_copy(update={"offset_map_memory_bytes": grant.offset_map_bytes})
                    return self._replace(tp, view, lso, plan, sized, lineage, running, grant.newer_keys_bytes)
        except RlmError as e:
            # a compaction that cannot run (bad topic config, an unreadable input, storage down)
            # must not stop copying and retention of the partition: reported, retried next pass
            ctx.metrics.error(e, "compaction")
            (log.warning if e.retriable else log.error)(
                "remote_compaction_failed", topic=tp.topic, partition=tp.partition, error=str(e),
                kind=type(e).__name__, retriable=e.retriable)
            return 0
        except Exception as e:  # a bug in one compaction must not stop the partition's retention
            self.uncleanable.add(tp)
            ctx.metrics.error(e, "compaction")
            log.error("remote_compaction_failed_unexpectedly", topic=tp.topic, partition=tp.partition,
                      error=str(e), kind=type(e).__name__, exc_info=True,
                      action="the partition is not compacted again until the daemon restarts; "
                             "copying and retention go on")
            return 0

    def _replace(self, tp: TopicIdPartition, view: LocalLogView, lso: int, plan: Plan,
                 settings: CompactionSettings, lineage: list[tuple[int, int]], running: RunningCompaction,
                 newer_keys_bytes: int) -> int:
        ctx = self.ctx
        staging = ctx.staging_dir(tp) / "compaction"
        staged = stage_inputs(ctx.rsm, plan.inputs, plan.later, staging)
        staged.aborted.update(local_aborted(view, plan.inputs[0].start_offset, lso))
        try:
            newer = NewerKeysBuilder(tp, plan.inputs[-1].end_offset, lso, newer_keys_bytes)
            newer.add_remote(ctx.rsm, plan.later)
            newer.add_local(view)
            with writing(staging):
                result = compact(
                    CompactionInput(staged.logs, sorted(staged.aborted, key=lambda a: a.first_offset),
                                    newer_keys=newer.keys, dirty_offset=plan.dirty_offset,
                                    upper_bound=plan.inputs[-1].end_offset + 1),
                    staging / "out", settings, now_ms=now_ms(), progress=running.engine,
                )  # the daemon's clock, as plan_range's: min.compaction.lag.ms and delete horizons agree
            used = plan.inputs[: result.segments_used]
            if not used or result.files is None:
                log.info("remote_compaction_waits", topic=tp.topic, partition=tp.partition,
                         segments_cleanable=result.segments_used,
                         reason="min.compaction.lag.ms holds back every segment")
                return 0
            if len(used) == 1 and not self.lone.publishes(tp, used[0], result, now_ms()):
                return 0  # a copy of the same range must finish later and differ in size
            if result.base_offset != used[0].start_offset or result.end_offset != used[-1].end_offset + 1:
                raise CompactionOutputMismatch(
                    f"{tp}: compacted [{result.base_offset}, {result.end_offset}) but the inputs cover "
                    f"[{used[0].start_offset}, {used[-1].end_offset + 1})")
            crash_point("compaction_after_compact")
            running.phase("publish")
            new = self._publish(tp, used, result, staged.producer_snapshot, lineage)
            crash_point("compaction_after_new_finished")
            running.phase("delete")
            for i, old in enumerate(used):
                delete_remote_segment(ctx, old, "replaced")
                if i == 0:
                    crash_point("compaction_after_first_old_deleted")
        finally:
            staged.remove()
        self._account(tp, used, new, result)
        return len(used)

    def _publish(self, tp: TopicIdPartition, used: Sequence[RemoteLogSegmentMetadata],
                 result: CompactionResult,
                 snapshot: Path, lineage: list[tuple[int, int]]) -> RemoteLogSegmentMetadata:
        files = result.files
        assert files is not None
        start, end = used[0].start_offset, used[-1].end_offset
        max_ts = files.max_timestamp if files.max_timestamp >= 0 else max(m.max_timestamp_ms for m in used)
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate_new(tp),
            start_offset=start,
            end_offset=end,
            max_timestamp_ms=max_ts,
            broker_id=self.ctx.node_id,
            event_timestamp_ms=now_ms(),
            segment_size_in_bytes=files.size,
            segment_leader_epochs=tuple(epochs_for_range(lineage, start, end + 1)),
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            txn_index_empty=files.txn_index is None,
        )
        data = LogSegmentData(
            log_segment=files.log,
            offset_index=files.offset_index,
            time_index=files.time_index,
            transaction_index=files.txn_index,
            producer_snapshot_index=snapshot,
            leader_epoch_index=checkpoint_bytes(lineage, end + 1),
        )
        budget = self.ctx.config.custom_metadata_max_bytes  # the mark is the checkpoint (module docstring)
        publish_segment(self.ctx, md, data, mark=lambda custom: marked(custom, end + 1, budget))
        return md

    def _account(self, tp: TopicIdPartition, used: Sequence[RemoteLogSegmentMetadata],
                 new: RemoteLogSegmentMetadata, result: CompactionResult) -> None:
        ctx = self.ctx
        labels = (tp.topic, str(tp.partition))
        before = sum(m.segment_size_in_bytes for m in used)
        removed = result.records_read - result.records_kept
        ctx.metrics.compactions.labels(*labels).inc()
        ctx.metrics.compaction_bytes_before.labels(*labels).inc(before)
        ctx.metrics.compaction_bytes_after.labels(*labels).inc(new.segment_size_in_bytes)
        ctx.metrics.compaction_records_removed.labels(*labels).inc(removed)
        st = ctx.status.partition(tp.topic, tp.partition)
        st.compaction = {
            "last_ms": now_ms(),
            "start_offset": new.start_offset,
            "end_offset": new.end_offset,
            "segments_replaced": len(used),
            "bytes_before": before,
            "bytes_after": new.segment_size_in_bytes,
            "records_removed": removed,
            "dirty_offset": new.end_offset + 1,
        }
        log.info("remote_compaction_replaced", topic=tp.topic, partition=tp.partition,
                 segment_id=new.remote_log_segment_id.id.text, start_offset=new.start_offset,
                 end_offset=new.end_offset, replaced=[m.remote_log_segment_id.id.text for m in used],
                 bytes_before=before, bytes_after=new.segment_size_in_bytes, records_removed=removed,
                 passes=result.passes)
