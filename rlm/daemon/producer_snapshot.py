"""The producer snapshot for a segment's next offset, staged in the daemon's own work dir.

Kafka uploads ``<nextOffset>.snapshot`` with each segment so that a follower bootstrapping from
remote storage can restore producer state. The broker's file is copied into the staging dir
first (it is small, and the broker may delete it while the upload runs). If the broker has
already removed it, the producer state at that offset is rebuilt from the log with
``rlm.log.producer_state`` and the daemon says so in its log. Never written into the broker's dirs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import structlog

from rlm.daemon.local_log import LocalLogView
from rlm.errors import LogFileGoneError

log = structlog.get_logger(__name__)


def producer_snapshot_for(view: LocalLogView, next_offset: int, staging: Path) -> Path:
    """A path to the producer snapshot at ``next_offset``, inside ``staging``."""
    staged = staging / f"{next_offset:020d}.snapshot"
    tmp = staging / f".{next_offset:020d}.snapshot.{os.getpid()}.tmp"
    src = view.producer_snapshot_path(next_offset)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, staged)
        return staged
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
    data = rebuild_snapshot(view, next_offset)
    tmp.write_bytes(data)
    os.replace(tmp, staged)
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
