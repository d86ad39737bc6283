"""Offset for a timestamp over remote segments (KIP-33 semantics, Kafka's ``findOffsetByTimestamp``).

Walk the lineage's segments oldest first; skip one whose max timestamp (from metadata) is below
the target; in the first other one, start at the time index's greatest entry <= target (mapped
to a position by the offset index) and scan batches to the first record whose timestamp is >=
the target. Guarantee: every record with a timestamp >= target is at or after the answer.
Control records count, as in Kafka's ``FileRecords.searchForTimestamp``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fetcher.batches import describe, walk
from fetcher.index_cache import RemoteIndexCache
from fetcher.planning import PartitionPlan, PlannedSegment
from fetcher.reader import SegmentReader
from rlm.log.records import decode_control_records, decode_records

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class TimestampAnswer:
    """ListOffsets' answer: the offset, the record's timestamp (-1 for earliest/latest), and the
    leader epoch of its batch (-1 when unknown)."""

    offset: int
    timestamp: int
    leader_epoch: int


def offset_for_timestamp(plan: PartitionPlan, timestamp: int, reader: SegmentReader,
                         indexes: RemoteIndexCache) -> TimestampAnswer | None:
    """The first remote record with timestamp >= ``timestamp``; ``None`` when no remote record is
    that late (the answer then lies in the local log, if anywhere). -2/-1 give the remote log
    start / end."""
    if timestamp == EARLIEST_TIMESTAMP:
        return TimestampAnswer(plan.log_start, -1, plan.epoch_for_offset(plan.log_start))
    if timestamp == LATEST_TIMESTAMP:
        return TimestampAnswer(plan.log_end, -1, plan.latest_epoch)
    if timestamp < 0:
        raise ValueError(f"unsupported special timestamp {timestamp}")
    for link in plan.segments:
        if link.metadata.max_timestamp_ms < timestamp:
            continue
        found = _search_segment(link, timestamp, reader, indexes)
        if found is not None:
            return found
    return None


def _search_segment(link: PlannedSegment, timestamp: int, reader: SegmentReader,
                    indexes: RemoteIndexCache) -> TimestampAnswer | None:
    md = link.metadata
    idx = indexes.get(md)
    entry = idx.time.lookup(timestamp)
    start_offset = max(entry.offset, link.first) if entry.timestamp >= 0 else link.first
    start_pos = idx.offset.lookup(start_offset).position
    name = describe(md)
    for b in walk(reader, md, start_pos, window=256 * 1024, sequential=False):
        h = b.header
        if h.base_offset > link.last:
            return None
        if h.max_timestamp < timestamp or h.last_offset < link.first:
            continue
        decode = decode_control_records if h.is_control else decode_records
        for r in decode(b.data, path=name, position=h.position):
            if r.timestamp >= timestamp and link.first <= r.offset <= link.last:
                return TimestampAnswer(r.offset, r.timestamp, h.partition_leader_epoch)
    return None
