"""Remote objects shared by several topic ids after adoption: who references them, and deleting
them only when no topic id still does.

Why: ``rlm restore --adopt-into`` gives a new topic id the old one's remote segments without a copy
(the redirect of :mod:`rsm_plugins.redirect`). Two adoptions of one history (staging and
production), or the source store and the new cluster, then share objects; without counting,
either side's retention deletes what the other still reads. The references live in the bucket,
beside the objects, because the metadata stores are exactly what a second disaster loses.

What the bucket holds, all written through the plugin's descriptor methods (so every plugin that
stores descriptors stores these too; one that stores none shares nothing and deletes as before):

* the **owner's reference**: the segment's descriptor under the partition its objects are stored
  under (written by the copy; adoption writes it when an older copy left none). The owner
  releases it by overwriting it with a *release record* (:func:`release_record`): its own
  metadata forgets the segment, the objects stay for the adopters, and a rebuild of the owner's
  lineage leaves the segment out;
* an **adopter's reference**: a descriptor under the adopter's own partition
  (``<start>-<segment id>.rlm_descriptor`` beside where its own copies go) whose topic id is the
  adopter's and whose custom metadata is the redirect naming the stored partition — it names
  both ids, and ``rlm metadata rebuild`` recovers the adopter's lineage from it;
* the **adopters registry** of the stored partition: the partitions that adopted from it, so a
  deleter finds every reference with a few reads and without listing the bucket. One object per
  stored partition, kept as a descriptor-named object at offset 0 under an id derived from the
  partition (:func:`registry_locator`); adoption adds to it before writing its reference.

Deleting (:func:`delete_segment_objects`, the daemon's one way to delete a segment's objects):
this topic id's reference goes first, then the others are looked for, and the objects go only
when none is left. Of two deleters racing, the last one to look deletes them.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from typing import Any

import structlog

from rlm.errors import RemoteStorageIntegrityError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    check_topic_name,
)
from rsm_plugins import descriptor, redirect
from rsm_plugins.api import RemoteStorageManager

log = structlog.get_logger(__name__)

_REGISTRY_KEY = "rlm_adopters"
_RELEASE_KEY = "rlm_released"
MAX_BYTES = 1 << 20


def locator(tp: TopicIdPartition, segment_id: str | KafkaUuid, start: int) -> RemoteLogSegmentMetadata:
    """Metadata naming only what a plugin needs to locate objects: ``tp``'s own directory or
    prefix (no redirect), the segment id and the start offset."""
    sid = segment_id if isinstance(segment_id, KafkaUuid) else KafkaUuid.from_text(segment_id)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, sid), start_offset=start, end_offset=start, max_timestamp_ms=-1,
        broker_id=-1, event_timestamp_ms=0, segment_size_in_bytes=0, segment_leader_epochs=((0, start),),
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def registry_id(stored: TopicIdPartition) -> KafkaUuid:
    """The (derived, stable) segment id under which ``stored``'s adopters registry is kept."""
    digest = hashlib.sha256(b"rlm-adopters\0" + stored.topic_id.raw + stored.partition.to_bytes(4, "big"))
    return KafkaUuid(digest.digest()[:16])


def registry_locator(stored: TopicIdPartition) -> RemoteLogSegmentMetadata:
    return locator(stored, registry_id(stored), 0)


def _tp_doc(tp: TopicIdPartition) -> dict[str, Any]:
    return {"topic": tp.topic, "topic_id": tp.topic_id.text, "partition": tp.partition}


def _tp_of(doc: Any, where: str) -> TopicIdPartition:
    try:
        return TopicIdPartition(KafkaUuid.from_text(doc["topic_id"]), check_topic_name(doc["topic"]),
                                int(doc["partition"]))
    except (KeyError, TypeError, ValueError) as e:
        raise RemoteStorageIntegrityError(f"{where}: malformed partition entry {doc!r}: {e}") from e


def _json(data: bytes, where: str) -> Any:
    if len(data) > MAX_BYTES:
        raise RemoteStorageIntegrityError(f"{where}: {len(data)} bytes, limit {MAX_BYTES}")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise RemoteStorageIntegrityError(f"{where}: not JSON: {e}") from e


def is_registry(data: bytes) -> bool:
    """Whether descriptor-named bytes are an adopters registry (not a segment's descriptor)."""
    return data.lstrip().startswith(b'{"' + _REGISTRY_KEY.encode())


def is_release(data: bytes) -> bool:
    """Whether descriptor-named bytes are an owner's release record (see the module docstring)."""
    return data.lstrip().startswith(b'{"' + _RELEASE_KEY.encode())


def decode_registry(data: bytes, stored: TopicIdPartition, where: str) -> list[TopicIdPartition]:
    doc = _json(data, where)
    if not isinstance(doc, dict) or doc.get(_REGISTRY_KEY) != 1 or not isinstance(doc.get("adopters"), list):
        raise RemoteStorageIntegrityError(f"{where}: not an adopters registry (version 1)")
    if _tp_of(doc.get("stored"), where) != stored:
        raise RemoteStorageIntegrityError(f"{where}: registry of {doc.get('stored')}, not of {stored}")
    return [_tp_of(a, where) for a in doc["adopters"]]


