"""Remote segments written back into a stopped broker's partition directories (``rlm restore``).

:func:`plan_restore` picks the newest whole segments of the readers' chain for one partition
(none below the published ``DeleteRecords`` bound), :func:`apply_restore` writes them byte for
byte with their indexes, the producer snapshot, an empty active segment, the leader-epoch
checkpoint, the aborts of transactions open at the end (:mod:`rlm.recovery.open_txns`) and the
log start; every file to a temporary name, fsynced and renamed, idempotently. What the command
does around it, and why, is in :mod:`rlm.commands.restore`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm.daemon.crash import crash_point
from rlm.errors import LogFileGoneError, RlmError
from rlm.lineage import chain, checkpoint_bytes, epochs_for_range, lineage_from_segments
from rlm.log.checkpoints import (
    encode_offset_checkpoint,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
)
from rlm.log.log_start import CHECKPOINT_NAME
from rlm.log.txn_index import AbortedTxn
from rlm.recovery.open_txns import plan_aborts, write_aborts
from rlm.types import IndexType, KafkaUuid, RemoteLogSegmentMetadata, TopicIdPartition, TopicPartition
from rlmm.api import RemoteLogMetadataManager
from rsm_plugins.api import RemoteStorageManager
from rsm_plugins.streams import copy_to


class RestoreRefusedError(RlmError):
    """The target partition directory already holds records, or cannot take the restored files."""


@dataclass
class PartitionRestore:
    """What restore does for one partition."""

    tp: TopicIdPartition
    target: Path
    new_topic_id: KafkaUuid | None
    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    epochs: list[tuple[int, int]] = field(default_factory=list)
    skipped: str | None = None
    written: list[str] = field(default_factory=list)
    epoch_problem: str | None = None
    """Why the new cluster's leader epoch is too low for the restored epochs (see
    :func:`check_leader_epochs`), ``None`` when it is not."""
    aborted: list[AbortedTxn] = field(default_factory=list)
    """Transactions open at the restored end, aborted as the old coordinator would
    (:mod:`rlm.recovery.open_txns`)."""
    published_log_start: int | None = None
    """The source's published ``DeleteRecords`` bound, ``None`` when none was published."""

    @property
    def first_offset(self) -> int | None:
        return self.segments[0].start_offset if self.segments else None

    @property
    def log_start(self) -> int | None:
        """The restored partition's log start: the published bound when it lies inside the first
        restored segment, else that segment's first offset."""
        if not self.segments:
            return None
        return max(self.segments[0].start_offset, self.published_log_start or 0)

    @property
    def next_offset(self) -> int | None:
        return self.segments[-1].end_offset + 1 if self.segments else None


def _name(offset: int, suffix: str) -> str:
    return f"{offset:020d}{suffix}"


def plan_restore(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, target: Path,
                 local_bytes: int, log_start: int | None = None) -> PartitionRestore:
    """The newest whole segments of the read chain, up to ``local_bytes`` (at least one), none
    wholly below ``log_start`` (the source's published ``DeleteRecords`` bound)."""
    meta = target / "partition.metadata"
    new_id = read_partition_metadata(meta) if meta.exists() else None
    pr = PartitionRestore(tp, target, new_id, published_log_start=log_start)
    if not target.is_dir() or new_id is None:
        pr.skipped = f"{target}: no partition directory with partition.metadata on this broker"
        return pr
    segments = list(rlmm.list_remote_log_segments(tp))
    lineage = lineage_from_segments(segments)
    links, _gaps = chain(segments, lineage)
    picked: list[RemoteLogSegmentMetadata] = []
    total = 0
    for md, first, last in reversed(links):
        if log_start is not None and md.end_offset < log_start:
            break  # deleted by DeleteRecords: the source broker no longer served it
        if first != md.start_offset or last != md.end_offset:
            break  # a segment read only in part (lineage cut or overlap): the local log stops here
        if picked and (total + md.segment_size_in_bytes > local_bytes
                       or md.end_offset + 1 != picked[-1].start_offset):
            break
        picked.append(md)
        total += md.segment_size_in_bytes
    if not picked:
        below = f" at or above the published log start {log_start}" if log_start is not None else ""
        pr.skipped = f"{tp.topic}-{tp.partition}: no whole remote segment on the lineage{below} to restore"
        return pr
    pr.segments = list(reversed(picked))
    pr.epochs = epochs_for_range(lineage, pr.segments[0].start_offset, pr.segments[-1].end_offset + 1)
    pr.epoch_problem = check_leader_epochs(target / "leader-epoch-checkpoint", pr.epochs)
    return pr


