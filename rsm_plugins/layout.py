"""Names of a segment's files in remote storage, for each built-in layout.

Two layouts exist:

* ``kafka``: Apache Kafka's ``LocalTieredStorage`` test plugin, used by ``local`` and ``fsspec``
  so that a directory is interchangeable with one written by Kafka itself::

      <root>/<topic>-<partition>-<topicId>/<20-digit start offset>-<segmentId>.<suffix>

* ``s3``: object keys grouped by topic, then partition, so that a prefix listing per partition
  is cheap::

      <prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.<suffix>

Ids are Kafka's URL-safe base64 text (22 characters).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import InvalidNameError
from rlm.types import (
    IndexType,
    KafkaUuid,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    check_topic_name,
)
from rsm_plugins import redirect


class SegmentFileType(enum.Enum):
    """One file of a remote segment, with the suffix Kafka's ``LocalTieredStorage`` gives it.

    The declaration order is the order used by the custom-metadata encoding; do not reorder.
    """

    SEGMENT = ".log"
    OFFSET_INDEX = ".index"
    TIME_INDEX = ".timeindex"
    TRANSACTION_INDEX = ".txnindex"
    LEADER_EPOCH_CHECKPOINT = ".leader_epoch_checkpoint"
    PRODUCER_SNAPSHOT = ".snapshot"
    DESCRIPTOR = ".rlm_descriptor"
    """The segment's own metadata (:mod:`rsm_plugins.descriptor`), written after the copy and
    before COPY_SEGMENT_FINISHED so the bucket alone can rebuild the metadata store. Not one of
    Kafka's files: never checksummed, never required (segments copied before it existed lack it)."""

    @property
    def suffix(self) -> str:
        return self.value

    @property
    def optional(self) -> bool:
        return self is SegmentFileType.TRANSACTION_INDEX or self is SegmentFileType.DESCRIPTOR

    @property
    def bit(self) -> int:
        return 1 << list(SegmentFileType).index(self)

    @classmethod
    def for_index(cls, index_type: IndexType) -> SegmentFileType:
        return _FILE_FOR_INDEX[index_type]


_FILE_FOR_INDEX: dict[IndexType, SegmentFileType] = {
    IndexType.OFFSET: SegmentFileType.OFFSET_INDEX,
    IndexType.TIMESTAMP: SegmentFileType.TIME_INDEX,
    IndexType.TRANSACTION: SegmentFileType.TRANSACTION_INDEX,
    IndexType.LEADER_EPOCH: SegmentFileType.LEADER_EPOCH_CHECKPOINT,
    IndexType.PRODUCER_SNAPSHOT: SegmentFileType.PRODUCER_SNAPSHOT,
}


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file to upload: a local path, or in-memory bytes (the leader-epoch checkpoint)."""

    file_type: SegmentFileType
    path: Path | None = None
    data: bytes | None = None

    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        assert self.path is not None
        return self.path.stat().st_size


def source_files(segment_data: LogSegmentData) -> list[SourceFile]:
    """The files of a segment in upload order: auxiliary files first, the ``.log`` file last.

    Uploading the ``.log`` last makes it the commit marker: a reader that finds the ``.log``
    finds every other file too.
    """
    files = [
        SourceFile(SegmentFileType.OFFSET_INDEX, path=Path(segment_data.offset_index)),
        SourceFile(SegmentFileType.TIME_INDEX, path=Path(segment_data.time_index)),
    ]
    if segment_data.transaction_index is not None:
        files.append(SourceFile(SegmentFileType.TRANSACTION_INDEX, path=Path(segment_data.transaction_index)))
    files.append(
        SourceFile(SegmentFileType.LEADER_EPOCH_CHECKPOINT, data=bytes(segment_data.leader_epoch_index))
    )
    files.append(
        SourceFile(SegmentFileType.PRODUCER_SNAPSHOT, path=Path(segment_data.producer_snapshot_index))
    )
    files.append(SourceFile(SegmentFileType.SEGMENT, path=Path(segment_data.log_segment)))
    return files


def offset_prefix(start_offset: int) -> str:
    """Kafka's ``LogFileUtils.filenamePrefixFromOffset``: 20 digits, zero padded."""
    return f"{start_offset:020d}"


