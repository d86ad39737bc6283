"""Self-describing remote segments: the segment's own metadata, stored beside its files.

Why: ``__remote_log_metadata`` lives in the cluster and internal topics cannot be tiered, so a lost
cluster loses the only record of *which* objects form the tiered log and with which offsets and
leader epochs. Most of that can be re-derived from the segment's own files (``rlm metadata
rebuild`` does so for segments copied before descriptors existed), but not all of it: the writer's
broker id and event time, the plugin's custom metadata (per-file CRC-32C checksums, the bucket
location); and reading a whole ``.log`` to learn its last offset and largest timestamp is slow.
So every copy also writes one small JSON object, ``<20-digit start offset>-<segment id>.rlm_descriptor``
(:attr:`~rsm_plugins.layout.SegmentFileType.DESCRIPTOR`), *after* the plugin's copy (so it can carry
the custom metadata the copy returned) and *before* COPY_SEGMENT_FINISHED (so every finished segment
copied from now on has one)::

    {"version": 1, "topic": "orders", "topic_id": "<base64url>", "partition": 0,
     "segment_id": "<base64url>", "start_offset": 0, "end_offset": 99, "max_timestamp_ms": 17...,
     "broker_id": 1, "event_timestamp_ms": 17..., "segment_size_in_bytes": 16384,
     "segment_leader_epochs": [[0, 0], [2, 57]], "txn_index_empty": true,
     "custom_metadata": "<base64 or null>"}

Plugins store it through :meth:`RemoteStorageManager.write_segment_descriptor` (the default stores
nothing and returns ``False``: rebuild then falls back to the files). It is deleted with the segment
(every plugin deletes every :class:`~rsm_plugins.layout.SegmentFileType`).
"""

from __future__ import annotations

import base64
import binascii

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlm.errors import RemoteStorageIntegrityError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

VERSION = 1
#: A reader never loads more than this (a segment has few epochs; custom metadata is <= 128 bytes
#: by Kafka's default, a few KiB at most).
MAX_BYTES = 64 * 1024


class SegmentDescriptor(BaseModel):
    """The wire model of a descriptor object (version 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(VERSION, ge=1, le=VERSION)
    topic: str
    topic_id: str
    partition: int = Field(ge=0)
    segment_id: str
    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int = Field(ge=0)
    segment_leader_epochs: list[tuple[int, int]]
    txn_index_empty: bool
    custom_metadata: str | None = None


def encode(md: RemoteLogSegmentMetadata) -> bytes:
    """The descriptor bytes of ``md`` (its state is not stored: a descriptor means "copied")."""
    tp = md.topic_id_partition
    doc = SegmentDescriptor(
        version=VERSION,
        topic=tp.topic,
        topic_id=tp.topic_id.text,
        partition=tp.partition,
        segment_id=md.remote_log_segment_id.id.text,
        start_offset=md.start_offset,
        end_offset=md.end_offset,
        max_timestamp_ms=md.max_timestamp_ms,
        broker_id=md.broker_id,
        event_timestamp_ms=md.event_timestamp_ms,
        segment_size_in_bytes=md.segment_size_in_bytes,
        segment_leader_epochs=[(int(e), int(s)) for e, s in md.segment_leader_epochs],
        txn_index_empty=md.txn_index_empty,
        custom_metadata=None if md.custom_metadata is None else base64.b64encode(md.custom_metadata).decode(),
    )
    return doc.model_dump_json().encode() + b"\n"


def decode(data: bytes, where: str, expect: RemoteLogSegmentId | None = None) -> RemoteLogSegmentMetadata:
    """The COPY_SEGMENT_FINISHED metadata a descriptor describes.

    ``expect``: the segment the object was found under (its name); a descriptor naming another
    segment or partition is corrupt. Raises :class:`RemoteStorageIntegrityError` naming ``where``.
    """
    if len(data) > MAX_BYTES:
        raise RemoteStorageIntegrityError(
            f"{where}: segment descriptor of {len(data)} bytes, limit {MAX_BYTES}"
        )
    try:
        doc = SegmentDescriptor.model_validate_json(data)
        tp = TopicIdPartition(KafkaUuid.from_text(doc.topic_id), doc.topic, doc.partition)
        sid = RemoteLogSegmentId(tp, KafkaUuid.from_text(doc.segment_id))
        custom = None if doc.custom_metadata is None else base64.b64decode(doc.custom_metadata, validate=True)
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=sid,
            start_offset=doc.start_offset,
            end_offset=doc.end_offset,
            max_timestamp_ms=doc.max_timestamp_ms,
            broker_id=doc.broker_id,
            event_timestamp_ms=doc.event_timestamp_ms,
            segment_size_in_bytes=doc.segment_size_in_bytes,
            segment_leader_epochs=tuple(doc.segment_leader_epochs),
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            custom_metadata=custom,
            txn_index_empty=doc.txn_index_empty,
        )
    except (ValidationError, ValueError, binascii.Error) as e:
        raise RemoteStorageIntegrityError(f"{where}: corrupt segment descriptor: {e}") from e
    if expect is not None and (
        md.remote_log_segment_id.id != expect.id
        or (tp.topic, tp.partition, tp.topic_id) != (expect.topic_id_partition.topic,
                                                     expect.topic_id_partition.partition,
                                                     expect.topic_id_partition.topic_id)
    ):
        raise RemoteStorageIntegrityError(
            f"{where}: segment descriptor names segment {md.remote_log_segment_id}, expected {expect}"
        )
    return md