def check_leader_epochs(checkpoint: Path, restored: list[tuple[int, int]]) -> str | None:
    """Refuse a restore whose epochs the new broker would drop.

    When the restarted broker becomes leader with epoch ``E`` it assigns ``E`` at the log end, and
    Kafka's ``LeaderEpochFileCache.assign`` removes every entry whose epoch is not below ``E``: the
    restored epochs above it are lost, new records carry an epoch *lower* than the history's, and
    the sidecar's lineage takes the new segments for a deposed leader's tail (off-lineage:
    quarantined, then deleted). The new leader's next epoch is above the one in its partition
    directory (``checkpoint``, as the broker left it), so that must be at least the highest
    restored epoch. A checkpoint equal to the restored epochs is a rerun's."""
    if not restored:
        return None
    try:
        seen = [(e.epoch, e.start_offset) for e in read_leader_epoch_checkpoint(checkpoint)]
    except LogFileGoneError:
        seen = []
    if seen == restored:
        return None
    have = max((e for e, _ in seen), default=-1)
    need = max(e for e, _ in restored)
    if need <= have:
        return None
    return (f"{checkpoint}: the new cluster's leader epoch is {have}, below the restored epoch {need}; "
            "the broker would drop the restored epochs above its own. Restart the new cluster's broker "
            "(each leader change raises the epoch) until its leader-epoch-checkpoint shows an epoch of "
            f"at least {need}, then rerun (or pass --ignore-leader-epochs)")


def _check_target(pr: PartitionRestore, files: list[str]) -> None:
    """Refuse a directory holding records or files restore would not write (rerun: identical names)."""
    ours = set(files) | {"partition.metadata", "leader-epoch-checkpoint"}
    nxt = pr.next_offset or 0
    for p in pr.target.iterdir():
        if p.name in ours or p.name == _name(nxt, ".txnindex") or (
                p.suffix == ".snapshot" and p.stem.isdigit() and int(p.stem) > nxt):
            continue  # what aborting the open transactions writes (:mod:`rlm.recovery.open_txns`)
        empty_first = p.name.startswith(_name(0, ".")) and p.is_file() and p.stat().st_size == 0
        if empty_first or p.name.endswith(".tmp-restore"):
            continue  # the broker's empty first segment, or a leftover of an interrupted run
        raise RestoreRefusedError(
            f"{pr.target}: holds {p.name}; restore writes only into a partition directory without "
            "records (created by the new cluster, broker stopped)")


