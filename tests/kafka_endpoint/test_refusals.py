"""The refusal shapes of the Kafka endpoint's authorization (fetcher.kafka.codec.refused_topics /
error_response): for every version the endpoint answers, a refused topic of ListOffsets,
OffsetCommit and OffsetFetch is the entity a broker sends, field for field, and it encodes."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from fetcher.kafka.codec import (
    SUPPORTED,
    encode_response,
    error_response,
    make,
    nested,
    refused_topics,
    response_class,
)

CODE = ErrorCode.topic_authorization_failed


def _versions(key: int) -> range:
    lo, hi = SUPPORTED[key]
    return range(lo, hi + 1)


@pytest.mark.parametrize("version", _versions(2))
def test_list_offsets(version: int) -> None:
    cls = response_class(2, version)
    t_cls, p_cls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    got = refused_topics(t_cls, p_cls, [("t", [0, 3])], CODE, timestamp=-1, offset=-1, leader_epoch=-1)
    want = tuple(make(t_cls, name="t", partitions=tuple(
        make(p_cls, partition_index=i, error_code=CODE, old_style_offsets=(), timestamp=-1, offset=-1,
             leader_epoch=-1) for i in (0, 3))) for _ in [0])
    assert got == want
    encode_response(7, make(cls, throttle_time=_zero(), topics=got))


@pytest.mark.parametrize("version", _versions(8))
def test_offset_commit(version: int) -> None:
    cls = response_class(8, version)
    t_cls, p_cls = nested(cls, "OffsetCommitResponseTopic"), nested(cls, "OffsetCommitResponsePartition")
    got = refused_topics(t_cls, p_cls, [("a", [1]), ("b", [])], CODE)
    want = (make(t_cls, name="a", partitions=(make(p_cls, partition_index=1, error_code=CODE),)),
            make(t_cls, name="b", partitions=()))
    assert got == want
    encode_response(7, make(cls, throttle_time=_zero(), topics=got))


@pytest.mark.parametrize("version", _versions(9))
def test_offset_fetch(version: int) -> None:
    cls = response_class(9, version)
    names = ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions") if version >= 8 else (
        "OffsetFetchResponseTopic", "OffsetFetchResponsePartition")
    t_cls, p_cls = nested(cls, names[0]), nested(cls, names[1])
    got = refused_topics(t_cls, p_cls, [("a", [2])], CODE, committed_offset=-1, committed_leader_epoch=-1,
                         metadata="")
    want = (make(t_cls, name="a", partitions=(make(
        p_cls, partition_index=2, committed_offset=-1, committed_leader_epoch=-1, metadata="",
        error_code=CODE),)),)
    assert got == want


def test_error_response_keeps_given_values_and_drops_unknown_fields() -> None:
    cls = response_class(3, 12)
    t_cls = nested(cls, "MetadataResponseTopic")
    t = error_response(t_cls, CODE, name="x", topic_authorized_operations=-(2**31), no_such_field=1)
    assert (t.error_code, t.name, t.partitions, t.is_internal, t.topic_authorized_operations) == (
        CODE, "x", (), False, -(2**31))


def _zero() -> object:
    import datetime

    return datetime.timedelta(0)
