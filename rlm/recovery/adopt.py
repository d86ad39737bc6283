"""``rlm restore --adopt-into F2``: the old history, in the new cluster's metadata store, under the
new topic id, without copying an object.

For each partition restored, every COPY_SEGMENT_FINISHED segment of the old store is written into
the new cluster's store (``F2``'s ``metadata`` block) as the copy task writes a segment —
COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED — with the **new** topic id, the **original**
segment id, offsets, leader epochs, size and timestamps, and custom metadata that redirects the
storage plugins to the objects stored under the old topic id (:mod:`rsm_plugins.redirect`). The
published log start offset (``DeleteRecords`` bound) is carried over too.

The objects are then shared, so the bucket records who references them
(:mod:`rlm.daemon.shared_objects`), before the adopted segment is written: the source's
descriptor (written if an older copy left none), the stored partition's adopters registry, and a
descriptor under the new topic id naming both ids (the redirect). Every retention — the new
cluster's, another adopter's, the source's — then deletes the objects only when no topic id still
references them, and ``rlm metadata rebuild`` recovers the adopted lineage from the bucket after a
second disaster. A rerun records the references of segments an older version adopted without
them. ``--release-source`` drops the source topic id's reference (its cluster is gone and will not
run retention): the adopters' retention alone then decides.

So the new cluster's sidecar sees the history as its own: the read faces serve it under the new
topic id at the old offsets, its copier does not copy again what is already remote (the restored
local segments lie inside the adopted range), and retention deletes adopted segments — with their
original objects — like any other.

Idempotent: a segment already FINISHED in the target store is skipped, one left STARTED by an
interrupted run is only finished. A target partition holding segments that are not adopted ones of
this history is refused (adoption never merges two histories).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from rlm.daemon.shared_objects import record_adoption, release_owner
from rlm.errors import RlmError
from rlm.log.checkpoints import read_partition_metadata
from rlm.recovery.segment_writes import FINISHED, STARTED, existing_segments, write_finished
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from rlmm.api import RemoteLogMetadataManager
from rsm_plugins import redirect
from rsm_plugins.api import RemoteStorageManager


class AdoptConflictError(RlmError):
    """The new cluster's store already holds other segments for the partition."""


@dataclass
class Adoption:
    """What adoption did (or would do) for one partition."""

    source: TopicIdPartition
    target: TopicIdPartition
    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    owners: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    """The source's finished segments, in the order of :attr:`segments`."""
    written: int = 0
    referenced: int = 0
    """Segments whose shared objects now record this adoption's reference."""
    already: int = 0
    log_start: int | None = None


def _same_range(a: RemoteLogSegmentMetadata, b: RemoteLogSegmentMetadata) -> bool:
    return (a.start_offset, a.end_offset) == (b.start_offset, b.end_offset)


def adopted(md: RemoteLogSegmentMetadata, target: TopicIdPartition) -> RemoteLogSegmentMetadata:
    """``md`` (a finished segment of the old history) as a FINISHED segment of ``target``."""
    return replace(md, remote_log_segment_id=RemoteLogSegmentId(target, md.remote_log_segment_id.id),
                   state=FINISHED,
                   custom_metadata=redirect.encode(redirect.stored_partition(md), md.custom_metadata))


def plan_adoption(source: RemoteLogMetadataManager, tp: TopicIdPartition, new_topic_id: KafkaUuid,
                  to_topic: str) -> Adoption:
    """Every finished segment of ``tp`` in the old store, oldest first, named for the new topic."""
    target = TopicIdPartition(new_topic_id, to_topic, tp.partition)
    segs = sorted((md for md in source.list_remote_log_segments(tp) if md.state is FINISHED),
                  key=lambda md: (md.start_offset, md.remote_log_segment_id.id.text))
    return Adoption(tp, target, [adopted(md, target) for md in segs], owners=segs)


def plan_adoptions(source: RemoteLogMetadataManager, tps: Iterable[TopicIdPartition], log_dir: Path,
                   to_topic: str) -> tuple[list[Adoption], list[str]]:
    """The adoption of each of ``tps`` whose partition directory ``log_dir/<to_topic>-<p>`` exists
    (its ``partition.metadata`` names the new topic id), and why each other one is skipped."""
    plans: list[Adoption] = []
    skipped: list[str] = []
    for tp in tps:
        meta = log_dir / f"{to_topic}-{tp.partition}" / "partition.metadata"
        if not meta.exists():
            skipped.append(f"{tp.topic}-{tp.partition}: no {meta} (the partition is not on this broker)")
            continue
        plans.append(plan_adoption(source, tp, read_partition_metadata(meta), to_topic))
    return plans, skipped


def apply_adoption(target: RemoteLogMetadataManager, rsm: RemoteStorageManager, ad: Adoption,
                   release_source: bool = False) -> None:
    """Write the adopted segments into ``target`` (see the module docstring); raises
    :class:`AdoptConflictError` before writing anything when the partition holds other segments."""
    tp = ad.target
    existing = existing_segments(target, tp, ad.segments, _same_range, lambda held, _: AdoptConflictError(
        f"{tp.topic}-{tp.partition} (topic id {tp.topic_id.text}): the new cluster's metadata store "
        f"already holds {held} that is not an adopted segment of {ad.source}; adopt before the new "
        "cluster's sidecar tiers anything"))
    for owner, md in zip(ad.owners, ad.segments, strict=True):
        if record_adoption(rsm, owner, md):  # the reference first: no retention may delete it now
            ad.referenced += 1
        if release_source:
            release_owner(rsm, owner)
        started = replace(md, state=STARTED, custom_metadata=None)
        if write_finished(target, md, existing.get(md.remote_log_segment_id), started, "adopt_after_started"):
            ad.written += 1
        else:
            ad.already += 1
    old_start = rsm.read_log_start_offset(ad.source)
    if old_start is not None and (rsm.read_log_start_offset(tp) or -1) < old_start:
        rsm.write_log_start_offset(tp, old_start)
    ad.log_start = old_start
