"""``rlm restore --config F --topic T --log-dir DIR [--to-topic T2] [--local-bytes N] [--execute]``.

Writes the newest remote segments of a tiered topic back into a **stopped** broker's partition
directories, so that on start the broker serves them at the **same offsets** (its log start is the
first restored offset). This is the local half of a restore into a new cluster (see
docs/disaster-recovery.md for the whole procedure and what is not done yet):

1. the topic exists in the new cluster (same partition count), so the broker has created
   ``DIR/<T2>-<p>/`` with ``partition.metadata`` naming the **new** topic id, which is kept;
2. the broker is stopped; ``--config`` names the bucket and a metadata store holding the old
   history (e.g. one filled by ``rlm metadata rebuild``);
3. per partition of ``T`` found in the store whose directory exists under ``DIR`` (a partition
   this broker does not host is reported and skipped), the segments of the readers' chain (same
   lineage rules as every reader, :func:`rlm.lineage.chain`) are taken from the newest backwards
   until ``--local-bytes`` is reached (at least one segment); each is written byte for byte with
   its ``.index``, ``.timeindex`` and non-empty ``.txnindex``; then the producer snapshot of the
   newest (``<next offset>.snapshot``: idempotent producers keep their sequence state), an empty
   active segment at the old end offset (new records never extend a restored segment) and a
   ``leader-epoch-checkpoint`` of the lineage over the restored range.
4. the partition's **log start** is the source's: the published ``DeleteRecords`` bound
   (:mod:`rsm_plugins.log_start`, read from the bucket under the old topic id) or the first
   restored offset, whichever is higher. Segments wholly below it are not restored; a bound
   inside the first restored segment is written to the log dir's ``log-start-offset-checkpoint``
   (the file the broker reads its log starts from at start-up), so the restored broker's earliest
   offset is the source's and nothing ``DeleteRecords`` removed comes back. The segment itself
   stays byte for byte the remote one (the broker never trims a segment either).
5. a transaction open at the restored end (its marker was never tiered) is aborted the way the
   old cluster's coordinator would have after ``transaction.timeout.ms``: ABORT markers at the old
   end offset, in the active segment (:mod:`.restore_txn`).

Every file is written to a temporary name, fsynced and renamed. The directory must hold no
record yet (the broker's empty first segment is replaced); a rerun that finds exactly the files
it writes leaves them (idempotent), anything else is refused. Nothing is written without
``--execute``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm.config import load_config
from rlm.daemon.crash import crash_point
from rlm.errors import LogFileGoneError, RlmError
from rlm.exit_codes import ExitCode
from rlm.lineage import chain, checkpoint_bytes, epochs_for_range, lineage_from_segments
from rlm.log.checkpoints import (
    encode_offset_checkpoint,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
)
from rlm.log.log_start import CHECKPOINT_NAME
from rlm.log.txn_index import AbortedTxn
from rlm.types import IndexType, KafkaUuid, RemoteLogSegmentMetadata, TopicIdPartition, TopicPartition
from rlmm.api import RemoteLogMetadataManager
from rsm_plugins.api import RemoteStorageManager

from .restore_txn import plan_aborts, write_aborts

_CHUNK = 1 << 20


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
    """Transactions open at the restored end, aborted as the old coordinator would (:mod:`.restore_txn`)."""
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
            continue  # what aborting the open transactions writes (:mod:`.restore_txn`)
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
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
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


def _json(pr: PartitionRestore) -> dict[str, Any]:
    return {"topic": pr.tp.topic, "partition": pr.tp.partition, "target": str(pr.target),
            "new_topic_id": pr.new_topic_id.text if pr.new_topic_id else None,
            "first_offset": pr.first_offset, "next_offset": pr.next_offset, "log_start": pr.log_start,
            "published_log_start": pr.published_log_start,
            "aborted_transactions": [{"producer_id": a.producer_id, "first_offset": a.first_offset,
                                      "marker_offset": a.last_offset} for a in pr.aborted],
            "segments": [{"segment_id": md.remote_log_segment_id.id.text, "start_offset": md.start_offset,
                          "end_offset": md.end_offset, "size": md.segment_size_in_bytes}
                         for md in pr.segments],
            "leader_epochs": [list(e) for e in pr.epochs], "leader_epoch_problem": pr.epoch_problem,
            "skipped": pr.skipped, "written": pr.written}


def _adopt(args: argparse.Namespace, config: Any, rsm: RemoteStorageManager, to_topic: str) -> int:
    """``--adopt-into``: the old history into the new cluster's store (:mod:`.restore_adopt`)."""
    from rlm.plugin_setup import load_rlmm

    from .restore_adopt import AdoptConflictError, Adoption, apply_adoption, plan_adoption

    target_config = load_config(args.adopt_into)
    node_id = config.node_id if config.node_id is not None else -1
    plans: list[Adoption] = []
    skipped: list[str] = []
    refused: list[str] = []
    source = load_rlmm(config, node_id, read_only=True)
    try:
        source.follow_all()
        for tp in _topic_partitions(source, args.topic):
            meta = Path(args.log_dir) / f"{to_topic}-{tp.partition}" / "partition.metadata"
            if not meta.exists():
                skipped.append(f"{tp.topic}-{tp.partition}: no {meta} (the partition is not on this broker)")
                continue
            plans.append(plan_adoption(source, tp, read_partition_metadata(meta), to_topic))
    finally:
        source.close()
    if args.execute and plans:
        target = load_rlmm(target_config, node_id)
        try:
            for ad in plans:
                try:
                    apply_adoption(target, rsm, ad, release_source=args.release_source)
                except AdoptConflictError as e:
                    refused.append(str(e))
        finally:
            target.close()
    doc = {"execute": bool(args.execute), "skipped": skipped, "refused": refused,
           "adopted": [{"topic": ad.target.topic, "partition": ad.target.partition,
                        "from_topic_id": ad.source.topic_id.text, "topic_id": ad.target.topic_id.text,
                        "segments": len(ad.segments), "written": ad.written, "already_present": ad.already,
                        "referenced": ad.referenced,
                        "released_source": bool(args.release_source and args.execute),
                        "first_offset": ad.segments[0].start_offset if ad.segments else None,
                        "next_offset": max(md.end_offset for md in ad.segments) + 1 if ad.segments else None,
                        "log_start": ad.log_start} for ad in plans]}
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for line in skipped + refused:
            print(line)
        for ad in plans:
            verb = "adopted" if args.execute else "would adopt"
            print(f"{ad.target.topic}-{ad.target.partition}: {verb} {len(ad.segments)} segments of topic id "
                  f"{ad.source.topic_id.text} under {ad.target.topic_id.text} "
                  f"({ad.written} written, {ad.already} already there)")
    return ExitCode.FAILURE if refused else ExitCode.OK


