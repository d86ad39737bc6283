"""``rlm metadata rebuild --config F [--topic T] [--execute] [--json]``: the metadata store from the bucket.

For disaster recovery: the cluster (and its ``__remote_log_metadata``) is gone, the bucket is not.
For each partition the storage plugin lists (:meth:`RemoteStorageManager.list_partitions`):

1. every complete segment is described (:mod:`rlm.recovery.rebuild_scan`: its descriptor, or its
   own files for segments copied before descriptors existed);
2. the current leader-epoch lineage is chosen with the read core's own rules
   (:func:`rlm.lineage.lineage_from_segments` and :func:`rlm.lineage.judge_segments`): duplicates
   from leader changes are all kept (the readers' chain picks one, as it did before), a copy whose
   records diverge from the lineage (the tail of a deposed leader after an unclean election) and
   that no reader's chain uses is skipped — it would be quarantined and deleted by the daemon;
3. with ``--execute``, each kept segment is written, oldest first, as the daemon writes a copy:
   COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED, under its original segment id.

Without ``--execute`` only the plan is printed (kept, skipped and why). Idempotent: a segment
already FINISHED with the same offsets and epochs is left alone, one left STARTED by an
interrupted rebuild is finished, so a rerun after a crash duplicates nothing. A partition whose
store already holds segments the plan does not (or holds them differently) is refused: the store
is not empty, and merging two histories is not a rebuild.

Exit status: 0 done (or dry run), 1 a partition was refused or a segment was unusable, 3 bad config.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlm.config import load_config
from rlm.exit_codes import ExitCode
from rlm.recovery.rebuild import PartitionPlan, RebuildConflictError, apply_plan, build_plans
from rlm.recovery.rebuild_scan import FoundSegment


def _seg(f: FoundSegment) -> dict[str, Any]:
    md = f.metadata
    return {"segment_id": md.remote_log_segment_id.id.text, "start_offset": md.start_offset,
            "end_offset": md.end_offset, "epochs": [list(e) for e in md.segment_leader_epochs],
            "size": md.segment_size_in_bytes, "source": f.source}


def plan_json(p: PartitionPlan) -> dict[str, Any]:
    return {"topic": p.tp.topic, "topic_id": p.tp.topic_id.text, "partition": p.tp.partition,
            "lineage": [list(e) for e in p.lineage],
            "keep": [{**_seg(f), "read": f.metadata.remote_log_segment_id.id.text not in p.unread}
                     for f in p.keep],
            "skip": [{**_seg(f), "reason": why} for f, why in p.skip],
            "unusable": [{"segment_id": u.segment_id, "start_offset": u.start_offset, "reason": u.reason}
                         for u in p.unusable],
            "released": [{"segment_id": u.segment_id, "start_offset": u.start_offset, "reason": u.reason}
                         for u in p.released],
            "written": p.written, "already_present": p.already, "refused": p.refused}


def _print_text(plans: list[PartitionPlan], execute: bool) -> None:
    for p in plans:
        print(f"{p.tp.topic}-{p.tp.partition} (topic id {p.tp.topic_id.text}): {len(p.keep)} kept, "
              f"{len(p.skip)} skipped, {len(p.unusable)} unusable; lineage {p.lineage}")
        for f in p.keep:
            md = f.metadata
            sid = md.remote_log_segment_id.id.text
            dup = ": a duplicate, readers read another copy" if sid in p.unread else ""
            print(f"  keep {md.start_offset}..{md.end_offset} segment {sid} "
                  f"epochs {list(md.segment_leader_epochs)} (from {f.source}){dup}")
        for f, why in p.skip:
            md = f.metadata
            print(f"  skip {md.start_offset}..{md.end_offset} segment "
                  f"{md.remote_log_segment_id.id.text}: {why}")
        for u in p.unusable:
            print(f"  unusable segment {u.segment_id} at {u.start_offset}: {u.reason}")
        for u in p.released:
            print(f"  released segment {u.segment_id} at {u.start_offset}: {u.reason}")
        if p.refused:
            print(f"  refused: {p.refused}")
        elif execute:
            print(f"  wrote {p.written} segments, {p.already} already present")
    if not execute:
        print("dry run: nothing written (add --execute to write the kept segments)")


def rebuild(args: argparse.Namespace) -> int:
    from rlm.logging_setup import configure_logging
    from rlm.plugin_setup import load_rlmm, load_rsm

    config = load_config(args.config)
    configure_logging("console", "critical")
    node_id = config.node_id if config.node_id is not None else -1
    rsm = load_rsm(config, node_id)
    try:
        plans = build_plans(rsm, args.topic)
    finally:
        rsm.close()
    if args.execute:
        rlmm = load_rlmm(config, node_id)
        try:
            for p in plans:
                try:
                    apply_plan(rlmm, p)
                except RebuildConflictError as e:
                    p.refused = str(e)
        finally:
            rlmm.close()
    if args.json:
        json.dump({"execute": bool(args.execute), "partitions": [plan_json(p) for p in plans]}, sys.stdout,
                  indent=1)
        sys.stdout.write("\n")
    else:
        _print_text(plans, args.execute)
    bad = any(p.refused or p.unusable for p in plans)
    return ExitCode.FAILURE if bad else ExitCode.OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("rebuild", help="rebuild the remote metadata store from the storage bucket alone",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--config", "-c", type=Path, required=True, help="the daemon's configuration file")
    r.add_argument("--topic", help="only this topic")
    r.add_argument("--execute", action="store_true", help="write the plan into the metadata store")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=rebuild)
