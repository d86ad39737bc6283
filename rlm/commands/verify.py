"""``rlm verify --config FILE [--topic T] [--deep] [--json] [--repair [--execute]]``: fsck of tiered storage.

Per partition of the remote metadata store (read-only, as the read side opens it):

* every COPY_SEGMENT_FINISHED segment has all its files, with the sizes and CRC-32C checksums its
  custom metadata recorded (``missing_object``, ``corrupt_object``, ``size_mismatch``,
  ``checksum_mismatch``);
* no object without metadata (``orphan_object``: e.g. index files a crash mid-copy left before
  any metadata named them), when the storage plugin can list a partition;
* the finished segments on the current leader-epoch lineage cover one contiguous offset range
  (``offset_gap``);
* FINISHED segments off the lineage and read by no reader are listed as notes
  (``off_lineage``; the leader's sidecar quarantines them, then deletes them after
  ``off_lineage_grace_ms``): expected after an unclean election, so they do not fail the check;
* no COPY_SEGMENT_STARTED / DELETE_SEGMENT_STARTED older than ``stale_copy_grace_ms``
  (``stale_copy``, ``stale_delete``; ``rlm run`` cleans those up);
* the storage layout's own checks (``layout_mismatch``): for Aiven's layout, object sizes
  against the manifest's chunk index and index slices, and the segment the manifest embeds
  (every chunk's GCM tag and zstd frame is checked by the whole-file read above);
* with ``--deep``, every ``.log`` decodes (batch CRCs) to its recorded size, with no batch past its
  recorded end offset (a compacted topic's segment may end below it: the broker's cleaner removed
  its last records) (``incomplete_segment``, ``undecodable_segment``). Files are streamed, never
  held whole. When a log dir of the configuration holds the partition (after ``rlm restore``), the
  local log is checked against the bucket as well: each local segment that is a copy of a remote
  one holds its bytes (``local_segment_mismatch``), the local log start is not below the published
  ``DeleteRecords`` bound (``local_log_start``), the leader epochs below the remote end are the
  remote lineage's (``local_epochs``) — :func:`.verify_local.check_restored`;
* a partition of the configured log dirs the configuration asks to tier, with rolled segments and
  nothing in the metadata store (``not_tiered``) — :mod:`.verify_untiered`.

``--repair`` shows what is safe to fix, deleting orphan segments whose objects are all older
than the grace period (so an upload in progress is never touched); nothing changes unless
``--execute`` is given too. Nothing else is ever repaired.

Exit status: 0 when clean, 1 when problems were found (printed, with a summary), 3 for an
invalid configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fetcher.planning import plan_partition
from rlm.config import load_config
from rlm.errors import ConfigError
from rlm.exit_codes import ExitCode
from rlm.lineage import finished_only
from rlm.types import KafkaUuid, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from rsm_plugins.api import RemoteStorageManager, StoredObject
from rsm_plugins.compaction_mark import clean_end_of

from .verify_checks import PartitionReport, Problem, check_partition, name_of
from .verify_untiered import untiered_problems

if TYPE_CHECKING:  # log-dir reading (numpy) loads when a partition is checked, not for `rlm --help`
    from .verify_local import Coverage


def _coverage(log_dirs: list[Path], tp: TopicIdPartition, report: PartitionReport,
              segs: list[RemoteLogSegmentMetadata], rsm: RemoteStorageManager | None = None,
              remote_compacted_below: int = 0) -> Coverage | None:
    """Remote and local ranges of ``tp`` when a log dir holds it; a gap between them is a
    ``local_gap`` problem (:mod:`.verify_local`). With ``rsm`` (``--deep``) the local log is
    checked against the bucket too: restored segments' bytes, log start, epochs."""
    from .verify_local import check_restored, coverage

    plan = plan_partition(tp, segs)
    if not plan.segments:
        return None
    cov = coverage(log_dirs, tp, plan.log_start, plan.log_end)
    if cov is not None and cov.gap is not None:
        lo, hi = cov.gap
        report.problems.append(Problem(report.partition, "local_gap", f"offsets {lo}..{hi} are neither in "
                                       f"remote storage nor in the local log {cov.local_dir}",
                                       offsets=(lo, hi)))
    if cov is not None and rsm is not None:
        for f in check_restored(rsm, plan, Path(cov.local_dir), rsm.read_log_start_offset(tp),
                                remote_compacted_below=remote_compacted_below):
            report.problems.append(Problem(report.partition, f.kind, f.message, offsets=f.offsets))
    return cov


