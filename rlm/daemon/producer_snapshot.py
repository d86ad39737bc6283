"""The producer snapshot for a segment's next offset, staged in the daemon's own work dir.

Kafka uploads ``<nextOffset>.snapshot`` with each segment so that a follower bootstrapping from
remote storage can restore producer state. The broker's file is copied into the staging dir
first (it is small, and the broker may delete it while the upload runs). If the broker has
already removed it, the producer state at that offset is rebuilt from the log with
``rlm.log.producer_state`` and the daemon says so in its log. Never written into the broker's dirs.
A full work dir raises :class:`rlm.errors.WorkDirError` (retriable) and leaves no partial file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import structlog

from rlm.daemon.local_log import LocalLogView
from rlm.daemon.workdir import atomic_write, writing
from rlm.errors import LogFileGoneError

log = structlog.get_logger(__name__)


def producer_snapshot_for(view: LocalLogView, next_offset: int, staging: Path) -> Path:
    """A path to the producer snapshot at ``next_offset``, inside ``staging``."""
    staged = staging / f"{next_offset:020d}.snapshot"
    tmp = staging / f".{next_offset:020d}.snapshot.{os.getpid()}.tmp"
    src = view.producer_snapshot_path(next_offset)
    with writing(staged):
        try:
            shutil.copyfile(src, tmp)
            os.replace(tmp, staged)
            return staged
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
        except BaseException:  # e.g. ENOSPC half-way: no partial file is left in the staging dir
            tmp.unlink(missing_ok=True)
            raise
    data = rebuild_snapshot(view, next_offset)
    atomic_write(staged, data)
    log.warning(
        "producer_snapshot_rebuilt",
        topic=view.topic_partition.topic,
        partition=view.topic_partition.partition,
        offset=next_offset,
        bytes=len(data),
        reason="the broker no longer has this snapshot; producer state rebuilt from the log",
    )
    return staged


def rebuild_snapshot(view: LocalLogView, next_offset: int) -> bytes:
    """Producer-state snapshot bytes at ``next_offset`` rebuilt from the local segments below it."""
    from rlm.log.producer_state import snapshot_bytes_at

    if not any(s.base_offset < next_offset for s in view.segments):
        raise LogFileGoneError(
            f"no local segment below offset {next_offset} to rebuild producer state from", path=view.dir
        )
    return snapshot_bytes_at(view.pdir, next_offset)
