"""Writes into the daemon's own work dir: atomic, and a full disk becomes a typed error.

Why: the work dir holds state the daemon needs again after a restart (status file, epoch
history, known partitions, staged producer snapshots, the metadata store's snapshots). A full
file system (ENOSPC), a quota (EDQUOT), a read-only remount (EROFS) or an I/O error must not
leave a half-written file in place of a good one, and must be reported as what it is, naming
the path: :class:`rlm.errors.WorkDirError`, retriable, so the partition is retried with backoff
and converges once space is freed. Every file is written to a temporary name and renamed.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlm.errors import WorkDirError
from rlm.types import TopicIdPartition, check_topic_name

#: the errnos that mean "this file system cannot take the write now", not a bug of ours
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Translate a full/read-only/failing file system under ``path`` into :class:`WorkDirError`."""
    try:
        yield
    except OSError as e:
        if e.errno not in DISK_ERRNOS:
            raise
        name = errno.errorcode.get(e.errno or 0, str(e.errno))
        raise WorkDirError(
            f"cannot write the daemon's work dir ({e.strerror}); no partial file is left (a replaced "
            "file keeps its previous version) and the write is retried",
            path=path,
            errno_name=name,
        ) from e


def temp_name(path: Path) -> Path:
    """A temporary sibling of ``path`` unique to this process and thread (hidden, ``.tmp``)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def atomic_write(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Replace ``path`` with ``data`` all at once: readers see the old file or the new one."""
    tmp = temp_name(path)
    with writing(path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def partition_state_file(directory: Path, tp: TopicIdPartition) -> Path:
    """``<dir>/<topic>-<partition>-<topic id>.json``: one small state file per partition in the
    work dir (the topic id keeps a re-created topic's state apart; the name is checked before
    it becomes a path)."""
    return directory / f"{check_topic_name(tp.topic)}-{tp.partition}-{tp.topic_id.text}.json"
