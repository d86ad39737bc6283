"""The checks of ``rlm verify``, one partition at a time: remote objects against remote metadata.

Kept apart from the command (argument parsing, printing, repair) so each stays one job. Every
check reads through the storage plugin's public methods only, so it judges what a broker or the
read side would actually get: whole-file reads (which plugins verify against the recorded
CRC-32C themselves), the partition listing of :meth:`RemoteStorageManager.list_segment_objects`,
and the epoch-lineage plan of :func:`fetcher.planning.plan_partition` that every reader uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from fetcher.planning import plan_partition
from rlm.daemon.shared_objects import holds, locator, references, registry_id
from rlm.errors import RemoteResourceNotFoundError, RemoteStorageError, RlmError
from rlm.lineage import judge_segments, lineage_from_segments
from rlm.log.records import iter_batches
from rlm.types import IndexType, KafkaUuid, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from rsm_plugins import redirect
from rsm_plugins.api import RemoteStorageManager, StoredObject
from rsm_plugins.integrity import Crc32c, FileChecksum, decode
from rsm_plugins.layout import SegmentFileType

S = RemoteLogSegmentState
_CHUNK = 4 << 20
_INDEX_OF = {SegmentFileType.for_index(it): it for it in IndexType}


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding. ``kind`` is stable (scripts match on it); ``message`` names the segment."""

    partition: str
    kind: str
    message: str
    segment_id: str | None = None
    offsets: tuple[int, int] | None = None
    key: str | None = None


@dataclass(slots=True)
class PartitionReport:
    partition: str
    segments: int = 0
    objects: int | None = None
    """Objects listed, ``None`` when the plugin cannot list (orphans not checked)."""
    problems: list[Problem] = field(default_factory=list)
    orphans: list[StoredObject] = field(default_factory=list)
    recent: int = 0
    """Objects newer than the metadata read, not judged (see :func:`check_partition`)."""
    off_lineage: list[Problem] = field(default_factory=list)
    """FINISHED segments off the leader-epoch lineage and read by no chain: listed, not failed
    (the leader's sidecar quarantines them and deletes them after ``off_lineage_grace_ms``)."""
    replaced: list[Problem] = field(default_factory=list)
    """FINISHED segments a remote compaction's segment replaces (a crash between its copy and their
    deletes): listed, not failed; readers read the compacted one, the leader's job deletes them."""
    shared: dict[str, list[str]] = field(default_factory=dict)
    """Segment id -> the other partitions (topic ids) that reference its objects: objects this
    store's metadata no longer names but an adopter (or the source) still reads are not orphans,
    and adopted segments are listed with who else holds them (:mod:`rlm.daemon.shared_objects`)."""


