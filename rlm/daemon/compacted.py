"""What tiering a compacted topic needs beyond a delete topic: the cleanup policy's words, the
broker cleaner's progress, and the copy of a segment the cleaner rewrote after part of it was tiered.

Why the rules are what they are (docs/compacted-topics.md has the whole story):

* ``compact`` topics are never deleted by the broker, and its cleaner rewrites every segment below
  its *first dirty offset* at least once. Tiering a segment before that would keep, remotely, the
  duplicates the cleaner exists to drop, so only segments wholly below the offset the broker
  recorded in ``cleaner-offset-checkpoint`` (the log dir's, one entry per partition) are copied.
* ``compact,delete`` topics lose their old segments to the broker's own retention, so they are
  tiered like delete topics (below the LSO): waiting for the cleaner could lose data.
* Either way the cleaner may rewrite a segment *after* it was tiered: the same base offset with
  fewer records, or a merged group that covers several tiered segments and possibly offsets above
  the remote end. The remote copy already holds every offset below its end (a superset of what the
  cleaner kept), so a range is never copied twice; a local segment straddling the remote end is
  copied from the remote end on only, as a new segment written by :mod:`rlm.log.writer` with its
  indexes (:func:`write_tail_segment`). Waiting instead would never end for a ``compact`` topic
  (the merged group stays merged) and would lose the offsets to local retention for a
  ``compact,delete`` one.
* The cleaner swaps a rewritten segment in (``.cleaned`` → ``.swap`` → ``.log``) while the daemon
  may be copying the old one. :class:`RewriteGuard` makes sure what was uploaded is the segment
  the copy's metadata describes: the same files from before the upload to after it, holding no
  offset at or above the next segment's base. Otherwise the copy is undone and retried.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rlm.daemon.local_log import LocalSegment
from rlm.errors import LogFormatError
from rlm.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, read_offset_checkpoint
from rlm.log.records import iter_batches, read_batch_bytes
from rlm.log.writer import PartitionWriter, WriterConfig
from rlm.types import KafkaUuid, TopicPartition

INT32_MAX = 2**31 - 1


class StraddlingBatchError(LogFormatError):
    """A batch of a rewritten local segment spans the remote end; it cannot be split without
    rewriting its records, so the segment is not copied (the remote copy stays as it is)."""

    retriable = True


class SegmentRewrittenError(LogFormatError):
    """The broker's cleaner replaced the segment's files while it was being copied; the copy is
    undone and the partition retried with backoff (the next view sees the rewritten segment)."""

    retriable = True


_GUARDED = (".log", ".index", ".timeindex")


def _identity(seg: LocalSegment) -> tuple[tuple[int, int, int], ...]:
    out = []
    for suffix in _GUARDED:
        st = os.stat(seg.path(suffix))
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RewriteGuard:
    """The identity (inode, size, mtime) of a segment's files, taken before its upload."""

    seg: LocalSegment
    before: tuple[tuple[int, int, int], ...]

    @classmethod
    def take(cls, seg: LocalSegment) -> RewriteGuard:
        """Raises :class:`SegmentRewrittenError` when the files are no longer the view's segment:
        another size, or a batch at or above the next segment's base (a merged group)."""
        try:
            guard = cls(seg, _identity(seg))
            last = seg.pdir.last_batch(seg.segment)
        except FileNotFoundError as e:
            raise SegmentRewrittenError("segment files replaced", path=seg.log_path) from e
        assert seg.next_offset is not None
        if guard.before[0][1] != seg.size or (last is not None and last.last_offset >= seg.next_offset):
            raise SegmentRewrittenError(
                f"segment no longer ends below {seg.next_offset} with {seg.size} bytes", path=seg.log_path)
        return guard

    def check(self) -> None:
        """Raises :class:`SegmentRewrittenError` when any file changed since :meth:`take`."""
        why = "segment files replaced during the copy"
        try:
            now = _identity(self.seg)
        except FileNotFoundError as e:
            raise SegmentRewrittenError(why, path=self.seg.log_path) from e
        if now != self.before:
            raise SegmentRewrittenError(why, path=self.seg.log_path)


SWAP_SUFFIX = ".swap"


