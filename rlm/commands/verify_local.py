"""``rlm verify``'s view across the tiers: the remote range and the broker's local log meet.

After a restore (docs/disaster-recovery.md) a partition's records live in two places: the adopted
history in remote storage and the newest segments in the broker's partition directory. A reader
sees them as one log only if no offset falls between them: the local log must start at or below
the remote end. When the configuration's ``log_dirs`` hold the partition (same topic id, from
``partition.metadata``), ``verify`` reports both ranges and a ``local_gap`` problem when the local
log starts above the remote end. The local end offset is the next offset of the last local
segment, read from its last batch header (the active segment may be growing: it is a floor).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import RlmError
from rlm.log.checkpoints import read_partition_metadata
from rlm.log.log_start import first_segment_offset
from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition


@dataclass(frozen=True)
class Coverage:
    """``[remote_start, remote_end)`` and ``[local_start, local_end)`` of one partition."""

    remote_start: int
    remote_end: int
    local_dir: str
    local_start: int | None
    local_end: int | None

    @property
    def gap(self) -> tuple[int, int] | None:
        """Offsets (inclusive) in neither tier, ``None`` when the tiers meet or overlap."""
        if self.local_start is None or self.remote_end >= self.local_start:
            return None
        return self.remote_end, self.local_start - 1


def local_dir_of(log_dirs: Iterable[Path], tp: TopicIdPartition) -> Path | None:
    """The partition's directory under ``log_dirs`` holding the same topic id, if any."""
    for d in log_dirs:
        pdir = Path(d) / f"{tp.topic}-{tp.partition}"
        meta = pdir / "partition.metadata"
        try:
            if meta.exists() and read_partition_metadata(meta) == tp.topic_id:
                return pdir
        except (OSError, RlmError):
            continue
    return None


def coverage(log_dirs: Iterable[Path], tp: TopicIdPartition, remote_start: int, remote_end: int
             ) -> Coverage | None:
    pdir = local_dir_of(log_dirs, tp)
    if pdir is None:
        return None
    start = first_segment_offset(pdir)
    end: int | None = None
    if start is not None:
        try:
            end = PartitionDir(pdir).log_end_offset()
        except (OSError, RlmError):
            end = None
    return Coverage(remote_start, remote_end, str(pdir), start, end)
