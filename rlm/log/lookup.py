"""Offset and timestamp lookups over a partition directory, the way the broker answers them.

Offset → (segment, byte position): the offset index gives the greatest entry at or below the
offset, then batches are scanned to the first one whose last offset reaches it
(``LogSegment.translateOffset``). Gaps left by compaction, even between segments, move on to
the next batch that exists.

Timestamp → offset (KIP-33, ``UnifiedLog.fetchOffsetByTimestamp``): walk segments oldest first
and take the first whose largest timestamp is >= T; in it, the time index names a batch at or
before the first record with timestamp >= T, and a scan from there finds that record. Every
record with timestamp >= T is therefore at or after the answer: earlier segments hold only
smaller timestamps, whatever order the segments' timestamps come in.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm.log._scan import read_entry, scan_batches
from rlm.log.partition import PartitionDir, Segment
from rlm.log.records import BatchHeader, decode_control_records, decode_records
from rlm.log.time_index import TimestampOffset

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True, slots=True)
class OffsetLocation:
    """Where a fetch for some offset starts: the batch holding it (or the next one after a gap)."""

    segment: Segment
    position: int
    batch: BatchHeader


def translate_offset(partition: PartitionDir, segment: Segment, offset: int) -> OffsetLocation | None:
    """First batch of ``segment`` whose last offset is >= ``offset``, or None past its end."""
    entry = partition.offset_index(segment).lookup(offset)
    start = partition.verified_position(segment, entry)
    for h in scan_batches(segment.log_path, start_position=start):
        if h.last_offset >= offset:
            return OffsetLocation(segment, h.position, h)
    return None


def find_offset(partition: PartitionDir, offset: int) -> OffsetLocation | None:
    """The batch holding ``offset`` (or the first after it), across segments; None past the end."""
    first = partition.segment_for(offset)
    for seg in partition.segments:
        if first is not None and seg.base_offset < first.base_offset:
            continue
        loc = translate_offset(partition, seg, offset)
        if loc is not None:
            return loc
    return None


def _first_record_at_or_after(partition: PartitionDir, segment: Segment, timestamp: int,
                              min_offset: int) -> TimestampOffset | None:
    """``LogSegment.findOffsetByTimestamp``: time index → offset index → scan of records."""
    tindex = partition.time_index(segment)
    entry = tindex.lookup(timestamp)
    start = 0
    if entry.timestamp >= 0:
        idx = partition.offset_index(segment).lookup(max(entry.offset, min_offset))
        start = partition.verified_position(segment, idx)
        batch = next((h for h in scan_batches(segment.log_path, start_position=start)
                      if h.last_offset >= entry.offset), None)
        if batch is None or batch.last_offset != entry.offset or batch.max_timestamp != entry.timestamp:
            start = 0  # stale entry (active segment after a truncation): do not trust the index
    for h in scan_batches(segment.log_path, start_position=start):
        if h.max_timestamp < timestamp or h.last_offset < min_offset:
            continue
        data = read_entry(segment.log_path, h)
        decode = decode_control_records if h.is_control else decode_records  # markers count, as in Kafka
        for r in decode(data, path=str(segment.log_path), position=h.position):
            if r.timestamp >= timestamp and r.offset >= min_offset:
                return TimestampOffset(r.timestamp, r.offset)
    return None


def find_offset_for_timestamp(partition: PartitionDir, timestamp: int, *,
                              log_start_offset: int | None = None) -> TimestampOffset | None:
    """(timestamp, offset) of the first record with timestamp >= ``timestamp``; None if none.

    ``EARLIEST_TIMESTAMP`` (-2) gives the log start offset and ``LATEST_TIMESTAMP`` (-1) the log
    end offset, each with timestamp -1, as ``ListOffsets`` does.
    """
    start = partition.log_start_offset if log_start_offset is None else log_start_offset
    if start is None:
        return None
    if timestamp == EARLIEST_TIMESTAMP:
        return TimestampOffset(-1, start)
    if timestamp == LATEST_TIMESTAMP:
        return TimestampOffset(-1, partition.log_end_offset())
    if timestamp < 0:
        raise ValueError(f"unsupported special timestamp {timestamp}")
    for seg in partition.segments:
        if partition.max_timestamp(seg).timestamp < timestamp:
            continue
        found = _first_record_at_or_after(partition, seg, timestamp, start)
        if found is not None:
            return found
    return None