def swap_in_progress(partition_dir: Path) -> bool:
    """The broker's cleaner is between deleting the segments it replaces and renaming the new ones
    from ``.swap`` into place: the directory lacks segments that exist, so nothing is decided
    from it now (a false ``remote_copy_gap`` would be reported: its first segment seems to be gone)."""
    try:
        return any(name.endswith(SWAP_SUFFIX) for name in os.listdir(partition_dir))
    except FileNotFoundError:
        return False


def policies(cleanup_policy: str | None) -> frozenset[str]:
    """The words of ``cleanup.policy`` (``"compact,delete"`` → {compact, delete}); None = delete."""
    if cleanup_policy is None:
        return frozenset({"delete"})
    words = {w.strip().lower() for w in cleanup_policy.strip("[] ").split(",")}
    return frozenset(w for w in words if w)


def is_compacted(cleanup_policy: str | None) -> bool:
    """The broker's cleaner may rewrite this topic's segments (``compact`` or ``compact,delete``)."""
    return "compact" in policies(cleanup_policy)


def is_compact_only(cleanup_policy: str | None) -> bool:
    """``compact`` without ``delete``: neither the broker nor remote retention deletes by time/size."""
    p = policies(cleanup_policy)
    return "compact" in p and "delete" not in p


def cleaner_checkpoint(partition_dir: Path, tp: TopicPartition) -> int | None:
    """The broker cleaner's first dirty offset for the partition (from its log dir's
    ``cleaner-offset-checkpoint``): everything below it was cleaned at least once. ``None`` when
    the cleaner never finished a pass over it (no entry, or no file yet)."""
    return read_offset_checkpoint(partition_dir.parent / CLEANER_OFFSET_CHECKPOINT).get(tp)


@dataclass(frozen=True, slots=True)
class TailSegment:
    """A segment written in the staging dir holding a local segment's batches from ``base_offset``."""

    directory: Path
    base_offset: int
    size: int
    max_timestamp: int

    def path(self, suffix: str) -> Path:
        return self.directory / f"{self.base_offset:020d}{suffix}"

    def remove(self) -> None:
        """Delete the staged files (they exist only for the copy)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def write_tail_segment(
    seg: LocalSegment, from_offset: int, staging: Path, topic_id: KafkaUuid
) -> TailSegment:
    """The batches of ``seg`` at or above ``from_offset``, unchanged (offsets, epochs, CRCs), as a
    segment of their own based at ``from_offset`` with offset and time indexes (its ``.txnindex`` is
    the copier's: :func:`rlm.daemon.aborts_ahead.remote_txn_index`).

    Raises :class:`StraddlingBatchError` when a batch begins below ``from_offset`` and ends at or
    above it (never made by Kafka: a cleaned batch stays inside its original segment).
    """
    directory = staging / f"tail-{from_offset:020d}"
    shutil.rmtree(directory, ignore_errors=True)  # left by a crash during an earlier copy
    config = WriterConfig(segment_bytes=INT32_MAX, segment_ms=2**62)
    writer = PartitionWriter(directory, topic_id=topic_id, config=config, start_offset=from_offset)
    max_ts = -1
    try:
        for header in iter_batches(seg.log_path):
            if header.last_offset < from_offset:
                continue
            assert seg.next_offset is not None
            if header.last_offset >= seg.next_offset:
                raise SegmentRewrittenError(
                    f"batch {header.base_offset}..{header.last_offset} at or above the next segment "
                    f"{seg.next_offset}: rewritten meanwhile", path=seg.log_path, position=header.position)
            if header.base_offset < from_offset:
                raise StraddlingBatchError(
                    f"batch {header.base_offset}..{header.last_offset} spans the remote end "
                    f"{from_offset - 1}", path=seg.log_path, position=header.position)
            batch = read_batch_bytes(seg.log_path, header)
            writer.append_at_own_offsets(batch, now=max(header.max_timestamp, 0))
            max_ts = max(max_ts, header.max_timestamp)
    finally:
        writer.close(clean=False)
    size = (directory / f"{from_offset:020d}.log").stat().st_size
    return TailSegment(directory, from_offset, size, max_ts)
