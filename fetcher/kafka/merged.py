"""Merged mode's Fetch routing: which partitions the leader serves, and filling in its answers.

A partition is forwarded when its fetch offset is at or above the broker's local log start,
or at/after the remote end (the live tail); below the local log start only the remote tier has
the records. The log start reported for forwarded partitions is the remote one (the whole log
starts there); high watermark and LSO are the broker's.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from fetcher.fetch import AbortedTransaction, IsolationLevel
from fetcher.kafka.context import EndpointContext
from rlm.errors import RlmError

log = structlog.get_logger(__name__)


async def route(ctx: EndpointContext, parts: list[Any]) -> None:
    """Mark ``part.forward`` on partitions the leader should serve."""
    fwd = ctx.forwarder
    assert fwd is not None
    for p in parts:
        if p.error is not ErrorCode.none or p.topic is None:
            continue
        try:
            plan = await ctx.call(partial(ctx.fetcher.plan, p.topic, p.partition))
            local_start = await fwd.local_log_start(p.topic, p.partition)
        except (RlmError, OSError, TimeoutError, asyncio.IncompleteReadError) as e:
            log.warning("kafka_merged_route_failed", topic=p.topic, partition=p.partition, error=str(e))
            continue  # serve what the remote tier has
        p.remote_start = plan.log_start
        p.forward = p.offset >= local_start or p.offset >= plan.log_end


async def forward(
    ctx: EndpointContext, parts: list[Any], isolation: IsolationLevel, max_wait_ms: int, max_bytes: int
) -> None:
    """Fetch the forwarded partitions from their leaders, at once."""
    fwd = ctx.forwarder
    assert fwd is not None

    async def one(p: Any) -> None:
        try:
            f = await fwd.fetch(
                p.topic,
                p.partition,
                p.offset,
                max(1, min(p.max_bytes, max_bytes)),
                int(isolation),
                max_wait_ms,
            )
        except (RlmError, OSError, TimeoutError, asyncio.IncompleteReadError) as e:
            log.warning("kafka_merged_forward_failed", topic=p.topic, partition=p.partition, error=str(e))
            p.error = ErrorCode.not_leader_or_follower  # retriable: the client refreshes and retries
            return
        p.error = f.error
        p.records = f.records
        p.hw, p.lso = f.high_watermark, f.last_stable_offset
        remote_start = getattr(p, "remote_start", None)
        p.log_start = (
            f.log_start if remote_start is None or f.log_start < 0 else min(remote_start, f.log_start)
        )
        p.aborted = (
            None if f.aborted is None else tuple(AbortedTransaction(pid, first) for pid, first in f.aborted)
        )

    await asyncio.gather(*(one(p) for p in parts))
