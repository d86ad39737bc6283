"""Typed read errors -> Kafka error codes, as a broker's remote read path reports them."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from rlm.errors import (
    FencedLeaderEpochError,
    OffsetOutOfRangeError,
    ReaderBusyError,
    RemoteSegmentDeletedError,
    RlmError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)


def error_code_for(e: RlmError) -> ErrorCode:
    """Kafka's code for a read error. A full reader queue is an error (Kafka's
    ``RejectedExecutionException`` path); storage trouble is KAFKA_STORAGE_ERROR (retriable:
    clients refresh metadata and fetch again)."""
    if isinstance(e, OffsetOutOfRangeError):
        return ErrorCode.offset_out_of_range
    if isinstance(e, UnknownTopicOrPartitionError):
        return ErrorCode.unknown_topic_or_partition
    if isinstance(e, FencedLeaderEpochError):
        return ErrorCode.fenced_leader_epoch
    if isinstance(e, UnknownLeaderEpochError):
        return ErrorCode.unknown_leader_epoch
    if isinstance(e, ReaderBusyError | RemoteSegmentDeletedError):
        return ErrorCode.kafka_storage_error
    return ErrorCode.kafka_storage_error if e.retriable else ErrorCode.unknown_server_error