def _write(path: Path, data: bytes | None = None, stream: Any = None) -> None:
    tmp = path.with_name(path.name + ".tmp-restore")
    with open(tmp, "wb") as out:
        if data is not None:
            out.write(data)
        else:
            with stream as src:
                copy_to(src, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def apply_restore(rsm: RemoteStorageManager, pr: PartitionRestore) -> None:
    """Write the planned files into the partition directory (see the module docstring)."""
    if pr.epoch_problem is not None:
        raise RestoreRefusedError(pr.epoch_problem)
    files: list[tuple[str, RemoteLogSegmentMetadata, IndexType | None]] = []
    for md in pr.segments:
        base = md.start_offset
        files.append((_name(base, ".index"), md, IndexType.OFFSET))
        files.append((_name(base, ".timeindex"), md, IndexType.TIMESTAMP))
        if not md.txn_index_empty:
            files.append((_name(base, ".txnindex"), md, IndexType.TRANSACTION))
        files.append((_name(base, ".log"), md, None))  # the .log last: a segment is whole once it is there
    last = pr.segments[-1]
    nxt = last.end_offset + 1
    files.append((_name(nxt, ".snapshot"), last, IndexType.PRODUCER_SNAPSHOT))
    # an empty active segment at the old end offset, as a broker's roll leaves it: new records go
    # there, so the restored segments stay whole and equal to the remote ones (appended to, the
    # newest would be copied again by the sidecar, overlapping the adopted history)
    active = [_name(nxt, suffix) for suffix in (".index", ".timeindex", ".log")]
    _check_target(pr, [name for name, _, _ in files] + active)
    for p in pr.target.iterdir():
        if p.name.startswith(_name(0, ".")) and p.is_file() and p.stat().st_size == 0 and \
                p.name not in {name for name, _, _ in files}:
            p.unlink()  # the broker's empty first segment, replaced by the restored ones
    done = {md.remote_log_segment_id for md in pr.segments
            if (log := pr.target / _name(md.start_offset, ".log")).exists()
            and log.stat().st_size == md.segment_size_in_bytes}
    for name, md, index in files:
        path = pr.target / name
        if (md.remote_log_segment_id in done and index is not IndexType.PRODUCER_SNAPSHOT) or (
                index is IndexType.PRODUCER_SNAPSHOT and path.exists()):
            continue  # written by an earlier run: a segment's .log, and the snapshot, land last
        stream = rsm.fetch_log_segment(md, 0) if index is None else rsm.fetch_index(md, index)
        _write(path, stream=stream)
        pr.written.append(name)
        if index is None:
            crash_point("restore_after_segment")
    for name in active:
        if not (pr.target / name).exists():
            _write(pr.target / name, data=b"")
            pr.written.append(name)
    aborts = plan_aborts(pr.target / _name(nxt, ".snapshot"), nxt, pr.epochs[-1][0] if pr.epochs else 0)
    pr.aborted = aborts.aborted
    pr.written += write_aborts(pr.target, aborts, _write)
    _write(pr.target / "leader-epoch-checkpoint", data=checkpoint_bytes(pr.epochs, nxt))
    pr.written.append("leader-epoch-checkpoint")
    if write_log_start(pr):
        pr.written.append(f"../{CHECKPOINT_NAME}")


def write_log_start(pr: PartitionRestore) -> bool:
    """Set the partition's entry of the log dir's ``log-start-offset-checkpoint`` to the
    restored log start when that lies inside the first restored segment; True when written.

    Why this file: at start-up Kafka's ``LogManager`` reads each log dir's
    ``log-start-offset-checkpoint`` and ``LogLoader`` takes the log start as the maximum of that
    entry and the first segment's base offset, as after a ``DeleteRecords`` it learned from a
    checkpoint. The other partitions' entries are kept (the broker is stopped: nothing else writes
    the file meanwhile); an entry already at or above ours is left alone (a rerun)."""
    start, first = pr.log_start, pr.first_offset
    if start is None or first is None or start <= first:
        return False
    path = pr.target.parent / CHECKPOINT_NAME
    entries = read_offset_checkpoint(path)
    key = TopicPartition(pr.target.name.rsplit("-", 1)[0], pr.tp.partition)
    if entries.get(key, -1) >= start:
        return False
    entries[key] = start
    _write(path, data=encode_offset_checkpoint(entries))
    return True


def topic_partitions(rlmm: RemoteLogMetadataManager, topic: str) -> list[TopicIdPartition]:
    tps = sorted((tp for tp in rlmm.known_partitions() if tp.topic == topic), key=lambda tp: tp.partition)
    if not tps:
        raise RlmError(f"topic {topic!r} has no remote segments in the metadata store")
    return tps
