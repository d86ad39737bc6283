"""The two remote protocols every writer of remote segments goes through.

Copying one segment (:func:`publish_segment`): COPY_SEGMENT_STARTED → RSM copy → segment
descriptor → leadership check → COPY_SEGMENT_FINISHED; any failure undoes the copy. Used by the
copier (a broker's segment) and the remote compaction job (a compacted segment).

Deleting one remote segment (:func:`delete_remote_segment`): DELETE_SEGMENT_STARTED → RSM delete →
DELETE_SEGMENT_FINISHED. Shared by the copier (undoing a failed copy), expiry, the partition
remover and the remote compaction job. A failure leaves the segment DELETE_SEGMENT_STARTED, which
expiry retries on its next run. Objects shared with another topic id by adoption are only
dereferenced (:mod:`rlm.daemon.shared_objects`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import structlog

from rlm.daemon.context import TaskContext, now_ms
from rlm.daemon.crash import crash_point
from rlm.daemon.shared_objects import delete_segment_objects
from rlm.errors import RlmError
from rlm.types import (
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from rsm_plugins import descriptor

log = structlog.get_logger(__name__)


class CustomMetadataTooLargeError(RlmError):
    """The storage plugin returned more custom metadata than allowed; copying stops for the partition."""


class LeadershipLostError(RlmError):
    """Leadership of the partition moved while a segment was being copied; the copy was undone
    (the new leader's sidecar copies the range on its own lineage) and this node stops tiering it."""

    retriable = True


def publish_segment(
    ctx: TaskContext,
    md: RemoteLogSegmentMetadata,
    data: LogSegmentData,
    *,
    check_upload: Callable[[], None] | None = None,
    mark: Callable[[bytes | None], bytes | None] | None = None,
) -> bytes | None:
    """Copy ``data`` as the new segment ``md`` through the copy protocol; returns the plugin's
    custom metadata.

    ``check_upload`` runs once the data is uploaded; an :class:`~rlm.errors.RlmError` from it
    undoes the copy (the copier's rewrite guard). On any failure the copy is undone and the error
    re-raised: nothing is FINISHED unless every object is stored and this node still leads. The
    segment is in flight meanwhile, so expiry never takes it for an abandoned copy; a crash leaves
    it COPY_SEGMENT_STARTED, which expiry undoes.

    ``mark`` turns the plugin's custom metadata into the one recorded (descriptor and
    COPY_SEGMENT_FINISHED alike): the remote compaction job's mark, :mod:`rsm_plugins.compaction_mark`.
    """
    seg_id = md.remote_log_segment_id
    tp = seg_id.topic_id_partition
    bind = log.bind(topic=tp.topic, partition=tp.partition, base_offset=md.start_offset,
                    segment_id=seg_id.id.text)

    def undo(reason: str) -> None:
        try:
            delete_remote_segment(ctx, md, reason)
        except Exception as e:  # best effort: expiry undoes a stale STARTED / retries the delete
            bind.warning("segment_copy_cleanup_failed", error=str(e), kind=type(e).__name__)

    with ctx.in_flight_lock:
        ctx.in_flight[seg_id] = time.monotonic()
    try:
        ctx.meta(ctx.rlmm.add_remote_log_segment_metadata(md))
        crash_point("after_copy_started")
        try:
            custom: bytes | None = ctx.rsm.copy_log_segment_data(md, data)
        except Exception as e:
            bind.warning("segment_copy_failed", error=str(e), kind=type(e).__name__)
            undo("copy_failed")
            raise
        crash_point("after_rsm_copy")
        if mark is not None:
            custom = mark(custom)
        if check_upload is not None:
            try:
                check_upload()
            except RlmError as e:
                bind.info("segment_copy_undone", reason=type(e).__name__, error=str(e))
                undo(type(e).__name__)
                raise
        if custom is not None and len(custom) > ctx.config.custom_metadata_max_bytes:
            undo("custom_metadata_too_large")
            ctx.copy_disabled.add(tp)
            raise CustomMetadataTooLargeError(
                f"{tp}: storage plugin returned {len(custom)} bytes of custom metadata, limit "
                f"{ctx.config.custom_metadata_max_bytes}; copying stopped for this partition"
            )
        described = replace(md, custom_metadata=custom)
        try:
            ctx.rsm.write_segment_descriptor(described, descriptor.encode(described))
        except Exception as e:
            bind.warning("segment_descriptor_failed", error=str(e), kind=type(e).__name__)
            undo("descriptor_failed")
            raise
        if ctx.still_leads is not None and not ctx.still_leads(tp):
            bind.warning("segment_copy_undone_leadership_moved")
            undo("leadership_moved")
            raise LeadershipLostError(
                f"{tp}: leadership moved away from node {ctx.node_id} while offsets "
                f"{md.start_offset}..{md.end_offset} were being copied; the copy was undone"
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
    return custom


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
