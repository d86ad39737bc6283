"""``rlm verify``'s view across the tiers: the remote range and the broker's local log meet.

After a restore (docs/disaster-recovery.md) a partition's records live in two places: the adopted
history in remote storage and the newest segments in the broker's partition directory. A reader
sees them as one log only if no offset falls between them: the local log must start at or below
the remote end. When the configuration's ``log_dirs`` hold the partition (same topic id, from
``partition.metadata``), ``verify`` reports both ranges and a ``local_gap`` problem when the local
log starts above the remote end. The local end offset is the next offset of the last local
segment, read from its last batch header (the active segment may be growing: it is a floor).

With ``--deep`` (:func:`check_restored`) the local log is also checked against the bucket where
the two overlap — what ``rlm restore`` wrote, and what the broker must still hold:

* each local segment that starts where a remote segment of the readers' chain starts and ends
  below the remote end holds the very bytes of the remote ``.log`` (``local_segment_mismatch``);
  indexes are not compared (the broker may rebuild them at start-up, with the same content but
  not necessarily the same bytes); a segment of a compacted topic the broker's cleaner rewrote
  after it was tiered differs legitimately, and passes when each of its records below the remote
  end is the remote copy's record at that offset (:mod:`.verify_compacted`);
* the local log start (the first segment, raised by ``log-start-offset-checkpoint``) is not below
  the published ``DeleteRecords`` bound (``local_log_start``: the broker would serve deleted
  records again);
* the ``leader-epoch-checkpoint`` entries below the remote end are the remote lineage's over the
  range both tiers hold (``local_epochs``; below the first remote segment, removed by remote
  retention, the remote lineage says nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fetcher.planning import PartitionPlan
from rlm.errors import RlmError
from rlm.lineage import epochs_for_range
from rlm.log.checkpoints import read_leader_epoch_checkpoint, read_partition_metadata
from rlm.log.log_start import checkpoint_log_start, first_segment_offset
from rlm.log.partition import PartitionDir
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition, TopicPartition
from rsm_plugins.api import RemoteStorageManager

from .verify_compacted import compaction_mismatch, has_cleaner_entry

_CHUNK = 4 << 20


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


@dataclass(frozen=True)
class LocalFinding:
    """One way the local log differs from the bucket (``kind`` as in ``rlm verify``'s problems)."""

    kind: str
    message: str
    offsets: tuple[int, int] | None = None


def _same_bytes(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, path: Path) -> str | None:
    """``None`` when ``path`` holds the remote ``.log``'s bytes, else where they first differ."""
    pos = 0
    with rsm.fetch_log_segment(md, 0) as remote, open(path, "rb") as local:
        while True:
            want, got = remote.read(_CHUNK), local.read(_CHUNK)
            if want != got:
                n = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                         min(len(want), len(got)))
                return f"differs from the remote segment at byte {pos + n}"
            if not want:
                return None
            pos += len(want)


def check_restored(rsm: RemoteStorageManager, plan: PartitionPlan, pdir: Path,
                   published_log_start: int | None, *, remote_compacted_below: int = 0) -> list[LocalFinding]:
    """The local partition directory ``pdir`` against the bucket (see the module docstring)."""
    out: list[LocalFinding] = []
    local = PartitionDir(pdir)
    remote_end = plan.log_end
    by_start = {s.metadata.start_offset: s.metadata for s in plan.segments}
    segs = local.segments
    # only a partition the broker's cleaner has worked on may differ from its remote copy by compaction
    cleaned = has_cleaner_entry(pdir, plan.tp.topic_partition)
    for seg, nxt in zip(segs, [*segs[1:], None], strict=True):
        md = by_start.get(seg.base_offset)
        if md is None or nxt is None:
            continue  # not a copy of a remote segment (newer, or the active one)
        try:
            why = _same_bytes(rsm, md, seg.log_path)
            # the broker's cleaner rewrites tiered segments; the sidecar's remote compaction
            # (below its checkpoint, ``remote_compacted_below``) rewrites the remote copy
            remote_compacted = seg.base_offset < remote_compacted_below
            if why is not None and (cleaned or remote_compacted):
                remote = [s.metadata for s in plan.segments]
                hi = min(nxt.base_offset, remote_end) - 1
                why = compaction_mismatch(rsm, remote, seg.log_path, seg.base_offset, hi,
                                          remote_may_lack=remote_compacted)
        except (OSError, RlmError) as e:
            why = f"cannot be compared: {e}"
        if why is not None:
            out.append(LocalFinding("local_segment_mismatch", f"{seg.log_path}: {why}",
                                    (md.start_offset, md.end_offset)))
    first = first_segment_offset(pdir)
    if first is None:
        return out
    entry = checkpoint_log_start(pdir.parent, TopicPartition(pdir.name.rsplit("-", 1)[0], plan.tp.partition))
    start = max(first, entry or first)
    if published_log_start is not None and start < published_log_start <= local.log_end_offset():
        out.append(LocalFinding(
            "local_log_start", f"{pdir}: the local log starts at {start}, below the published log start "
            f"{published_log_start} (DeleteRecords): the broker would serve deleted records",
            (start, published_log_start - 1)))
        start = published_log_start
    # the lineages are compared where both tiers hold the offsets: remote retention may have
    # removed the history's head, and the remote lineage says nothing below its first segment
    start = max(start, plan.segments[0].metadata.start_offset) if plan.segments else remote_end
    if start < remote_end:
        want = epochs_for_range(list(plan.lineage), start, remote_end)
        try:
            have = [(e.epoch, max(e.start_offset, start))
                     for e in read_leader_epoch_checkpoint(pdir / "leader-epoch-checkpoint")
                     if e.start_offset < remote_end]
        except RlmError as e:
            out.append(LocalFinding("local_epochs", f"{pdir}/leader-epoch-checkpoint: unreadable: {e}"))
            return out
        have = [h for i, h in enumerate(have) if i + 1 >= len(have) or have[i + 1][1] > start]
        if have != want:
            out.append(LocalFinding(
                "local_epochs", f"{pdir}/leader-epoch-checkpoint: epochs {have} below offset {remote_end}, "
                f"the remote lineage says {want}", (start, remote_end - 1)))
    return out