def _reserve(args: argparse.Namespace, to_topic: str) -> int:
    """``--reserve-producer-ids``: the new cluster's allocator past the restored ids
    (:mod:`.restore_pids`)."""
    from confluent_kafka.admin import AdminClient

    from .restore_pids import highest_restored_producer_id, reserve_past

    dirs = sorted(Path(args.log_dir).glob(f"{to_topic}-*"))
    highest = highest_restored_producer_id(d for d in dirs if d.name[len(to_topic) + 1:].isdigit())
    md = AdminClient({"bootstrap.servers": args.reserve_producer_ids}).list_topics(timeout=30)
    brokers = sorted((str(b.host), int(b.port)) for b in md.brokers.values())
    first = reserve_past(brokers, highest) if args.execute and highest >= 0 else {}
    doc = {"execute": bool(args.execute), "highest_restored_producer_id": highest,
           "brokers": [f"{h}:{p}" for h, p in brokers], "first_new_producer_id": first}
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"highest restored producer id: {highest}; brokers {doc['brokers']}; "
              + (f"first new ids {first}" if args.execute else "dry run (add --execute)"))
    return ExitCode.OK


def _topic_partitions(rlmm: RemoteLogMetadataManager, topic: str) -> list[TopicIdPartition]:
    tps = sorted((tp for tp in rlmm.known_partitions() if tp.topic == topic), key=lambda tp: tp.partition)
    if not tps:
        raise RlmError(f"topic {topic!r} has no remote segments in the metadata store")
    return tps


