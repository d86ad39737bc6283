"""A read-only snapshot of one partition directory as a daemon task needs it.

The broker owns these files and changes them under our feet (rolls, deletes by local retention,
rewrites checkpoints), so a view is taken once at the start of a task run on top of
:class:`rlm.log.partition.PartitionDir`, and every later file access tolerates the file having
vanished (:class:`~rlm.errors.LogFileGoneError`). Nothing here ever writes into the broker's dirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlm.errors import LogFileGoneError, LogFormatError
from rlm.log.checkpoints import read_meta_properties
from rlm.log.partition import PartitionDir, Segment, parse_partition_dir_name
from rlm.types import KafkaUuid, TopicPartition


def partition_dir_name(name: str) -> tuple[TopicPartition, str | None] | None:
    """(partition, rename suffix) of a directory name, or ``None`` if it is not a partition dir."""
    try:
        return parse_partition_dir_name(name)
    except ValueError:
        return None


def read_node_id(log_dir: Path) -> int:
    """``node.id`` (KRaft) or ``broker.id`` from a log dir's ``meta.properties``."""
    return read_meta_properties(log_dir / "meta.properties").node_id


@dataclass(frozen=True, slots=True)
class LocalSegment:
    """One segment's files. ``next_offset`` is the next segment's base offset (``None`` = active)."""

    pdir: PartitionDir
    segment: Segment
    next_offset: int | None
    size: int

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset

    def path(self, suffix: str) -> Path:
        return self.segment.file(suffix.lstrip("."))

    @property
    def log_path(self) -> Path:
        return self.segment.log_path

    @property
    def end_offset(self) -> int:
        """Last offset the segment can hold (inclusive); only for rolled segments."""
        if self.next_offset is None:
            raise ValueError("the active segment has no end offset")
        return self.next_offset - 1

    def max_timestamp(self) -> int:
        """Kafka's ``largestTimestamp``: the time index's roll entry, checked against the log."""
        return int(self.pdir.max_timestamp(self.segment).timestamp)


@dataclass(frozen=True, slots=True)
class LocalLogView:
    """Snapshot of a partition directory: segments oldest first (the last one is active)."""

    pdir: PartitionDir
    topic_id: KafkaUuid | None
    segments: tuple[LocalSegment, ...]
    epochs: tuple[tuple[int, int], ...]

    @classmethod
    def load(cls, directory: Path) -> LocalLogView:
        try:
            pdir = PartitionDir(directory)
        except ValueError as e:
            raise LogFormatError("not a partition directory", path=directory) from e
        try:
            topic_id: KafkaUuid | None = pdir.topic_id
        except LogFileGoneError:
            topic_id = None
        sized: list[tuple[Segment, int]] = []
        for s in pdir.segments:
            try:
                sized.append((s, s.size()))
            except LogFileGoneError:
                continue
        segs = tuple(
            LocalSegment(pdir, s, sized[i + 1][0].base_offset if i + 1 < len(sized) else None, size)
            for i, (s, size) in enumerate(sized)
        )
        epochs = tuple((e.epoch, e.start_offset) for e in pdir.leader_epochs())
        return cls(pdir, topic_id, segs, epochs)

    @property
    def dir(self) -> Path:
        return self.pdir.path

    @property
    def topic_partition(self) -> TopicPartition:
        return self.pdir.topic_partition

    @property
    def active(self) -> LocalSegment | None:
        return self.segments[-1] if self.segments else None

    @property
    def rolled(self) -> tuple[LocalSegment, ...]:
        return self.segments[:-1]

    @property
    def local_start_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    def log_end_offset(self) -> int:
        """The LEO (next offset after the active segment's last batch)."""
        try:
            return self.pdir.log_end_offset()
        except LogFileGoneError:
            return self.active.base_offset if self.active else 0

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def producer_snapshot_path(self, next_offset: int) -> Path:
        return self.pdir.snapshot_path(next_offset)
