"""Typed read errors -> Kafka error codes, as a broker's remote read path reports them; and
:class:`InvalidRequest`, a request field out of its protocol range."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fetcher.kafka.codec import error_response
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


class InvalidRequest(RlmError):
    """A request field holds a value the protocol does not allow (an isolation level of 7, a
    negative ``max_bytes``): the client is broken or hostile, not the server. The listener answers
    INVALID_REQUEST in the API's response shape and logs one warning line, no traceback.

    ``response``: the answer when the API has no top-level error code (Fetch before v7,
    ListOffsets), where INVALID_REQUEST goes on every partition of the request, as Kafka's
    ``getErrorResponse`` puts it; None: the top-level error response.
    """

    def __init__(self, field: str, value: object, response: Any = None) -> None:
        super().__init__(f"{field}={str(value)[:64]}")
        self.field = field
        self.response = response

    def answer(self, cls: Any) -> Any:
        """The response to send, for the API's response class ``cls``."""
        return self.response if self.response is not None else error_response(cls, ErrorCode.invalid_request)