def restore(args: argparse.Namespace) -> int:
    from rlm.logging_setup import configure_logging
    from rlm.plugin_setup import load_rlmm, load_rsm

    config = load_config(args.config)
    configure_logging("console", "critical")
    node_id = config.node_id if config.node_id is not None else -1
    to_topic = args.to_topic or args.topic
    if args.reserve_producer_ids is not None:
        return _reserve(args, to_topic)
    rsm = load_rsm(config, node_id)
    if args.adopt_into is not None:
        try:
            return _adopt(args, config, rsm, to_topic)
        finally:
            rsm.close()
    plans: list[PartitionRestore] = []
    refused: list[str] = []
    local_bytes = args.local_bytes
    if local_bytes is None:  # the topic's local retention (-1: unlimited = everything; -2 never left)
        local_bytes = config.topic_config(to_topic).local_retention_bytes
        local_bytes = (1 << 62) if local_bytes < 0 else local_bytes
    try:
        rlmm = load_rlmm(config, node_id, read_only=True)
        try:
            rlmm.follow_all()
            for tp in _topic_partitions(rlmm, args.topic):
                target = Path(args.log_dir) / f"{to_topic}-{tp.partition}"
                plans.append(plan_restore(rlmm, tp, target, local_bytes, rsm.read_log_start_offset(tp)))
                if args.ignore_leader_epochs:
                    plans[-1].epoch_problem = None
        finally:
            rlmm.close()
        if args.execute:
            for pr in plans:
                if pr.skipped is None:
                    try:
                        apply_restore(rsm, pr)
                    except RestoreRefusedError as e:
                        refused.append(str(e))
                        pr.skipped = f"refused: {e}"
    finally:
        rsm.close()
    if args.json:
        doc = {"execute": bool(args.execute), "partitions": [_json(p) for p in plans]}
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for pr in plans:
            if pr.skipped:
                print(f"{pr.tp.topic}-{pr.tp.partition}: skipped: {pr.skipped}")
                continue
            verb = "restored" if args.execute else "would restore"
            print(f"{pr.tp.topic}-{pr.tp.partition} -> {pr.target}: {verb} offsets {pr.first_offset}.."
                  f"{(pr.next_offset or 0) - 1} ({len(pr.segments)} segments), log start {pr.log_start}, "
                  f"epochs {pr.epochs}")
            if pr.epoch_problem:
                print(f"  leader epochs: {pr.epoch_problem}")
        if not args.execute:
            print("dry run: nothing written (add --execute; the broker must be stopped)")
    return ExitCode.FAILURE if refused else ExitCode.OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("restore", help="write the newest remote segments into a stopped broker",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", "-c", type=Path, required=True,
                   help="configuration naming the bucket and a metadata store with the topic's history")
    p.add_argument("--topic", required=True, help="the tiered topic (as named in remote storage)")
    p.add_argument("--to-topic", help="the topic in the new cluster (default: the same name)")
    p.add_argument("--log-dir", type=Path, required=True, help="the stopped broker's log dir")
    p.add_argument("--local-bytes", type=int, default=None,
                   help="newest segments up to this many bytes per partition (at least the newest one; "
                        "default: the topic's local.retention.bytes in --config's topic settings, "
                        "-1 there = every segment)")
    p.add_argument("--adopt-into", type=Path, metavar="F2",
                   help="instead of writing files: write the old history into the metadata store of the "
                        "new cluster's sidecar configuration F2, under the new topic id (read from "
                        "--log-dir), pointing at the existing objects (the store must be reachable)")
    p.add_argument("--release-source", action="store_true",
                   help="with --adopt-into: the source topic id no longer references the adopted objects "
                        "(its cluster is gone); retention of the adopters alone decides when they are "
                        "deleted (default: kept while the source's descriptors say it holds them)")
    p.add_argument("--reserve-producer-ids", metavar="BOOTSTRAP",
                   help="instead of writing files: once the new cluster runs with the restored files and "
                        "before producers connect, advance its producer-id allocator past the highest "
                        "producer id of the restored snapshots under --log-dir (plaintext listeners)")
    p.add_argument("--ignore-leader-epochs", action="store_true",
                   help="restore even when the new cluster's leader epoch is below the restored epochs "
                        "(the broker then drops them; see docs/disaster-recovery.md)")
    p.add_argument("--execute", action="store_true", help="write the files (default: print the plan)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=restore)
