"""Which remote segments hold which offsets on the current leader-epoch lineage.

Every face of the read side (fetch, offsets, scan, the HTTP API, the Kafka endpoint, Spark)
plans through :func:`plan_partition`, so segment choice cannot diverge between them.

The lineage comes from remote metadata alone (a read tier has no broker partition directory),
by the rules of :mod:`rlm.lineage`, which the daemon's expirer uses too: an epoch starts where the
earliest remote segment says it does, and an epoch whose start is not after an older epoch's
start supersedes it. After an unclean election two segments can cover the same offsets; the
part of a segment that does not agree with the lineage (its epoch ran on past the next lineage
epoch's start) is cut off, so a read never returns records of a diverged leader. Among segments
that agree, the chain takes the one reaching furthest (fewest reads).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from rlm.errors import FencedLeaderEpochError, OffsetOutOfRangeError, UnknownLeaderEpochError
from rlm.lineage import chain, finished_only, lineage_from_segments
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition


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

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer over the remote lineage (``LeaderEpochFileCache.
        endOffsetFor``): ``(epoch, end offset)`` — the latest epoch ends at the log end; an older
        one at the next higher epoch's start, reported as the largest epoch at or below it (or
        itself when it is older than every epoch); newer than every epoch: ``(-1, -1)``."""
        if not self.lineage:
            return -1, -1
        if leader_epoch == self.latest_epoch:
            return leader_epoch, self.log_end
        higher = next(((e, s) for e, s in self.lineage if e > leader_epoch), None)
        if higher is None:
            return -1, -1
        floor = [e for e, _s in self.lineage if e <= leader_epoch]
        return (floor[-1] if floor else leader_epoch), higher[1]

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


def plan_partition(tp: TopicIdPartition, segments: Iterable[RemoteLogSegmentMetadata]) -> PartitionPlan:
    """Build the chain from every segment of the partition (any state; only FINISHED ones count)."""
    finished = finished_only(segments)
    lineage = lineage_from_segments(finished)
    links, gaps = chain(finished, lineage)
    return PartitionPlan(
        tp, tuple(PlannedSegment(md, first, last) for md, first, last in links), tuple(lineage), tuple(gaps)
    )
