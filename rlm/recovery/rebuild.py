"""The metadata store rebuilt from the bucket alone: a plan per partition, then its writes.

:func:`build_plans` describes every partition's segments from the bucket
(:mod:`rlm.recovery.rebuild_scan`) and keeps or skips each by the leader-epoch lineage the read
core derives (:func:`rlm.lineage.judge_segments`; a remote compaction's inputs whose objects a
crash left behind are skipped as replaced by the compacted segment, never resurrected);
:func:`apply_plan` writes the kept ones as the daemon writes a copy, idempotently.
``rlm metadata rebuild`` (:mod:`rlm.commands.metadata_rebuild`) prints and runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rlm.daemon.crash import crash_point
from rlm.daemon.probes import PROBE_TOPIC
from rlm.errors import RlmError
from rlm.lineage import chain, judge_segments, lineage_from_segments, lineage_last_offset
from rlm.recovery.rebuild_scan import FoundSegment, Unusable, scan_partition
from rlm.recovery.segment_writes import STARTED, existing_segments, write_finished
from rlm.types import (
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from rlmm.api import RemoteLogMetadataManager
from rsm_plugins.api import RemoteStorageManager


class RebuildConflictError(RlmError):
    """The metadata store already holds segments of the partition that the bucket's plan does not
    (or holds them with other offsets or epochs): rebuild writes only into an empty store."""


@dataclass
class PartitionPlan:
    """What rebuild does for one partition."""

    tp: TopicIdPartition
    lineage: list[tuple[int, int]]
    keep: list[FoundSegment] = field(default_factory=list)
    skip: list[tuple[FoundSegment, str]] = field(default_factory=list)
    unusable: list[Unusable] = field(default_factory=list)
    released: list[Unusable] = field(default_factory=list)
    """Objects this topic id released to its adopters (:mod:`rlm.daemon.shared_objects`)."""
    unread: set[str] = field(default_factory=set)
    """Kept segments no reader's chain reads (duplicates of a range another copy serves)."""
    written: int = 0
    already: int = 0
    refused: str | None = None


def plan_partition(
    found: list[FoundSegment], unusable: list[Unusable], tp: TopicIdPartition
) -> PartitionPlan:
    """Keep or skip each segment by the lineage the read core derives from remote metadata."""
    mds = [f.metadata for f in found]
    lineage = lineage_from_segments(mds)
    verdict = judge_segments(mds, lineage)
    kept_ids = {md.remote_log_segment_id for md in verdict.kept}
    replaced = {old.remote_log_segment_id: by for old, by in verdict.replaced}
    read = {md.remote_log_segment_id for md, _, _ in chain(verdict.kept, lineage)[0]}
    plan = PartitionPlan(tp, lineage, unusable=list(unusable))
    for f in found:
        md = f.metadata
        if md.remote_log_segment_id in kept_ids:
            plan.keep.append(f)
            if md.remote_log_segment_id not in read:
                plan.unread.add(md.remote_log_segment_id.id.text)
        elif (by := replaced.get(md.remote_log_segment_id)) is not None:
            # a crash after a remote compaction's new segment, before its inputs' objects went
            plan.skip.append((f, f"replaced by the compacted segment {by.remote_log_segment_id.id.text} "
                                 f"covering [{by.start_offset}, {by.end_offset}]"))
        else:
            agree = lineage_last_offset(md, lineage)
            plan.skip.append((f, f"off the leader-epoch lineage from offset {agree + 1} (epochs "
                                 f"{list(md.segment_leader_epochs)} diverge from {lineage}) and read "
                                 "by no chain: the tail of a deposed leader"))
    return plan


def _same(a: RemoteLogSegmentMetadata, b: RemoteLogSegmentMetadata) -> bool:
    return (a.start_offset, a.end_offset, a.segment_leader_epochs) == (
        b.start_offset, b.end_offset, b.segment_leader_epochs)


def apply_plan(rlmm: RemoteLogMetadataManager, plan: PartitionPlan) -> None:
    """Write the kept segments (STARTED then FINISHED), skipping those already there.

    Raises :class:`RebuildConflictError` before writing anything when the store holds segments
    of the partition the plan does not, or in a state other than COPY_SEGMENT_STARTED/FINISHED.
    """
    tp = plan.tp
    existing = existing_segments(
        rlmm, tp, [f.metadata for f in plan.keep], _same, lambda held, planned: RebuildConflictError(
            f"{tp.topic}-{tp.partition}: the metadata store already holds {held} that the bucket's "
            f"plan {'has differently' if planned else 'does not have'}; rebuild writes only into an "
            "empty store (or completes its own earlier run)"))
    for f in plan.keep:
        md = f.metadata
        started = replace(md, state=STARTED)
        if not write_finished(rlmm, md, existing.get(md.remote_log_segment_id), started,
                              "rebuild_after_started"):
            plan.already += 1
            continue
        plan.written += 1
        crash_point("rebuild_after_finished")


def build_plans(rsm: RemoteStorageManager, topic: str | None, *, use_descriptors: bool = True
                ) -> list[PartitionPlan]:
    """The plan of every partition in the bucket (of ``topic`` only, when given)."""
    tps = rsm.list_partitions()
    if tps is None:
        raise RlmError(f"{rsm.display_name} storage cannot list its partitions: rebuild needs a listing")
    plans = []
    for tp in tps:
        if (topic is not None and tp.topic != topic) or tp.topic == PROBE_TOPIC:
            continue  # the probe partition holds the daemon's storage probes, never data
        scan = scan_partition(rsm, tp, use_descriptors=use_descriptors)
        plan = plan_partition(scan.found, scan.unusable, tp)
        plan.released = scan.released
        plans.append(plan)
    return plans
