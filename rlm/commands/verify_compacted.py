"""``rlm verify --deep`` on a compacted topic: a local segment the broker's cleaner rewrote after it
was tiered differs from the remote copy byte for byte, legitimately.

The cleaner only ever *removes* records (superseded values, expired tombstones, aborted data,
markers it no longer needs) and keeps every survivor at its offset with its key, value and
headers. So what is comparable is: every record of the local segment below the remote end is, at
the same offset, a record of the remote copy with the same key, value and headers (a marker where
the remote holds a marker). The remote copy is then a superset of what the broker kept, which is
what readers of the tiered history need. Anything else — a record the remote copy does not hold,
or holds with other content — is reported as ``local_segment_mismatch``, as for a delete topic.

Remote segments are streamed into a temporary file and walked record by record in offset order
beside the local segment, so memory stays flat whatever the segment sizes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from rlm.config import DaemonConfig
from rlm.errors import RlmError
from rlm.log.model import ControlRecord, Record
from rlm.log.records import iter_records
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition, TopicPartition
from rsm_plugins.api import RemoteStorageManager
from rsm_plugins.streams import copy_to

Comparable = tuple[int, bool, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def is_compacted_partition(config: DaemonConfig, tp: TopicIdPartition) -> bool:
    """The broker's cleaner may have worked on ``tp``: the sidecar's config says the topic is
    compacted, or a configured log dir's ``cleaner-offset-checkpoint`` has an entry for it."""
    from rlm.daemon.compacted import is_compacted

    if is_compacted(config.topic_config(tp.topic).cleanup_policy):
        return True
    return any(has_cleaner_entry(Path(d) / f"{tp.topic}-{tp.partition}", tp.topic_partition)
               for d in config.log_dirs)


def has_cleaner_entry(partition_dir: Path, tp: TopicPartition) -> bool:
    """The log dir's ``cleaner-offset-checkpoint`` names ``tp`` (an unreadable file: no)."""
    from rlm.daemon.compacted import cleaner_checkpoint

    try:
        return cleaner_checkpoint(partition_dir, tp) is not None
    except RlmError:
        return False


def _comparable(r: Record | ControlRecord) -> Comparable:
    if isinstance(r, ControlRecord):
        return (r.offset, True, None, None, ())
    return (r.offset, False, r.key, r.value, r.headers)


def _records(path: Path, lo: int, hi: int) -> Iterator[Comparable]:
    for _, r in iter_records(path):
        if lo <= r.offset <= hi:
            yield _comparable(r)


def _remote_records(rsm: RemoteStorageManager, segments: Sequence[RemoteLogSegmentMetadata], lo: int, hi: int,
                    scratch: Path) -> Iterator[Comparable]:
    for md in sorted(segments, key=lambda m: m.start_offset):
        if md.end_offset < lo or md.start_offset > hi:
            continue
        path = scratch / f"{md.start_offset:020d}.log"
        with rsm.fetch_log_segment(md, 0) as src, open(path, "wb") as dst:
            copy_to(src, dst)
        yield from _records(path, lo, hi)
        path.unlink()


def compaction_mismatch(rsm: RemoteStorageManager, segments: Sequence[RemoteLogSegmentMetadata],
                        local_log: Path, lo: int, hi: int, *, remote_may_lack: bool = False) -> str | None:
    """``None`` when each record of ``local_log`` at offsets ``lo..hi`` is the remote copy's record
    at that offset (the remote copy holds a superset: compaction, not damage); else what differs.
    ``remote_may_lack``: the remote copy was compacted by the sidecar's remote compaction
    (docs/remote-compaction-job.md), which removes records the broker may still hold: then only
    records both hold must be the same."""
    with tempfile.TemporaryDirectory(prefix="rlm-verify-") as tmp:
        remote = _remote_records(rsm, segments, lo, hi, Path(tmp))
        have: Comparable | None = None
        for want in _records(local_log, lo, hi):
            while have is None or have[0] < want[0]:
                have = next(remote, None)
                if have is None:
                    if remote_may_lack:
                        return None
                    return f"offset {want[0]} is in the local segment but not in the remote copy"
            if have != want:
                if have[0] != want[0]:
                    if remote_may_lack:
                        continue
                    return f"offset {want[0]} is in the local segment but not in the remote copy"
                return f"the record at offset {want[0]} differs from the remote copy's"
    return None
