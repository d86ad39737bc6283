"""Deleting one remote segment: DELETE_SEGMENT_STARTED → RSM delete → DELETE_SEGMENT_FINISHED.

Shared by the copier (undoing a failed copy), expiry and the partition remover. A failure leaves
the segment DELETE_SEGMENT_STARTED, which expiry retries on its next run. Objects shared with
another topic id by adoption are only dereferenced (:mod:`rlm.daemon.shared_objects`).
"""

from __future__ import annotations

import structlog

from rlm.daemon.context import TaskContext, now_ms
from rlm.daemon.crash import crash_point
from rlm.daemon.shared_objects import delete_segment_objects
from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState

log = structlog.get_logger(__name__)


def delete_remote_segment(ctx: TaskContext, md: RemoteLogSegmentMetadata, reason: str) -> None:
    """Delete ``md``'s data and mark it; idempotent when it is already DELETE_SEGMENT_STARTED."""
    seg_id = md.remote_log_segment_id
    tp = seg_id.topic_id_partition
    if md.state is not RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
        ctx.meta(
            ctx.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    seg_id,
                    now_ms(),
                    RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                    ctx.node_id,
                    md.custom_metadata,
                )
            )
        )
        crash_point("after_delete_started")
    kept_for = delete_segment_objects(ctx.rsm, md)  # objects another topic id references stay
    crash_point("after_rsm_delete")
    ctx.meta(
        ctx.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                seg_id,
                now_ms(),
                RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
                ctx.node_id,
                md.custom_metadata,
            )
        )
    )
    crash_point("after_delete_finished")
    labels = (tp.topic, str(tp.partition))
    ctx.metrics.segments_deleted.labels(*labels, reason).inc()
    if md.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        ctx.metrics.bytes_deleted.labels(*labels).inc(md.segment_size_in_bytes)
    log.info(
        "segment_deleted",
        topic=tp.topic,
        partition=tp.partition,
        segment_id=seg_id.id.text,
        start_offset=md.start_offset,
        end_offset=md.end_offset,
        reason=reason,
        shared_with=[str(tp) for tp in kept_for] or None,
    )