def segment_file_name(metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType) -> str:
    """``<20-digit start offset>-<segment id><suffix>``, shared by both layouts."""
    return (
        f"{offset_prefix(metadata.start_offset)}-{metadata.remote_log_segment_id.id.text}{file_type.suffix}"
    )


def kafka_partition_dir(tp: TopicIdPartition) -> str:
    """``<topic>-<partition>-<topicId>``, as ``RemoteTopicPartitionDirectory`` names it.

    The topic is checked (:func:`~rlm.types.check_topic_name`): it comes from metadata and must
    not lead the path out of the storage root. Ids are rendered from their 16 bytes (base64url),
    offsets and partitions are integers, so nothing else can carry a separator.
    """
    return f"{check_topic_name(tp.topic)}-{tp.partition}-{tp.topic_id.text}"


def parse_kafka_partition_dir(name: str) -> TopicIdPartition | None:
    """The partition a ``<topic>-<partition>-<topicId>`` directory name stands for, ``None`` when
    ``name`` is not one (the topic id is 22 characters and may itself contain ``-``)."""
    head = parse_s3_topic_dir(name)
    if head is None:
        return None
    topic_part, topic_id = head
    topic, sep, part = topic_part.rpartition("-")
    if not sep or not part.isdigit() or not topic:
        return None
    try:
        return TopicIdPartition(topic_id, check_topic_name(topic), int(part))
    except (ValueError, InvalidNameError):
        return None


def parse_s3_topic_dir(name: str) -> tuple[str, KafkaUuid] | None:
    """(topic, topic id) of an ``s3`` layout ``<topic>-<topicId>`` prefix component, else ``None``."""
    if len(name) < 24 or name[-23] != "-":
        return None
    try:
        return check_topic_name(name[:-23]), KafkaUuid.from_text(name[-22:])
    except (ValueError, InvalidNameError):
        return None


def kafka_relative_path(metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType) -> str:
    """Under the partition the objects are stored under: an adopted segment's redirect
    (:mod:`rsm_plugins.redirect`) names another topic id than its metadata's."""
    stored = redirect.stored_partition(metadata)
    return f"{kafka_partition_dir(stored)}/{segment_file_name(metadata, file_type)}"


def s3_key(prefix: str, metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType) -> str:
    """``<prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segment id><suffix>``."""
    tp = redirect.stored_partition(metadata)  # an adopted segment's objects: see rsm_plugins.redirect
    topic = check_topic_name(tp.topic)
    return f"{prefix}{topic}-{tp.topic_id.text}/{tp.partition}/{segment_file_name(metadata, file_type)}"


def s3_partition_prefix(prefix: str, tp: TopicIdPartition) -> str:
    """``<prefix><topic>-<topicId>/<partition>/``: where the ``s3`` layout keeps a partition."""
    return f"{prefix}{check_topic_name(tp.topic)}-{tp.topic_id.text}/{tp.partition}/"


def checked_key(key: str) -> str:
    """An object key that stays inside a storage root: relative, no ``..`` or empty parts.

    Keys of foreign layouts are built from metadata (topic names, a configured prefix); this is
    the last check before one becomes a path, so a crafted name cannot read outside the root.
    """
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (
        "", ".", ".."
    ):
        raise InvalidNameError(f"object key {key!r} is not a relative path inside the storage root")
    return key


def describe(metadata: RemoteLogSegmentMetadata) -> dict[str, object]:
    """Log fields naming a segment (structlog context)."""
    tp = metadata.topic_id_partition
    return {
        "topic": tp.topic,
        "partition": tp.partition,
        "segment_id": metadata.remote_log_segment_id.id.text,
        "start_offset": metadata.start_offset,
    }
