"""What the bucket alone says about a partition's remote segments (``rlm metadata rebuild``).

Each segment found by listing the partition (:meth:`RemoteStorageManager.list_segment_objects`)
is described in one of two ways:

* **descriptor** (segments copied by this version on): the ``.rlm_descriptor`` object written
  before COPY_SEGMENT_FINISHED (:mod:`rsm_plugins.descriptor`) gives the metadata exactly as the
  daemon recorded it, the writer's broker id, event time and the recorded custom metadata
  (checksums, location, a compacted segment's mark: :mod:`rsm_plugins.compaction_mark`) included;
* **files** (older segments): rebuilt from the segment's own objects — topic, topic id and
  partition from the directory or prefix; segment id and start offset from the file name; the
  last offset and the largest timestamp from the ``.log`` (every batch header is read, as Kafka's
  ``LogSegment.readLargestTimestamp`` does, because the time index's last entry may be missing or
  stale); the segment's leader epochs from its ``.leader_epoch_checkpoint`` object, cut to the
  segment's range with the copy task's own rule (:func:`rlm.lineage.epochs_for_range`), so they
  equal what the copy recorded; the size from the ``.log`` object; ``txn_index_empty`` from the
  presence of a non-empty ``.txnindex``. Unknown there: the writer's broker id (``-1``), the event
  time (the ``.log`` object's modification time stands in) and custom metadata (none: reads work,
  but without the per-file checksum check, and a compacted segment loses its compaction mark —
  its files do not say it was compacted: docs/remote-compaction-job.md).

A segment without its ``.log`` is not a segment: the ``.log`` is uploaded last (the commit marker)
and deleted first, so its absence means a copy that never finished or a delete under way — with
one exception, **adopted segments** (``rlm restore --adopt-into``): their objects are stored under
the source topic id, and the adopter's partition holds only their descriptor, naming both ids
(:mod:`rlm.daemon.shared_objects`). Such a descriptor is a segment of the adopter's lineage when
the objects it redirects to still hold a ``.log``. The objects the source's topic id released
(its descriptor replaced by a release record, kept for adopters) are not part of its lineage any
more: they are reported as ``released``, not rebuilt. A stored partition's adopters registry is
not a segment either and is passed over.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from rlm.daemon.shared_objects import is_registry, is_release, locator, registry_id
from rlm.errors import RemoteStorageError, RemoteStorageIntegrityError, RlmError
from rlm.lineage import epochs_for_range
from rlm.log import scan_batches
from rlm.log.checkpoints import parse_leader_epoch_checkpoint
from rlm.types import (
    IndexType,
    KafkaUuid,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rsm_plugins import descriptor, redirect
from rsm_plugins.api import RemoteStorageManager, StoredObject
from rsm_plugins.layout import SegmentFileType
from rsm_plugins.streams import copy_to

_NO_LOG = "no .log object (a copy that never finished, or a delete under way): not a segment"


class RebuildError(RlmError):
    """A segment's objects cannot be turned into metadata (named in the message)."""


class SegmentReleasedError(RlmError):
    """The segment's topic id released it (objects kept only for adopters): not its lineage's."""


@dataclass(frozen=True, slots=True)
class FoundSegment:
    """One segment of the bucket: its metadata (COPY_SEGMENT_FINISHED) and where it came from."""

    metadata: RemoteLogSegmentMetadata
    source: str
    """``descriptor`` or ``files`` (with why, when a descriptor was there but unusable)."""


@dataclass(frozen=True, slots=True)
class Unusable:
    """Objects of the bucket that form no segment, and why."""

    segment_id: str
    start_offset: int
    reason: str


def _group(objects: Iterable[StoredObject]) -> dict[tuple[int, str], dict[SegmentFileType, StoredObject]]:
    groups: dict[tuple[int, str], dict[SegmentFileType, StoredObject]] = {}
    for o in objects:
        if o.segment_id is None or o.start_offset is None or o.file_type is None:
            continue  # not a segment file, or a temporary file of an interrupted write
        groups.setdefault((o.start_offset, o.segment_id), {})[o.file_type] = o
    return groups


def _placeholder(tp: TopicIdPartition, sid: str, start: int, size: int) -> RemoteLogSegmentMetadata:
    """Metadata naming only what a plugin needs to locate the segment's objects."""
    return replace(locator(tp, sid, start), segment_size_in_bytes=size)


@dataclass
class PartitionScan:
    """What the bucket holds for one partition."""

    found: list[FoundSegment] = field(default_factory=list)
    unusable: list[Unusable] = field(default_factory=list)
    released: list[Unusable] = field(default_factory=list)
    """Segments whose objects this topic id released to its adopters (not its lineage's)."""


def _stored_logs(rsm: RemoteStorageManager, stored: TopicIdPartition,
                 cache: dict[TopicIdPartition, set[tuple[int, str]]]) -> set[tuple[int, str]]:
    """(start, segment id) of the ``.log`` objects under ``stored`` (listed once per scan)."""
    if stored not in cache:
        objects = rsm.list_segment_objects(stored) or []
        cache[stored] = {(o.start_offset, o.segment_id) for o in objects
                         if o.file_type is SegmentFileType.SEGMENT and o.segment_id is not None
                         and o.start_offset is not None}
    return cache[stored]


