"""Segments written into a metadata store the way the copy task writes them, idempotently.

Rebuild (:mod:`rlm.recovery.rebuild`) and adoption (:mod:`rlm.recovery.adopt`) both write a plan
of whole segments into a store that may hold part of the same plan from an interrupted run: a
segment already FINISHED is left alone, one left STARTED is only finished, and anything else in
the partition means another history, refused before the first write (neither ever merges two).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rlm.daemon.crash import crash_point
from rlm.errors import RlmError
from rlm.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.api import RemoteLogMetadataManager

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED

Segments = dict[RemoteLogSegmentId, RemoteLogSegmentMetadata]


def existing_segments(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, planned: Iterable[RemoteLogSegmentMetadata],
    agrees: Callable[[RemoteLogSegmentMetadata, RemoteLogSegmentMetadata], bool],
    refuse: Callable[[str, bool], RlmError],
) -> Segments:
    """The segments ``rlmm`` already holds for ``tp`` (after taking its leadership), each one a
    ``planned`` segment it ``agrees`` with, STARTED or FINISHED; otherwise raises ``refuse(the
    held segment named, whether it is planned)`` before anything is written."""
    by_id = {md.remote_log_segment_id: md for md in planned}
    rlmm.on_partition_leadership_changes({tp}, set())
    existing = {md.remote_log_segment_id: md for md in rlmm.list_remote_log_segments(tp)}
    for sid, md in existing.items():
        want = by_id.get(sid)
        if want is None or md.state not in (STARTED, FINISHED) or not agrees(md, want):
            raise refuse(f"segment {sid.id.text} (offsets {md.start_offset}..{md.end_offset}, "
                         f"{md.state.name})", want is not None)
    return existing


def write_finished(rlmm: RemoteLogMetadataManager, md: RemoteLogSegmentMetadata,
                   held: RemoteLogSegmentMetadata | None, started: RemoteLogSegmentMetadata,
                   crash_after_started: str) -> bool:
    """``md`` written as COPY_SEGMENT_STARTED (``started``) then COPY_SEGMENT_FINISHED, as the copy
    task writes a segment; False (nothing written) when the store ``held`` it FINISHED already. One
    ``held`` STARTED by an interrupted run is only finished."""
    if held is not None and held.state is FINISHED:
        return False
    if held is None:
        rlmm.add_remote_log_segment_metadata(started)
        crash_point(crash_after_started)
    rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        md.remote_log_segment_id, md.event_timestamp_ms, FINISHED, md.broker_id, md.custom_metadata))
    return True
