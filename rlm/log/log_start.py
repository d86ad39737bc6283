"""The broker's log start offset, and when it is a ``DeleteRecords`` bound for the remote tier.

A partition's log start is ``max(remote log start, the broker's log start)`` — but only the part
of the broker's log start that ``DeleteRecords`` (or Kafka's own remote-aware logic) set. The
broker this sidecar runs beside does not know about tiering: its own local retention moves its
log start too (to the base offset of its first remaining segment), and that must not hide the
records the remote tier still holds. So a broker log start is taken as a bound only when local
retention cannot explain it (:func:`deletion_bound`):

* with the partition's log dir: it lies *above* the first local segment's base offset (retention
  deletes whole segments, so it leaves the log start at a segment's base; Kafka writes
  ``log-start-offset-checkpoint`` entries only in that case, see :func:`checkpoint_log_start`);
* and it is not at a boundary of the remote tier (a remote segment's start, or the remote end):
  another leader's local retention (propagated to this replica, whose segments may roll
  elsewhere) leaves it exactly there, since remote segments are that leader's segments;
* without a log dir (a broker answer alone): it must lie strictly inside a remote segment; a value
  past the remote end could be retention past a copy gap and is left to the daemon, which has
  the log dir and publishes the bound (:mod:`rsm_plugins.log_start`).

Limitation (documented in docs/fetcher.md): a ``DeleteRecords`` offset exactly on a remote
segment boundary looks like retention and is not taken from the broker; the records below it are
still deleted locally by the broker, and the published bound applies once the daemon saw it
above its first local segment.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rlm.errors import LogFileGoneError
from rlm.log.checkpoints import read_offset_checkpoint
from rlm.types import TopicPartition

#: Kafka's file in each log dir (``LogManager.LogStartOffsetCheckpointFile``).
CHECKPOINT_NAME = "log-start-offset-checkpoint"


def checkpoint_log_start(log_dir: Path, tp: TopicPartition) -> int | None:
    """The partition's entry in ``<log_dir>/log-start-offset-checkpoint`` (version 0, count,
    ``topic partition offset`` lines), ``None`` when absent. Kafka lists a partition only when
    its log start is above its first segment's base offset, i.e. after ``DeleteRecords``; the
    file is rewritten every ``log.flush.start.offset.checkpoint.interval.ms`` (60 s)."""
    return read_offset_checkpoint(log_dir / CHECKPOINT_NAME).get(tp)


def first_segment_offset(partition_dir: Path) -> int | None:
    """Base offset of the oldest ``.log`` file in the partition directory (files the broker is
    deleting are renamed ``.log.deleted`` and do not count); ``None`` when there is none."""
    try:
        names = os.listdir(partition_dir)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LogFileGoneError(f"cannot list {partition_dir}: {e}", path=partition_dir) from e
    bases = [int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit()]
    return min(bases) if bases else None


def deletion_bound(candidate: int | None, remote: Iterable[tuple[int, int]],
                   local_first: int | None) -> int | None:
    """``candidate`` (a broker log start) when only ``DeleteRecords`` explains it, else ``None``.

    ``remote`` are the ``(start, end)`` offsets (inclusive) of the remote segments on the lineage;
    ``local_first`` the base offset of the broker's first local segment, read *after* the
    candidate (so a segment deleted in between cannot make retention look like a bound), or
    ``None`` when no log dir is known. See the module docstring for the rules and why.
    """
    if candidate is None or candidate <= 0:
        return None
    if local_first is not None and candidate <= local_first:
        return None
    segs = sorted(remote)
    if not segs:
        return candidate if local_first is not None else None
    remote_start, remote_end = segs[0][0], max(e for _, e in segs) + 1
    if candidate <= remote_start:
        return None  # nothing remote below it: the bound changes nothing
    if candidate >= remote_end:
        return candidate if local_first is not None and candidate > remote_end else None
    if any(start == candidate for start, _ in segs):
        return None
    return candidate
