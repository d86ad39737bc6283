"""Segment descriptors (``rsm_plugins.descriptor``) and the partition names listings parse."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlm.errors import RemoteStorageIntegrityError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rsm_plugins import descriptor
from rsm_plugins.layout import kafka_partition_dir, parse_kafka_partition_dir, parse_s3_topic_dir

TID = KafkaUuid.from_text("a-b_c-d-e-f-g-h-i-j-kA")  # base64url text with '-' in it


def md(custom: bytes | None = b"\xa5\x01\x00") -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(TID, "or-ders.v1", 12)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp), start_offset=100, end_offset=199,
        max_timestamp_ms=1_700_000_000_123, broker_id=3, event_timestamp_ms=1_700_000_001_000,
        segment_size_in_bytes=4096,
        segment_leader_epochs=((2, 100), (5, 150)), state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        custom_metadata=custom, txn_index_empty=True)


@pytest.mark.parametrize("custom", [None, b"", b"\xa5\x01\x00\xff"])
def test_round_trip(custom: bytes | None) -> None:
    m = md(custom)
    assert descriptor.decode(descriptor.encode(m), "x", m.remote_log_segment_id) == m


def test_a_started_segment_is_described_as_finished() -> None:
    m = md()
    started = replace(m, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    back = descriptor.decode(descriptor.encode(started), "x")
    assert back.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b'{"version": 2}', b"x" * (descriptor.MAX_BYTES + 1)])
def test_corrupt_is_a_typed_error_naming_the_object(data: bytes) -> None:
    with pytest.raises(RemoteStorageIntegrityError, match="bucket/key"):
        descriptor.decode(data, "bucket/key")


def test_another_segments_descriptor_is_refused() -> None:
    a, b = md(), md()
    with pytest.raises(RemoteStorageIntegrityError, match="expected"):
        descriptor.decode(descriptor.encode(a), "k", b.remote_log_segment_id)


def test_partition_dir_names_parse_back() -> None:
    tp = TopicIdPartition(TID, "or-ders-7", 12)
    assert parse_kafka_partition_dir(kafka_partition_dir(tp)) == tp
    assert parse_s3_topic_dir(f"or-ders-7-{TID.text}") == ("or-ders-7", TID)
    bad_names = ("", "x", f"-{TID.text}", f"t-x-{TID.text}", f"t-1{TID.text}", "t-1-short",
                 f"a/b-1-{TID.text}")
    for bad in bad_names:
        assert parse_kafka_partition_dir(bad) is None, bad
