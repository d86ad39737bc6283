"""Which remote segments hold which offsets on the current leader-epoch lineage.

Every face of the read side (fetch, offsets, scan, the HTTP API, the Kafka endpoint, Spark)
plans through :func:`plan_partition`, so segment choice cannot diverge between them.

The lineage comes from remote metadata alone (a read tier has no broker partition directory):
an epoch starts where the earliest remote segment says it does, and an epoch whose start is not
after an older epoch's start supersedes it. After an unclean election two segments can cover
the same offsets; the part of a segment that does not agree with the lineage (its epoch ran on
past the next lineage epoch's start) is cut off, so a read never returns records of a diverged
leader. Among segments that agree, the chain takes the one reaching furthest (fewest reads).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rlm.errors import FencedLeaderEpochError, OffsetOutOfRangeError, UnknownLeaderEpochError
from rlm.lineage import filtered_epochs
from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition


@dataclass(frozen=True, slots=True)
class PlannedSegment:
    """One link of the chain: ``metadata`` serves offsets ``first..last`` (inclusive).

    ``last`` can be below ``metadata.end_offset`` when the segment's tail is off the lineage.
    """

    metadata: RemoteLogSegmentMetadata
    first: int
    last: int

    @property
    def start_offset(self) -> int:
        return self.metadata.start_offset

    @property
    def truncated(self) -> bool:
        """True when records after ``last`` exist in the object but are not on the lineage."""
        return self.last < self.metadata.end_offset


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """The remote log of one partition as readers see it."""

    tp: TopicIdPartition
    segments: tuple[PlannedSegment, ...]
    lineage: tuple[tuple[int, int], ...]
    gaps: tuple[tuple[int, int], ...]

    @property
    def log_start(self) -> int:
        """Remote log start offset (first offset on the lineage), or 0 when nothing is remote."""
        return self.segments[0].first if self.segments else 0

    @property
    def log_end(self) -> int:
        """Exclusive end: the offset after the last remote record (= ``log_start`` when empty)."""
        return self.segments[-1].last + 1 if self.segments else self.log_start

    @property
    def latest_epoch(self) -> int:
        return self.lineage[-1][0] if self.lineage else -1

    def describe(self) -> str:
        return f"{self.tp} (remote {self.log_start}..{self.log_end - 1})" if self.segments else f"{self.tp}"

    def out_of_range(self, offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(
            f"{self.tp}: offset {offset} is outside the remote range "
            f"[{self.log_start}, {self.log_end})", log_start=self.log_start, log_end=self.log_end)

    def index_of(self, offset: int) -> int:
        """Index of the first link with ``last >= offset`` (offsets in a gap map to the next link).

        Raises :class:`OffsetOutOfRangeError` outside ``[log_start, log_end)``.
        """
        if not self.segments or offset < self.log_start or offset >= self.log_end:
            raise self.out_of_range(offset)
        lasts = [s.last for s in self.segments]
        return bisect.bisect_left(lasts, offset)

    def segment_for(self, offset: int) -> PlannedSegment:
        return self.segments[self.index_of(offset)]

    def after(self, link: PlannedSegment) -> PlannedSegment | None:
        """The next link of the chain (Kafka's ``findNextSegmentMetadata``), or ``None`` at the end."""
        i = self.index_of(link.last)
        return self.segments[i + 1] if i + 1 < len(self.segments) else None

    def epoch_for_offset(self, offset: int) -> int:
        """Lineage epoch holding ``offset`` (-1 before the first epoch)."""
        starts = [s for _, s in self.lineage]
        i = bisect.bisect_right(starts, offset) - 1
        return self.lineage[i][0] if i >= 0 else -1

    def check_leader_epoch(self, leader_epoch: int | None, offset: int) -> None:
        """Refuse a read whose ``leader_epoch`` ended before ``offset`` (fenced), or is unknown.

        The epoch's end is the next lineage epoch's start (the log end for the latest epoch); a
        read at exactly that end is allowed: it continues into the next epoch.
        """
        if leader_epoch is None or leader_epoch < 0 or not self.lineage:
            return
        if leader_epoch > self.latest_epoch:
            raise UnknownLeaderEpochError(
                f"{self.tp}: leader epoch {leader_epoch} is newer than the latest remote epoch "
                f"{self.latest_epoch}")
        end = self.log_end
        for i, (epoch, _start) in enumerate(self.lineage):
            if epoch > leader_epoch:
                end = self.lineage[i][1]
                break
        if offset > end:
            raise FencedLeaderEpochError(
                f"{self.tp}: leader epoch {leader_epoch} ended at offset {end}, before the requested "
                f"offset {offset} (the log diverged; refetch the epoch's end offset)")


def lineage_from_segments(segments: Iterable[RemoteLogSegmentMetadata]) -> list[tuple[int, int]]:
    """(epoch, start offset) of the current lineage, derived from remote segments' epoch entries."""
    first_start: dict[int, int] = {}
    for md in segments:
        for epoch, start in md.segment_leader_epochs:
            if epoch not in first_start or start < first_start[epoch]:
                first_start[epoch] = start
    stack: list[tuple[int, int]] = []
    for epoch, start in sorted(first_start.items()):
        while stack and stack[-1][1] > start:
            stack.pop()  # a newer epoch starting earlier truncated the older one's history
        stack.append((epoch, start))
    return filtered_epochs(stack)


def lineage_last_offset(md: RemoteLogSegmentMetadata, lineage: Sequence[tuple[int, int]]) -> int:
    """Last offset of ``md`` that agrees with ``lineage`` (``start_offset - 1`` when none does)."""
    lin = dict(lineage)
    lin_epochs = [e for e, _ in lineage]
    seg = list(md.segment_leader_epochs)
    last_ok = md.start_offset - 1
    for i, (epoch, start) in enumerate(seg):
        seg_end = seg[i + 1][1] - 1 if i + 1 < len(seg) else md.end_offset
        if seg_end < start:
            continue  # an epoch with no records in this segment
        if epoch not in lin or start < lin[epoch]:
            return last_ok
        j = lin_epochs.index(epoch)
        lin_end = lineage[j + 1][1] - 1 if j + 1 < len(lineage) else None
        if lin_end is not None and seg_end > lin_end:
            return max(last_ok, min(seg_end, lin_end))
        last_ok = seg_end
    return last_ok


def plan_partition(tp: TopicIdPartition, segments: Iterable[RemoteLogSegmentMetadata]) -> PartitionPlan:
    """Build the chain from every segment of the partition (any state; only FINISHED ones count)."""
    finished = [md for md in segments if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    lineage = lineage_from_segments(finished)
    candidates = []
    for md in finished:
        last = lineage_last_offset(md, lineage)
        if last >= md.start_offset:
            candidates.append(PlannedSegment(md, md.start_offset, last))
    candidates.sort(key=lambda p: (p.first, -p.last, str(p.metadata.remote_log_segment_id.id)))
    chain: list[PlannedSegment] = []
    gaps: list[tuple[int, int]] = []
    i = 0
    cursor = candidates[0].first if candidates else 0
    while i < len(candidates):
        best: PlannedSegment | None = None
        while i < len(candidates) and candidates[i].first <= cursor:
            c = candidates[i]
            if c.last >= cursor and (best is None or c.last > best.last):
                best = c
            i += 1
        if best is None:
            nxt = candidates[i]
            gaps.append((cursor, nxt.first - 1))
            cursor = nxt.first
            continue
        chain.append(PlannedSegment(best.metadata, cursor, best.last))
        cursor = best.last + 1
    return PartitionPlan(tp, tuple(chain), tuple(lineage), tuple(gaps))
