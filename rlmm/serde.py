"""Apache Kafka's exact ``__remote_log_metadata`` record format (kafka-tiered-storage.md §2).

A record value is ``uvarint(frame version 1) uvarint(apiKey) uvarint(version)`` followed by the
message in flexible-version encoding. We always *write* version 0 — the only version released
brokers (up to 4.1) accept; their metadata consumer stops for good on anything newer — and we
*read* versions 0 and 1 (1 adds tagged ``BrokerLeaderEpoch``/``EndOffset`` fields seen in
unreleased Kafka code). Unknown tagged fields are skipped. Anything undecodable raises
:class:`~rlm.errors.MetadataDecodeError` naming the metadata partition and offset, so a
consumer can log and skip it instead of stopping.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from rlm.errors import MetadataDecodeError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm._protocol import ProtocolError, Reader, Writer, tagged_bool, tagged_int32, tagged_int64

FRAME_VERSION = 1
WRITE_VERSION = 0
MAX_READ_VERSION = 1

API_KEY_SEGMENT = 0
API_KEY_SEGMENT_UPDATE = 1
API_KEY_PARTITION_DELETE = 2
API_KEY_SEGMENT_SNAPSHOT = 3

_TAG_TXN_INDEX_EMPTY = 0
_TAG_BROKER_LEADER_EPOCH = 1  # apiKey 0 and 3, version 1+
_TAG_UPDATE_BROKER_LEADER_EPOCH = 0  # apiKey 1, version 1+
_TAG_UPDATE_END_OFFSET = 1  # apiKey 1, version 1+


def _epochs_tuple(epochs: tuple[tuple[int, int], ...] | dict[int, int]) -> tuple[tuple[int, int], ...]:
    items = epochs.items() if isinstance(epochs, dict) else epochs
    return tuple(sorted((int(e), int(o)) for e, o in items))


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's ``RemoteLogSegmentMetadataSnapshot`` (apiKey 3): a segment without its partition.

    Kafka's serde supports it but nothing writes it to the topic, and a broker's consumer
    that meets one stops; it exists here for byte compatibility and snapshot tooling.
    """

    segment_id: KafkaUuid
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "segment_leader_epochs", _epochs_tuple(self.segment_leader_epochs))

    @classmethod
    def create(cls, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        return cls(md.remote_log_segment_id.id, md.start_offset, md.end_offset, md.max_timestamp_ms,
                   md.broker_id, md.event_timestamp_ms, md.segment_size_in_bytes, md.segment_leader_epochs,
                   md.state, md.custom_metadata, md.txn_index_empty)


RemoteLogMetadata = (RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
                     | RemoteLogSegmentMetadataSnapshot)


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A decoded record with its frame header; ``extras`` holds version-1 tagged fields we read
    but have no place for in the value types (``broker_leader_epoch``, ``end_offset``)."""

    api_key: int
    version: int
    metadata: RemoteLogMetadata
    extras: dict[str, Any] = field(default_factory=dict)


def api_key_of(md: RemoteLogMetadata) -> int:
    if isinstance(md, RemoteLogSegmentMetadata):
        return API_KEY_SEGMENT
    if isinstance(md, RemoteLogSegmentMetadataUpdate):
        return API_KEY_SEGMENT_UPDATE
    if isinstance(md, RemotePartitionDeleteMetadata):
        return API_KEY_PARTITION_DELETE
    if isinstance(md, RemoteLogSegmentMetadataSnapshot):
        return API_KEY_SEGMENT_SNAPSHOT
    raise TypeError(f"not a remote log metadata value: {type(md).__name__}")


# ---- writing ---------------------------------------------------------------------------------
def _write_tip(w: Writer, tp: TopicIdPartition) -> None:
    w.compact_string(tp.topic)
    w.uuid(tp.topic_id.raw)
    w.int32(tp.partition)
    w.tagged_fields()


def _write_segment_id(w: Writer, sid: RemoteLogSegmentId) -> None:
    _write_tip(w, sid.topic_id_partition)
    w.uuid(sid.id.raw)
    w.tagged_fields()


def _write_epochs(w: Writer, epochs: tuple[tuple[int, int], ...]) -> None:
    w.compact_array_length(len(epochs))
    for epoch, offset in epochs:  # ascending by epoch, as Kafka's TreeMap iteration
        w.int32(epoch)
        w.int64(offset)
        w.tagged_fields()


def _write_segment_body(w: Writer, md: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot) -> None:
    w.int64(md.start_offset)
    w.int64(md.end_offset)
    w.int32(md.broker_id)
    w.int64(md.max_timestamp_ms)
    w.int64(md.event_timestamp_ms)
    _write_epochs(w, md.segment_leader_epochs)
    w.int32(md.segment_size_in_bytes)
    w.compact_nullable_bytes(md.custom_metadata)
    w.int8(int(md.state))
    w.tagged_fields({_TAG_TXN_INDEX_EMPTY: b"\x01"} if md.txn_index_empty else None)


def serialize(md: RemoteLogMetadata) -> bytes:
    """The record value Kafka's ``RemoteLogMetadataSerde.serialize`` produces (version 0)."""
    api_key = api_key_of(md)
    w = Writer()
    w.uvarint(FRAME_VERSION)
    w.uvarint(api_key)
    w.uvarint(WRITE_VERSION)
    try:
        if isinstance(md, RemoteLogSegmentMetadata):
            _write_segment_id(w, md.remote_log_segment_id)
            _write_segment_body(w, md)
        elif isinstance(md, RemoteLogSegmentMetadataUpdate):
            _write_segment_id(w, md.remote_log_segment_id)
            w.int32(md.broker_id)
            w.int64(md.event_timestamp_ms)
            w.compact_nullable_bytes(md.custom_metadata)
            w.int8(int(md.state))
            w.tagged_fields()
        elif isinstance(md, RemotePartitionDeleteMetadata):
            _write_tip(w, md.topic_id_partition)
            w.int32(md.broker_id)
            w.int64(md.event_timestamp_ms)
            w.int8(int(md.state))
            w.tagged_fields()
        else:
            w.uuid(md.segment_id.raw)
            _write_segment_body(w, md)
    except struct.error as e:
        raise ValueError(f"cannot serialize {type(md).__name__}: a field is out of range ({e})") from e
    return w.getvalue()


# ---- reading ---------------------------------------------------------------------------------
def _read_tip(r: Reader) -> TopicIdPartition:
    name = r.compact_string("TopicIdPartition.Name")
    topic_id = r.uuid("TopicIdPartition.Id")
    partition = r.int32("TopicIdPartition.Partition")
    r.tagged_fields("TopicIdPartition tagged fields")
    return TopicIdPartition(KafkaUuid(topic_id), name, partition)


def _read_segment_id(r: Reader) -> RemoteLogSegmentId:
    tp = _read_tip(r)
    seg = r.uuid("RemoteLogSegmentId.Id")
    r.tagged_fields("RemoteLogSegmentId tagged fields")
    return RemoteLogSegmentId(tp, KafkaUuid(seg))


def _read_epochs(r: Reader) -> tuple[tuple[int, int], ...]:
    count = r.compact_array_length("SegmentLeaderEpochs")
    epochs: dict[int, int] = {}
    for _ in range(count):
        epoch = r.int32("LeaderEpoch")
        offset = r.int64("Offset")
        r.tagged_fields("SegmentLeaderEpochEntry tagged fields")
        epochs[epoch] = offset  # Kafka reads into a map: a repeated epoch keeps the last offset
    return tuple(sorted(epochs.items()))


def _segment_state(value: int, position: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(value)
    except ValueError:
        raise ProtocolError(f"unknown RemoteLogSegmentState id {value}", position) from None


def _read_segment_body(r: Reader, version: int) -> tuple[dict[str, Any], dict[str, Any]]:
    f: dict[str, Any] = {
        "start_offset": r.int64("StartOffset"),
        "end_offset": r.int64("EndOffset"),
        "broker_id": r.int32("BrokerId"),
        "max_timestamp_ms": r.int64("MaxTimestampMs"),
        "event_timestamp_ms": r.int64("EventTimestampMs"),
        "segment_leader_epochs": _read_epochs(r),
        "segment_size_in_bytes": r.int32("SegmentSizeInBytes"),
        "custom_metadata": r.compact_nullable_bytes("CustomMetadata"),
    }
    pos = r.pos
    f["state"] = _segment_state(r.int8("RemoteLogSegmentState"), pos)
    pos = r.pos
    tags = r.tagged_fields()
    extras: dict[str, Any] = {}
    if _TAG_TXN_INDEX_EMPTY in tags:
        f["txn_index_empty"] = tagged_bool(tags[_TAG_TXN_INDEX_EMPTY], "TxnIndexEmpty", pos)
    if version >= 1 and _TAG_BROKER_LEADER_EPOCH in tags:
        extras["broker_leader_epoch"] = tagged_int32(tags[_TAG_BROKER_LEADER_EPOCH], "BrokerLeaderEpoch", pos)
    return f, extras


def _read_message(r: Reader, api_key: int, version: int) -> tuple[RemoteLogMetadata, dict[str, Any]]:
    if api_key == API_KEY_SEGMENT:
        sid = _read_segment_id(r)
        f, extras = _read_segment_body(r, version)
        return RemoteLogSegmentMetadata(remote_log_segment_id=sid, **f), extras
    if api_key == API_KEY_SEGMENT_UPDATE:
        sid = _read_segment_id(r)
        broker_id = r.int32("BrokerId")
        event_ts = r.int64("EventTimestampMs")
        custom = r.compact_nullable_bytes("CustomMetadata")
        pos = r.pos
        state = _segment_state(r.int8("RemoteLogSegmentState"), pos)
        pos = r.pos
        tags = r.tagged_fields()
        update_extras: dict[str, Any] = {}
        if version >= 1:
            if _TAG_UPDATE_BROKER_LEADER_EPOCH in tags:
                update_extras["broker_leader_epoch"] = tagged_int32(tags[_TAG_UPDATE_BROKER_LEADER_EPOCH],
                                                             "BrokerLeaderEpoch", pos)
            if _TAG_UPDATE_END_OFFSET in tags:
                update_extras["end_offset"] = tagged_int64(tags[_TAG_UPDATE_END_OFFSET], "EndOffset", pos)
        return RemoteLogSegmentMetadataUpdate(sid, event_ts, state, broker_id, custom), update_extras
    if api_key == API_KEY_PARTITION_DELETE:
        tp = _read_tip(r)
        broker_id = r.int32("BrokerId")
        event_ts = r.int64("EventTimestampMs")
        pos = r.pos
        raw_state = r.int8("RemotePartitionDeleteState")
        try:
            pstate = RemotePartitionDeleteState(raw_state)
        except ValueError:
            raise ProtocolError(f"unknown RemotePartitionDeleteState id {raw_state}", pos) from None
        r.tagged_fields()
        return RemotePartitionDeleteMetadata(tp, pstate, event_ts, broker_id), {}
    if api_key == API_KEY_SEGMENT_SNAPSHOT:
        seg = KafkaUuid(r.uuid("SegmentId"))
        f, extras = _read_segment_body(r, version)
        return RemoteLogSegmentMetadataSnapshot(segment_id=seg, **f), extras
    raise ProtocolError(f"unknown apiKey {api_key}", 1)


def deserialize_record(data: bytes | bytearray | memoryview, *, partition: int | None = None,
                       offset: int | None = None, source: str | None = None) -> DecodedRecord:
    """Decodes a record value with its frame header (api key, version) and version-1 extras."""
    if data is None:
        raise MetadataDecodeError("record value is null", partition=partition, offset=offset, source=source)
    r = Reader(data)
    try:
        frame = r.uvarint("frame version")
        if frame == 0:
            raise ProtocolError("frame version 0 (the Kafka 2.8 preview format) is not supported", 0)
        if frame != FRAME_VERSION:
            raise ProtocolError(f"unknown frame version {frame}", 0)
        key_pos = r.pos
        api_key = r.uvarint("apiKey")
        if api_key > 0x7FFF:
            raise ProtocolError(f"apiKey {api_key} is larger than 32767", key_pos)
        ver_pos = r.pos
        version = r.uvarint("version")
        if version > MAX_READ_VERSION:
            raise ProtocolError(f"unsupported version {version} of apiKey {api_key}", ver_pos)
        md, extras = _read_message(r, api_key, version)
        if r.remaining:
            raise ProtocolError(f"found {r.remaining} byte(s) of garbage after apiKey {api_key}", r.pos)
    except ProtocolError as e:
        raise MetadataDecodeError(str(e), partition=partition, offset=offset, source=source) from e
    except ValueError as e:  # value-type invariants (offsets, empty epochs, bad uuid)
        raise MetadataDecodeError(f"invalid field value: {e}", partition=partition, offset=offset,
                                  source=source) from e
    return DecodedRecord(api_key, version, md, extras)


def deserialize(data: bytes | bytearray | memoryview, *, partition: int | None = None,
                offset: int | None = None, source: str | None = None) -> RemoteLogMetadata:
    """Kafka's ``RemoteLogMetadataSerde.deserialize``; raises MetadataDecodeError on bad bytes."""
    return deserialize_record(data, partition=partition, offset=offset, source=source).metadata
