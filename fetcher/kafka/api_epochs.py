"""OffsetForLeaderEpoch: clients validate their position against the remote lineage.

After a leader-epoch change in Metadata, or when resuming from a committed offset that carries an
epoch, Java consumers and librdkafka ask where their last fetched epoch ended; a position past
that end means the log was truncated under them. The answer comes from the read core's lineage
(:meth:`fetcher.PartitionPlan.end_offset_for_epoch`, Kafka's ``endOffsetFor`` rules). In merged
mode an epoch at or past the remote tier's latest one is the broker's to answer (its log goes on
past the remote end); if the broker cannot be asked the client gets a retriable error, never a
"no such epoch" that would make it reset.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import make, nested, response_class
from fetcher.kafka.context import EndpointContext
from fetcher.kafka.errors import error_code_for
from rlm.errors import RlmError


async def handle_offset_for_leader_epoch(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(23, version)
    tcls, pcls = nested(cls, "OffsetForLeaderTopicResult"), nested(cls, "EpochEndOffset")
    catalog = await ctx.topics()
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, epoch, end = ErrorCode.none, -1, -1
            if t.topic not in catalog.by_name:
                code = ErrorCode.unknown_topic_or_partition
            else:
                try:
                    epoch, end = await _answer(ctx, t.topic, int(p.partition), int(p.leader_epoch))
                except RlmError as e:
                    code = error_code_for(e)
                except (OSError, TimeoutError, asyncio.IncompleteReadError):
                    code = ErrorCode.not_leader_or_follower  # the broker is away: retry later
            parts.append(make(pcls, error_code=code, partition=p.partition, leader_epoch=epoch,
                              end_offset=end))
        topics.append(make(tcls, topic=t.topic, partitions=tuple(parts)))
    return make(cls, throttle_time=ZERO, topics=tuple(topics))


async def _answer(ctx: EndpointContext, topic: str, partition: int, leader_epoch: int) -> tuple[int, int]:
    plan = await ctx.call(partial(ctx.fetcher.plan, topic, partition))
    if ctx.forwarder is not None and leader_epoch >= plan.latest_epoch:
        return await ctx.forwarder.end_offset_for_epoch(topic, partition, leader_epoch)
    return plan.end_offset_for_epoch(leader_epoch)
