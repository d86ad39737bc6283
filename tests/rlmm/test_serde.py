"""Golden bytes (kafka-tiered-storage.md §2.4), round trips, version 1, tagged fields, bad input."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from rlmm.serde import RemoteLogSegmentMetadataSnapshot, deserialize, deserialize_record, serialize
from tests.rlmm.strategies import any_metadata

TP = TopicIdPartition(KafkaUuid(bytes(range(16))), "foo", 0)
SID = RemoteLogSegmentId(TP, KafkaUuid(bytes(range(16, 32))))
MD = RemoteLogSegmentMetadata(SID, 0, 99, 1700000000000, 1, 1700000001000, 4096, ((0, 0), (3, 50)))

TIP_HEX = "04666f6f" + bytes(range(16)).hex() + "00000000" + "00"
SID_HEX = TIP_HEX + bytes(range(16, 32)).hex() + "00"
EPOCHS_HEX = "03" + "00000000" + "0000000000000000" + "00" + "00000003" + "0000000000000032" + "00"
BODY_HEX = ("0000000000000000" + "0000000000000063" + "00000001" + "0000018bcfe56800" + "0000018bcfe56be8"
            + EPOCHS_HEX + "00001000")
SEGMENT_HEX = "010000" + SID_HEX + BODY_HEX + "00" + "00" + "00"


def test_segment_metadata_golden_bytes() -> None:
    data = serialize(MD)
    assert len(data) == 115
    assert data.hex() == SEGMENT_HEX
    assert deserialize(data) == MD


def test_custom_metadata_and_txn_index_empty_tail() -> None:
    md = dataclasses.replace(MD, custom_metadata=b"\xca\xfe", txn_index_empty=True)
    data = serialize(md)
    assert data.hex() == "010000" + SID_HEX + BODY_HEX + "03cafe" + "00" + "01000101"
    assert deserialize(data) == md


def test_update_golden_bytes() -> None:
    u = RemoteLogSegmentMetadataUpdate(SID, 1700000002000, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1)
    data = serialize(u)
    assert len(data) == 60
    assert data.hex() == "010100" + SID_HEX + "00000001" + "0000018bcfe56fd0" + "00" + "01" + "00"
    assert deserialize(data) == u


def test_partition_delete_golden_bytes() -> None:
    d = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                                      1700000003000, 1)
    data = serialize(d)
    assert len(data) == 42
    assert data.hex() == "010200" + TIP_HEX + "00000001" + "0000018bcfe573b8" + "00" + "00"
    assert deserialize(data) == d


def test_snapshot_record_golden_bytes() -> None:
    snap = RemoteLogSegmentMetadataSnapshot.create(dataclasses.replace(MD, custom_metadata=b""))
    data = serialize(snap)
    assert data.hex() == "010300" + bytes(range(16, 32)).hex() + BODY_HEX + "01" + "00" + "00"
    assert deserialize(data) == snap


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_metadata)
def test_round_trip(md: object) -> None:
    data = serialize(md)  # type: ignore[arg-type]
    assert data[:3] == bytes([1, data[1], 0])
    assert deserialize(data) == md


def test_version_1_tagged_fields_are_read() -> None:
    v1 = bytes.fromhex("010001" + SID_HEX + BODY_HEX + "00" + "00" + "02" + "000101" + "010400000007")
    rec = deserialize_record(v1)
    assert rec.version == 1
    assert rec.metadata == dataclasses.replace(MD, txn_index_empty=True)
    assert rec.extras == {"broker_leader_epoch": 7}
    upd = bytes.fromhex("010101" + SID_HEX + "00000001" + "0000018bcfe56fd0" + "00" + "01"
                        + "02" + "000400000005" + "01080000000000000063")
    rec = deserialize_record(upd)
    assert rec.metadata.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED  # type: ignore[union-attr]
    assert rec.extras == {"broker_leader_epoch": 5, "end_offset": 99}


def test_unknown_tagged_fields_are_skipped_in_every_struct() -> None:
    unknown = "02" + "05" + "02abcd" + "1f" + "00"  # two unknown tags: 5 (2 bytes), 31 (empty)
    tip = "04666f6f" + bytes(range(16)).hex() + "00000000" + unknown
    sid = tip + bytes(range(16, 32)).hex() + unknown
    epochs = "03" + "00000000" + "0000000000000000" + unknown + "00000003" + "0000000000000032" + unknown
    body = ("0000000000000000" + "0000000000000063" + "00000001" + "0000018bcfe56800" + "0000018bcfe56be8"
            + epochs + "00001000")
    data = bytes.fromhex("010000" + sid + body + "00" + "00" + unknown)
    assert deserialize(data) == MD


@pytest.mark.parametrize(("hexdata", "reason"), [
    ("", "truncated frame version"),
    ("00", "frame version 0"),
    ("02", "unknown frame version 2"),
    ("010900", "unknown apiKey 9"),
    ("0100", "truncated version"),
    ("010002", "unsupported version 2"),
    ("01ffff7f", "larger than 32767"),
    (SEGMENT_HEX + "00", "1 byte(s) of garbage"),
    (SEGMENT_HEX[:-10], "truncated"),
    ("010000" + "00" + "00" * 40, "serialized as null"),
    ("010200" + TIP_HEX + "00000001" + "0000018bcfe573b8" + "07" + "00",
     "unknown RemotePartitionDeleteState id 7"),
    ("010000" + SID_HEX + BODY_HEX + "00" + "09" + "00", "unknown RemoteLogSegmentState id 9"),
    ("010000" + SID_HEX + BODY_HEX.replace("0000000000000063", "ffffffffffffffff", 1) + "000000",
     "invalid field value"),
    ("010000" + SID_HEX + BODY_HEX + "00" + "00" + "0100020101", "expected 1"),
])
def test_bad_bytes_raise_decode_error_naming_partition_and_offset(hexdata: str, reason: str) -> None:
    with pytest.raises(MetadataDecodeError) as info:
        deserialize(bytes.fromhex(hexdata), partition=7, offset=1234)
    assert reason in str(info.value)
    assert info.value.partition == 7 and info.value.offset == 1234
    assert str(info.value).startswith("__remote_log_metadata-7@1234: ")


def test_empty_epoch_list_is_a_decode_error() -> None:
    data = bytes.fromhex("010000" + SID_HEX + BODY_HEX.replace(EPOCHS_HEX, "01") + "000000")
    with pytest.raises(MetadataDecodeError, match="segment_leader_epochs must not be empty"):
        deserialize(data)


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_garbage_only_ever_raises_decode_error(data: bytes) -> None:
    with contextlib.suppress(MetadataDecodeError):
        deserialize(data)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(any_metadata, st.data())
def test_every_truncation_or_bit_flip_is_detected_or_decodes(md: object, data: st.DataObject) -> None:
    raw = serialize(md)  # type: ignore[arg-type]
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(MetadataDecodeError):
        deserialize(raw[:cut])
    pos = data.draw(st.integers(0, len(raw) - 1))
    flipped = bytearray(raw)
    flipped[pos] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(MetadataDecodeError):  # a flipped byte may still decode; else a typed error
        deserialize(bytes(flipped))