def encode_registry(stored: TopicIdPartition, adopters: list[TopicIdPartition]) -> bytes:
    doc = {_REGISTRY_KEY: 1, "stored": _tp_doc(stored), "adopters": [_tp_doc(a) for a in adopters]}
    return json.dumps(doc).encode() + b"\n"


def release_record(md: RemoteLogSegmentMetadata) -> bytes:
    """What replaces the owner's descriptor when the owner no longer references the segment."""
    doc = {_RELEASE_KEY: 1, **_tp_doc(md.topic_id_partition), "segment_id": md.remote_log_segment_id.id.text,
           "start_offset": md.start_offset, "end_offset": md.end_offset,
           "released_ms": int(time.time() * 1000)}
    return json.dumps(doc).encode() + b"\n"


def read_registry(rsm: RemoteStorageManager, stored: TopicIdPartition) -> list[TopicIdPartition]:
    """The partitions that adopted ``stored``'s segments (empty when none did, or when the plugin
    stores no descriptors). A registry that cannot be read raises
    :class:`RemoteStorageIntegrityError`: deleting without knowing the adopters is not safe."""
    where = f"adopters registry of {stored}"
    data = rsm.read_segment_descriptor(registry_locator(stored))
    return [] if data is None else decode_registry(data, stored, where)


def add_adopter(rsm: RemoteStorageManager, stored: TopicIdPartition, adopter: TopicIdPartition) -> bool:
    """Add ``adopter`` to ``stored``'s registry (read, add, write, read back); False when the plugin
    cannot store it (then adoption shares objects without references, as before this existed)."""
    have = read_registry(rsm, stored)
    if adopter in have:
        return True
    if not rsm.write_segment_descriptor(registry_locator(stored), encode_registry(stored, [*have, adopter])):
        return False
    if adopter not in read_registry(rsm, stored):  # another adoption wrote it at the same time
        raise RemoteStorageIntegrityError(
            f"adopters registry of {stored}: {adopter} was overwritten by a concurrent adoption; rerun")
    return True


def own_reference(md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    """``md`` located under its own partition (without its redirect): where its reference is."""
    return replace(md, custom_metadata=None)


def holds(rsm: RemoteStorageManager, tp: TopicIdPartition, md: RemoteLogSegmentMetadata) -> bool:
    """Whether ``tp`` still references ``md``'s stored objects: its descriptor of the segment is
    there (for the owner: and not a release record; an unreadable one counts as a reference)."""
    data = rsm.read_segment_descriptor(locator(tp, md.remote_log_segment_id.id, md.start_offset))
    return data is not None and not is_release(data)


def references(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata,
               exclude: TopicIdPartition | None = None) -> list[TopicIdPartition]:
    """The partitions (the owner and the adopters, but ``exclude``) that reference ``md``'s stored
    objects, from the bucket alone."""
    stored = redirect.stored_partition(md)
    out = [stored] if stored != exclude and holds(rsm, stored, md) else []
    return out + [a for a in read_registry(rsm, stored) if a not in (exclude, stored) and holds(rsm, a, md)]


def delete_segment_objects(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata) -> list[TopicIdPartition]:
    """Drop ``md``'s topic id's reference; delete the stored objects when no other topic id still
    references them. Returns the references left (empty: the objects were deleted)."""
    me = md.topic_id_partition
    stored = redirect.stored_partition(md)
    adopters = read_registry(rsm, stored)
    if stored == me and not adopters:
        rsm.delete_log_segment_data(md)  # never shared: the common case, one extra read
        return []
    if stored == me:
        rsm.write_segment_descriptor(own_reference(md), release_record(md))
    else:
        rsm.delete_log_segment_data(own_reference(md))  # only its descriptor lives there
    left = references(rsm, md, exclude=me)
    if left:
        log.info("shared_segment_kept", topic=me.topic, partition=me.partition,
                 segment_id=md.remote_log_segment_id.id.text, stored=str(stored),
                 referenced_by=[str(tp) for tp in left])
        return left
    rsm.delete_log_segment_data(md)
    return []


def record_adoption(rsm: RemoteStorageManager, owner: RemoteLogSegmentMetadata,
                    adopted: RemoteLogSegmentMetadata) -> bool:
    """Make the bucket say that ``adopted`` (under the new topic id, redirected) references the
    objects of ``owner`` (the source's finished segment): the owner's descriptor (written when the
    copy left none, so the owner's reference is explicit), the registry, then the adopter's
    descriptor. False when the plugin stores no descriptors."""
    stored = redirect.stored_partition(adopted)
    if stored == owner.topic_id_partition and rsm.read_segment_descriptor(own_reference(owner)) is None:
        rsm.write_segment_descriptor(own_reference(owner), descriptor.encode(owner))
    if not add_adopter(rsm, stored, adopted.topic_id_partition):
        return False
    return rsm.write_segment_descriptor(own_reference(adopted), descriptor.encode(adopted))


def release_owner(rsm: RemoteStorageManager, owner: RemoteLogSegmentMetadata) -> None:
    """The source topic id no longer references ``owner``'s objects (its cluster is gone):
    ``restore --adopt-into --release-source``."""
    if redirect.stored_partition(owner) == owner.topic_id_partition:
        rsm.write_segment_descriptor(own_reference(owner), release_record(owner))
    else:  # the source is itself an adopter: its reference is its own descriptor
        rsm.delete_log_segment_data(own_reference(owner))