def _remote_compacted_below(segs: list[RemoteLogSegmentMetadata], report: PartitionReport) -> int:
    """Where the remote copy may lack records the broker still holds: below the remote cleaner
    checkpoint — the largest clean end marked on a FINISHED compacted segment
    (:mod:`rsm_plugins.compaction_mark`: in the metadata, so verify needs no daemon's work dir) —
    and below the end of any segment a compacted one replaces (a replacement whose inputs are still
    FINISHED, e.g. an unmarked output: the mark did not fit the custom metadata budget)."""
    replaced_end = max((p.offsets[1] + 1 for p in report.replaced if p.offsets is not None), default=0)
    return max(clean_end_of(finished_only(segs)), replaced_end)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "verify",
        help="check remote segments against remote metadata (fsck of tiered storage)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", type=Path, required=True, help="the daemon's configuration file")
    p.add_argument("--topic", help="only this topic")
    p.add_argument("--deep", action="store_true", help="also decode every segment to its end offset")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--repair", action="store_true",
                   help="show the safe repairs (orphans past the grace period); dry run")
    p.add_argument("--execute", action="store_true", help="with --repair: carry the repairs out")
    p.set_defaults(func=verify)


def _orphan_groups(tp: TopicIdPartition, report: PartitionReport, cutoff_ms: int
                   ) -> list[tuple[str, int, list[StoredObject]]]:
    """(segment id, start offset, objects) of orphan segments whose objects are all older than
    ``cutoff_ms``. Only a segment's own files are deleted (the plugin's delete knows no others):
    temporary files and names that are not segment files stay, and stay reported."""
    groups: dict[tuple[str, int], list[StoredObject]] = {}
    for obj in report.orphans:
        if obj.segment_id is not None and obj.start_offset is not None and obj.file_type is not None:
            groups.setdefault((obj.segment_id, obj.start_offset), []).append(obj)
    return [(sid, start, objs) for (sid, start), objs in sorted(groups.items())
            if all(o.modified_ms < cutoff_ms for o in objs)]


def _delete_orphan(rsm: RemoteStorageManager, tp: TopicIdPartition, sid: str, start: int) -> None:
    """Delete through the plugin's own ``delete_log_segment_data``, with metadata naming only the
    segment id and start offset (all the plugins' layouts need), so no key is guessed here."""
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, KafkaUuid.from_text(sid)), start_offset=start, end_offset=start,
        max_timestamp_ms=-1, broker_id=-1, event_timestamp_ms=int(time.time() * 1000),
        segment_size_in_bytes=0, segment_leader_epochs=((0, start),))
    rsm.delete_log_segment_data(md)


def _tiers_json(cov: Coverage | None) -> dict[str, Any] | None:
    return None if cov is None else {**asdict(cov), "gap": cov.gap}


