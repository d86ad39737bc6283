"""Publishing a compacted segment: COPY_SEGMENT_STARTED → RSM copy → descriptor → COPY_SEGMENT_FINISHED.

The copy protocol of :mod:`rlm.daemon.copier` for a segment that is not one of the broker's
local segments (the compaction's output in the daemon's staging dir): the same records, crash
points, undo on failure (:func:`rlm.daemon.remote_ops.delete_remote_segment`), custom-metadata
limit, segment descriptor (what ``rlm metadata rebuild`` reads) and leadership check before
FINISHED, with the same errors. The segment is registered in flight meanwhile, so a concurrent
expiry never takes it for an abandoned copy; a crash leaves it COPY_SEGMENT_STARTED, which expiry
undoes (this node's own at once), as for any copy.
"""

from __future__ import annotations

import time
from dataclasses import replace

import structlog

from rlm.daemon.context import TaskContext, now_ms
from rlm.daemon.copier import CustomMetadataTooLargeError, LeadershipLostError
from rlm.daemon.crash import crash_point
from rlm.daemon.remote_ops import delete_remote_segment
from rlm.types import (
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from rsm_plugins import descriptor

log = structlog.get_logger(__name__)


def publish_segment(
    ctx: TaskContext, md: RemoteLogSegmentMetadata, data: LogSegmentData, reason: str
) -> None:
    """Copy ``data`` as the new segment ``md`` (state ignored) through the copy protocol.

    On any failure the copy is undone (``reason`` + the failure names the delete) and the error
    re-raised; nothing is FINISHED unless every object is stored and this node still leads.
    """
    seg_id = md.remote_log_segment_id
    tp = seg_id.topic_id_partition
    bind = log.bind(topic=tp.topic, partition=tp.partition, segment_id=seg_id.id.text, reason=reason)
    md = replace(md, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED, event_timestamp_ms=now_ms())

    def undo(why: str) -> None:
        try:
            delete_remote_segment(ctx, md, f"{reason}_{why}")
        except Exception as e:  # best effort: expiry undoes a stale STARTED / retries the delete
            bind.warning("segment_copy_cleanup_failed", error=str(e), kind=type(e).__name__)

    with ctx.in_flight_lock:
        ctx.in_flight[seg_id] = time.monotonic()
    try:
        ctx.meta(ctx.rlmm.add_remote_log_segment_metadata(md))
        crash_point("after_copy_started")
        try:
            custom = ctx.rsm.copy_log_segment_data(md, data)
        except Exception as e:
            bind.warning("segment_copy_failed", error=str(e), kind=type(e).__name__)
            undo("copy_failed")
            raise
        crash_point("after_rsm_copy")
        if custom is not None and len(custom) > ctx.config.custom_metadata_max_bytes:
            undo("custom_metadata_too_large")
            raise CustomMetadataTooLargeError(
                f"{tp}: storage plugin returned {len(custom)} bytes of custom metadata, limit "
                f"{ctx.config.custom_metadata_max_bytes}"
            )
        described = replace(md, custom_metadata=custom)
        try:
            ctx.rsm.write_segment_descriptor(described, descriptor.encode(described))
        except Exception as e:
            bind.warning("segment_descriptor_failed", error=str(e), kind=type(e).__name__)
            undo("descriptor_failed")
            raise
        if ctx.still_leads is not None and not ctx.still_leads(tp):
            undo("leadership_moved")
            raise LeadershipLostError(
                f"{tp}: leadership moved away from node {ctx.node_id} while the compacted segment "
                f"{md.start_offset}..{md.end_offset} was being copied; the copy was undone"
            )
        ctx.meta(
            ctx.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    seg_id, now_ms(), RemoteLogSegmentState.COPY_SEGMENT_FINISHED, ctx.node_id, custom
                )
            )
        )
        crash_point("after_copy_finished")
    finally:
        with ctx.in_flight_lock:
            ctx.in_flight.pop(seg_id, None)
    labels = (tp.topic, str(tp.partition))
    ctx.metrics.bytes_copied.labels(*labels).inc(md.segment_size_in_bytes)
    ctx.metrics.segments_copied.labels(*labels).inc()
