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
   end offset, in the active segment (:mod:`rlm.recovery.open_txns`).

Every file is written to a temporary name, fsynced and renamed. The directory must hold no
record yet (the broker's empty first segment is replaced); a rerun that finds exactly the files
it writes leaves them (idempotent), anything else is refused. Nothing is written without
``--execute``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlm.config import load_config
from rlm.exit_codes import ExitCode
from rlm.recovery.restore import (
    PartitionRestore,
    RestoreRefusedError,
    apply_restore,
    plan_restore,
    topic_partitions,
)
from rsm_plugins.api import RemoteStorageManager


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
    """``--adopt-into``: the old history into the new cluster's store (:mod:`rlm.recovery.adopt`)."""
    from rlm.plugin_setup import load_rlmm
    from rlm.recovery.adopt import AdoptConflictError, apply_adoption, plan_adoptions

    target_config = load_config(args.adopt_into)
    node_id = config.node_id if config.node_id is not None else -1
    refused: list[str] = []
    source = load_rlmm(config, node_id, read_only=True)
    try:
        source.follow_all()
        plans, skipped = plan_adoptions(source, topic_partitions(source, args.topic), Path(args.log_dir),
                                        to_topic)
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
    (:mod:`rlm.recovery.producer_ids`)."""
    from confluent_kafka.admin import AdminClient

    from rlm.recovery.producer_ids import highest_restored_producer_id, reserve_past

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
            for tp in topic_partitions(rlmm, args.topic):
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