def verify(args: argparse.Namespace) -> int:
    from rlm.logging_setup import configure_logging
    from rlm.plugin_setup import load_rlmm, load_rsm

    from .verify_compacted import is_compacted_partition

    config = load_config(args.config)
    configure_logging("console", "critical")  # the printed lines say it all
    node_id = config.node_id if config.node_id is not None else -1
    grace = config.stale_copy_grace_ms
    rsm = load_rsm(config, node_id)
    if args.repair and args.execute and rsm.read_only:
        rsm.close()
        raise ConfigError(f"--repair --execute: the {rsm.display_name} layout is read-only (its objects "
                          "belong to the broker's own tiered storage); nothing is deleted")
    try:
        metadata_read_ms = int(time.time() * 1000)
        rlmm = load_rlmm(config, node_id, read_only=True)
        try:
            rlmm.follow_all()
            tps = sorted((tp for tp in rlmm.known_partitions() if args.topic in (None, tp.topic)),
                         key=lambda tp: (tp.topic, tp.partition))
            now = int(time.time() * 1000)
            reports = [(tp, check_partition(rsm, tp, rlmm.list_remote_log_segments(tp), now_ms=now,
                                            grace_ms=grace, metadata_read_ms=metadata_read_ms,
                                            deep=args.deep, compacted=is_compacted_partition(config, tp)))
                       for tp in tps]
            segments = {tp: list(rlmm.list_remote_log_segments(tp)) for tp, _ in reports}
            tiers = {tp: _coverage(config.log_dirs, tp, r, segments[tp], rsm if args.deep else None,
                                   _remote_compacted_below(segments[tp], r))
                     for tp, r in reports}
            untiered = untiered_problems(config, {tp.topic_partition for tp in rlmm.known_partitions()
                                                  if any(finished_only(rlmm.list_remote_log_segments(tp)))},
                                         args.topic)
        finally:
            rlmm.close()
        repairs: list[dict[str, Any]] = []
        if args.repair:
            for tp, report in reports:
                for sid, start, objs in _orphan_groups(tp, report, now - grace):
                    if args.execute:
                        _delete_orphan(rsm, tp, sid, start)
                    repairs.append({"partition": report.partition, "segment_id": sid, "start_offset": start,
                                    "keys": [o.key for o in objs], "deleted": bool(args.execute)})
    finally:
        rsm.close()
    problems = [p for _, r in reports for p in r.problems] + untiered
    if args.json:
        out = {"ok": not problems, "partitions": [
            {"partition": r.partition, "topic_id": tp.topic_id.text, "segments": r.segments,
             "objects": r.objects, "recent_objects": r.recent,
             "problems": [asdict(p) for p in r.problems],
             "off_lineage": [asdict(p) for p in r.off_lineage], "shared": r.shared,
             "replaced": [asdict(p) for p in r.replaced],
             "tiers": _tiers_json(tiers[tp])} for tp, r in reports],
            "not_tiered": [asdict(p) for p in untiered], "problems": len(problems), "repairs": repairs}
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print_text(config.source, rsm.display_name, reports, repairs, args, tiers, untiered)
    return ExitCode.FAILURE if problems else ExitCode.OK


def _print_text(source: object, plugin: str, reports: list[tuple[TopicIdPartition, PartitionReport]],
                repairs: list[dict[str, Any]], args: argparse.Namespace,
                tiers: dict[TopicIdPartition, Coverage | None], untiered: list[Problem]) -> None:
    print(f"rlm verify {source}")
    for tp, r in reports:
        cov = tiers.get(tp)
        objects = f"{r.objects} objects" if r.objects is not None else \
            f"orphans not checked ({plugin} storage cannot list)"
        if r.recent:
            objects += f" ({r.recent} newer than the metadata read, not judged)"
        state = "ok" if not r.problems else f"{len(r.problems)} problem(s)"
        print(f"{name_of(tp)}: {r.segments} segments, {objects}: {state}")
        for p in r.problems:
            print(f"  {p.kind}: {p.message}")
        for p in r.off_lineage + r.replaced:
            print(f"  note {p.kind}: {p.message}")
        if cov is not None:
            local_end = "?" if cov.local_end is None else cov.local_end
            print(f"  remote [{cov.remote_start}, {cov.remote_end}), local ({cov.local_dir}) "
                  f"[{cov.local_start}, {local_end})")
    for rep in repairs:
        verb = "deleted" if rep["deleted"] else "would delete"
        print(f"repair: {verb} orphan segment {rep['segment_id']} of {rep['partition']} "
              f"({len(rep['keys'])} objects)")
    if args.repair and not args.execute and repairs:
        print("dry run: nothing changed (add --execute to repair)")
    for p in untiered:
        print(f"{p.partition}: {p.kind}: {p.message}")
    n = sum(len(r.problems) for _, r in reports) + len(untiered)
    print(f"{len(reports)} partitions checked, {n} problems" + ("" if n == 0 else " (exit status 1)"))
