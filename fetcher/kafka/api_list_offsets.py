"""ListOffsets: earliest = remote log start, latest = remote log end (= HW = LSO), timestamps KIP-33.

A timestamp later than every remote record answers offset -1 / timestamp -1 (Kafka's "no such
record"); ``max timestamp`` (-3) is answered the same way: not supported here.

Values the protocol does not allow answer INVALID_REQUEST (ListOffsets has no top-level error, so
on the partitions): an isolation level other than 0/1 on every partition of the request
(:class:`~fetcher.kafka.errors.InvalidRequest`), a negative partition index on that partition.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from fetcher import IsolationLevel
from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import make, nested, response_class
from fetcher.kafka.context import EndpointContext
from fetcher.kafka.errors import InvalidRequest, error_code_for
from rlm.errors import RlmError


async def handle_list_offsets(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(2, version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    part_cls = nested(cls, "ListOffsetsPartitionResponse")
    level = int(getattr(req, "isolation_level", 0) or 0)
    if level not in (0, 1):
        raise InvalidRequest("isolation_level", level, _refused(cls, req, ErrorCode.invalid_request))
    catalog = await ctx.topics()
    topics = []
    for t in req.topics:
        entry = catalog.by_name.get(t.name)
        parts = []
        for p in t.partitions:
            if p.partition_index < 0:
                parts.append(_refused_partition(part_cls, p.partition_index, ErrorCode.invalid_request))
                continue
            if entry is None or all(tp.partition != p.partition_index for tp in entry.partitions):
                unknown = ErrorCode.unknown_topic_or_partition
                parts.append(_refused_partition(part_cls, p.partition_index, unknown))
                continue
            try:
                offset, ts, epoch = await ctx.call(
                    partial(_lookup, ctx, t.name, int(p.partition_index), int(p.timestamp), level == 1)
                )
                code = ErrorCode.none
            except RlmError as e:
                offset, ts, epoch, code = -1, -1, -1, error_code_for(e)
            parts.append(
                make(
                    part_cls,
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch,
                    old_style_offsets=(offset,),
                )
            )
        topics.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(cls, throttle_time=ZERO, topics=tuple(topics))


def _refused_partition(part_cls: Any, partition: int, code: ErrorCode) -> Any:
    return make(part_cls, partition_index=partition, error_code=code, timestamp=-1, offset=-1,
                leader_epoch=-1)


def _refused(cls: Any, req: Any, code: ErrorCode) -> Any:
    """The answer with ``code`` on every partition of the request (Kafka's ``getErrorResponse``)."""
    topic_cls, part_cls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    topics = tuple(
        make(topic_cls, name=t.name,
             partitions=tuple(_refused_partition(part_cls, p.partition_index, code) for p in t.partitions))
        for t in req.topics
    )
    return make(cls, throttle_time=ZERO, topics=topics)


def _lookup(ctx: EndpointContext, topic: str, partition: int, timestamp: int,
            read_committed: bool = False) -> tuple[int, int, int]:
    """The core's ListOffsets answer; without merged mode the end of tiered history is the end."""
    got = ctx.fetcher.list_offset(
        topic, partition, timestamp, remote_only=ctx.forwarder is None,
        isolation=IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED)
    if got is None:
        return -1, -1, -1
    return got.offset, got.timestamp, got.leader_epoch