def _descriptor_only(rsm: RemoteStorageManager, tp: TopicIdPartition, sid: str, start: int, key: str,
                     cache: dict[TopicIdPartition, set[tuple[int, str]]]) -> FoundSegment | Unusable | None:
    """A descriptor without objects: an adopted segment (its objects under another topic id), the
    registry (``None``: not a segment), or a leftover."""
    if start == 0 and KafkaUuid.from_text(sid) == registry_id(tp):
        return None
    place = locator(tp, sid, start)
    data = rsm.read_segment_descriptor(place)
    if data is not None and is_registry(data):
        return None
    why = _NO_LOG
    if data is None:
        return Unusable(sid, start, why)
    try:
        md = descriptor.decode(data, key, place.remote_log_segment_id)
        found = redirect.decode(md.custom_metadata)
    except RemoteStorageIntegrityError as e:
        return Unusable(sid, start, f"{why}; its descriptor is unusable: {e}")
    if found is None:
        return Unusable(sid, start, why)
    if (start, sid) not in _stored_logs(rsm, found.stored, cache):
        return Unusable(sid, start, f"adopted from {found.stored}, whose objects of the segment are gone")
    return FoundSegment(md, f"descriptor (adopted: objects under topic id {found.stored.topic_id.text})")


def scan_partition(
    rsm: RemoteStorageManager, tp: TopicIdPartition, *, use_descriptors: bool = True
) -> PartitionScan:
    """Every complete segment of ``tp`` in the bucket, oldest first, and the leftovers."""
    objects = rsm.list_segment_objects(tp)
    if objects is None:
        raise RemoteStorageError(f"{rsm.display_name} storage cannot list {tp}: rebuild needs a listing")
    scan = PartitionScan()
    cache: dict[TopicIdPartition, set[tuple[int, str]]] = {}
    for (start, sid), files in sorted(_group(objects).items()):
        log_obj = files.get(SegmentFileType.SEGMENT)
        where = f"{tp.topic}-{tp.partition} segment {sid} at offset {start}"
        if log_obj is None:
            desc = files.get(SegmentFileType.DESCRIPTOR)
            got = (_descriptor_only(rsm, tp, sid, start, desc.key, cache)
                   if desc is not None and len(files) == 1 else Unusable(sid, start, _NO_LOG))
            if isinstance(got, FoundSegment):
                scan.found.append(got)
            elif got is not None:
                scan.unusable.append(got)
            continue
        try:
            scan.found.append(describe(rsm, tp, sid, start, files, use_descriptors=use_descriptors))
        except SegmentReleasedError as e:
            scan.released.append(Unusable(sid, start, f"{where}: {e}"))
        except (RlmError, ValueError) as e:
            scan.unusable.append(Unusable(sid, start, f"{where}: {e}"))
    return scan


def describe(rsm: RemoteStorageManager, tp: TopicIdPartition, sid: str, start: int,
             files: dict[SegmentFileType, StoredObject], *, use_descriptors: bool = True) -> FoundSegment:
    """The metadata of one segment: from its descriptor when present, else from its files."""
    log_obj = files[SegmentFileType.SEGMENT]
    place = _placeholder(tp, sid, start, log_obj.size)
    if SegmentFileType.DESCRIPTOR in files:
        data = rsm.read_segment_descriptor(place)
        if data is not None and is_release(data):
            raise SegmentReleasedError(
                f"released by topic id {tp.topic_id.text}; its objects are kept only for the topic ids that "
                "adopted them (see their partitions)")
        if data is not None and use_descriptors:
            key = files[SegmentFileType.DESCRIPTOR].key
            try:
                md = descriptor.decode(data, key, place.remote_log_segment_id)
                if md.start_offset != start:
                    raise RemoteStorageIntegrityError(
                        f"{key}: descriptor says start offset {md.start_offset}, its name says {start}")
                return FoundSegment(md, "descriptor")
            except RemoteStorageIntegrityError as e:  # the files still say it all, but more slowly
                return FoundSegment(_from_files(rsm, place, files), f"files (descriptor unusable: {e})")
    return FoundSegment(_from_files(rsm, place, files), "files")


def _from_files(rsm: RemoteStorageManager, place: RemoteLogSegmentMetadata,
                files: dict[SegmentFileType, StoredObject]) -> RemoteLogSegmentMetadata:
    log_obj = files[SegmentFileType.SEGMENT]
    start = place.start_offset
    last_offset = start - 1
    max_ts = -1
    with tempfile.TemporaryDirectory(prefix="rlm-rebuild-") as tmp:
        path = Path(tmp) / "segment.log"
        with rsm.fetch_log_segment(place, 0) as src, open(path, "wb") as dst:
            copy_to(src, dst)
        for h in scan_batches(path):
            last_offset = max(last_offset, h.last_offset)
            max_ts = max(max_ts, h.max_timestamp)
    if last_offset < start:
        raise RebuildError(f"{log_obj.key}: no record batch at or after offset {start}")
    if SegmentFileType.LEADER_EPOCH_CHECKPOINT not in files:
        raise RebuildError(f"{log_obj.key}: no .leader_epoch_checkpoint object: its epochs are unknown")
    cp_key = files[SegmentFileType.LEADER_EPOCH_CHECKPOINT].key
    with rsm.fetch_index(place, IndexType.LEADER_EPOCH) as f:
        entries = parse_leader_epoch_checkpoint(f.read(), path=cp_key)
    epochs = epochs_for_range([(e.epoch, e.start_offset) for e in entries], start, last_offset + 1)
    txn = files.get(SegmentFileType.TRANSACTION_INDEX)
    return RemoteLogSegmentMetadata(
        place.remote_log_segment_id, start_offset=start, end_offset=last_offset, max_timestamp_ms=max_ts,
        broker_id=-1, event_timestamp_ms=log_obj.modified_ms, segment_size_in_bytes=log_obj.size,
        segment_leader_epochs=tuple(epochs), state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        custom_metadata=None, txn_index_empty=txn is None or txn.size == 0)