def name_of(tp: TopicIdPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _seg(md: RemoteLogSegmentMetadata) -> str:
    return f"segment {md.remote_log_segment_id.id.text} (offsets {md.start_offset}..{md.end_offset})"


def _open(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, ft: SegmentFileType) -> BinaryIO:
    if ft is SegmentFileType.SEGMENT:
        return rsm.fetch_log_segment(md, 0)
    return rsm.fetch_index(md, _INDEX_OF[ft])


class _DeepWalk:
    """Batch headers of a ``.log`` streamed in chunks (never held whole), CRCs checked."""

    def __init__(self, md: RemoteLogSegmentMetadata, may_end_early: bool = False) -> None:
        self.md = md
        self.may_end_early = may_end_early
        self.buf = b""
        self.base = 0  # absolute position of buf[0]
        self.last_offset: int | None = None
        self.end = 0

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        consumed = 0
        for h in iter_batches(self.buf, verify_crc=True, path=_seg(self.md)):
            self.last_offset, consumed = h.last_offset, h.end_position
        self.end = self.base + consumed if consumed else self.end
        self.buf = self.buf[consumed:]
        self.base += consumed

    def problem(self) -> str | None:
        md = self.md
        # a compacted topic's segment may end below its recorded end offset (the cleaner removed its
        # last records), never past it; its bytes always end at its recorded size
        if self.may_end_early:
            ends = self.last_offset is None or self.last_offset <= md.end_offset
        else:
            ends = self.last_offset == md.end_offset
        if ends and self.end == md.segment_size_in_bytes and not self.buf:
            return None
        got = f"offset {self.last_offset} at byte {self.end}" if self.last_offset is not None else "no batch"
        return (f"bytes end with {got}, but metadata says offset {md.end_offset} at byte "
                f"{md.segment_size_in_bytes}")


def check_files(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, deep: bool,
                report: PartitionReport, compacted: bool = False) -> None:
    """Every file of a finished segment is there, whole, with the recorded size and CRC-32C
    (``compacted``: the ``.log`` may end below the recorded end offset)."""
    manifest = decode(md.custom_metadata)
    wanted: dict[SegmentFileType, FileChecksum | None]
    if manifest is not None:
        wanted = dict(manifest.files)
    else:
        wanted = {ft: None for ft in SegmentFileType
                  if not ft.optional or (ft is SegmentFileType.TRANSACTION_INDEX and not md.txn_index_empty)}
    sid, span = md.remote_log_segment_id.id.text, (md.start_offset, md.end_offset)

    def problem(kind: str, text: str) -> None:
        report.problems.append(Problem(report.partition, kind, f"{_seg(md)}: {text}", sid, span))

    for ft, expected in wanted.items():
        crc = Crc32c()
        walk = _DeepWalk(md, compacted) if deep and ft is SegmentFileType.SEGMENT else None
        try:
            with _open(rsm, md, ft) as stream:
                while chunk := stream.read(_CHUNK):
                    crc.update(chunk)
                    if walk is not None:
                        walk.feed(chunk)
        except RemoteResourceNotFoundError as e:
            problem("missing_object", f"{ft.suffix} file missing: {e}")
            continue
        except RemoteStorageError as e:  # the plugin's own size/CRC check of a whole-file read
            problem("corrupt_object", f"{ft.suffix} file unreadable or corrupt: {e}")
            continue
        except RlmError as e:  # a batch that does not decode (--deep)
            problem("undecodable_segment", f"{ft.suffix} does not decode: {e}")
            continue
        got: FileChecksum = crc.result()
        want_size = expected.size if expected else (md.segment_size_in_bytes
                                                    if ft is SegmentFileType.SEGMENT else None)
        if want_size is not None and got.size != want_size:
            problem("size_mismatch", f"{ft.suffix} file has {got.size} bytes, metadata says {want_size}")
        elif expected is not None and got.crc32c != expected.crc32c:
            problem("checksum_mismatch", f"{ft.suffix} file CRC-32C {got.crc32c:#010x}, "
                                         f"metadata says {expected.crc32c:#010x}")
        elif walk is not None and (text := walk.problem()) is not None:
            problem("incomplete_segment", text)


def check_layout(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, report: PartitionReport) -> None:
    """The plugin's own layout checks (a foreign layout's manifest against its objects), unless
    a file of the segment was already found missing or unreadable."""
    sid = md.remote_log_segment_id.id.text
    if any(p.segment_id == sid for p in report.problems):
        return
    try:
        found = rsm.verify_segment(md)
    except RemoteResourceNotFoundError as e:
        found, kind = [f"object missing: {e}"], "missing_object"
    except RemoteStorageError as e:
        found, kind = [f"cannot be examined: {e}"], "corrupt_object"
    else:
        kind = "layout_mismatch"
    for text in found:
        report.problems.append(Problem(report.partition, kind, f"{_seg(md)}: {text}", sid,
                                       (md.start_offset, md.end_offset)))


def check_references(rsm: RemoteStorageManager, tp: TopicIdPartition, segs: list[RemoteLogSegmentMetadata],
                     report: PartitionReport) -> None:
    """Each adopted (redirected) finished segment records this partition's reference in the bucket
    (else another topic id's retention may delete it: ``unrecorded_reference``, fixed by rerunning
    the adoption); the other references are listed."""
    for md in segs:
        if md.state is not S.COPY_SEGMENT_FINISHED or redirect.decode(md.custom_metadata) is None:
            continue
        sid = md.remote_log_segment_id.id.text
        try:
            mine = holds(rsm, tp, md)
            others = references(rsm, md, exclude=tp)
        except RemoteStorageError as e:
            report.problems.append(Problem(report.partition, "corrupt_object", f"{_seg(md)}: references "
                                           f"unreadable: {e}", sid, (md.start_offset, md.end_offset)))
            continue
        if others:
            report.shared[sid] = [str(o) for o in others]
        if not mine:
            report.problems.append(Problem(
                report.partition, "unrecorded_reference", f"{_seg(md)}: adopted from "
                f"{redirect.stored_partition(md)}, but the bucket does not record this topic id's reference "
                "(another topic id's retention may delete it; rerun rlm restore --adopt-into)", sid,
                (md.start_offset, md.end_offset)))


def _still_referenced(rsm: RemoteStorageManager, tp: TopicIdPartition, obj: StoredObject,
                      report: PartitionReport, seen: dict[tuple[str, int], bool]) -> bool:
    """Whether an object no metadata of this store names belongs to another topic id: the stored
    partition's adopters registry, or a segment an adopter still references."""
    if obj.segment_id is None or obj.start_offset is None:
        return False
    key = (obj.segment_id, obj.start_offset)
    if key not in seen:
        if obj.start_offset == 0 and KafkaUuid.from_text(obj.segment_id) == registry_id(tp):
            seen[key] = True
        else:
            try:
                others = [str(o) for o in references(rsm, locator(tp, obj.segment_id, obj.start_offset),
                                                     exclude=tp)]
            except RemoteStorageError as e:  # unknown holders: never called an orphan (--repair)
                others = [f"unknown ({e})"]
            if others:
                report.shared[obj.segment_id] = others
            seen[key] = bool(others)
    return seen[key]


def check_partition(rsm: RemoteStorageManager, tp: TopicIdPartition,
                    segments: Iterable[RemoteLogSegmentMetadata], *, now_ms: int, grace_ms: int,
                    metadata_read_ms: int, deep: bool = False, compacted: bool = False) -> PartitionReport:
    """All checks of one partition; orphans are kept in the report for ``--repair``.

    ``metadata_read_ms`` is when the metadata store was read: an object written after it may
    belong to a copy whose COPY_SEGMENT_STARTED the read missed (a daemon running next to us), so
    it is counted in ``recent`` and not judged."""
    segs = list(segments)
    report = PartitionReport(name_of(tp), segments=len(segs))
    part = report.partition
    for md in segs:
        if md.state is S.COPY_SEGMENT_FINISHED:
            check_files(rsm, md, deep, report, compacted)
            check_layout(rsm, md, report)
        elif md.state in (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED) and \
                now_ms - md.event_timestamp_ms > grace_ms:
            kind = "stale_copy" if md.state is S.COPY_SEGMENT_STARTED else "stale_delete"
            age_s = (now_ms - md.event_timestamp_ms) // 1000
            report.problems.append(Problem(
                part, kind, f"{_seg(md)}: {md.state.name} for {age_s} s, past the grace period of "
                f"{grace_ms // 1000} s (the daemon's cleanup deletes its files and metadata)",
                md.remote_log_segment_id.id.text, (md.start_offset, md.end_offset)))
    verdict = judge_segments(segs, lineage_from_segments(segs))
    for md, by in verdict.replaced:
        report.replaced.append(Problem(
            part, "replaced", f"{_seg(md)}: replaced by the compacted segment "
            f"{by.remote_log_segment_id.id.text} [{by.start_offset}, {by.end_offset}] and read by no reader "
            "(the leader's remote compaction job deletes it)", md.remote_log_segment_id.id.text,
            (md.start_offset, md.end_offset)))
    for md in verdict.off_lineage:
        report.off_lineage.append(Problem(
            part, "off_lineage", f"{_seg(md)}, epochs {[list(e) for e in md.segment_leader_epochs]}: "
            "not on the leader-epoch lineage and read by no reader (quarantined by the leader's sidecar, "
            "deleted after off_lineage_grace_ms)", md.remote_log_segment_id.id.text,
            (md.start_offset, md.end_offset)))
    check_references(rsm, tp, segs, report)
    for lo, hi in plan_partition(tp, segs).gaps:
        report.problems.append(Problem(part, "offset_gap", f"no remote segment on the epoch lineage "
                                       f"holds offsets {lo}..{hi}", offsets=(lo, hi)))
    listing = rsm.list_segment_objects(tp)
    if listing is not None:
        report.objects = len(listing)
        known = {md.remote_log_segment_id.id.text for md in segs if md.state is not S.DELETE_SEGMENT_FINISHED}
        seen: dict[tuple[str, int], bool] = {}
        for obj in listing:
            if obj.modified_ms >= metadata_read_ms:
                report.recent += 1
            elif obj.segment_id not in known and not _still_referenced(rsm, tp, obj, report, seen):
                report.orphans.append(obj)
                what = (f"segment {obj.segment_id} (start offset {obj.start_offset})"
                        if obj.segment_id else "not a segment file")
                report.problems.append(Problem(part, "orphan_object", f"{obj.key}: no metadata names it "
                                               f"({what}, {obj.size} bytes)", obj.segment_id, key=obj.key))
    return report
