"""Merged mode's Fetch routing: which partitions the leader serves, and filling in its answers.

A partition is forwarded when its fetch offset is at or above the broker's local log start,
or at/after the remote end (the live tail); below the local log start only the remote tier has
the records. The log start reported for forwarded partitions is the remote one (the whole log
starts there); high watermark and LSO are the broker's.

A gap ending the remote history (the broker's cleaner removed the last records of the last tiered
segment, and the broker's log now starts at or above the consumer's offset) is read through: when
the remote read finds no record at or after the offset, which is below the broker's log start,
the partition is fetched from the broker at its log start, as the broker itself would serve the
next record (KAFKA-15388). The consumer takes batches above its fetch offset and moves on;
without this it would get empty answers until the next segment is tiered.

A broker problem is never turned into a reset: when the broker cannot be asked (routing) or
does not answer (forwarding), an offset the remote tier does not hold gets NOT_LEADER_OR_FOLLOWER,
which clients retry after a metadata refresh. OFFSET_OUT_OF_RANGE would make them apply
``auto.offset.reset`` and skip or re-read records. Offsets the remote tier holds are served from
it as usual, so history stays readable while the broker is down. A broker that answers
OFFSET_OUT_OF_RANGE below its (just moved) local log start is not believed either: the remote tier
is asked instead.
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
    """Mark ``part.forward`` on partitions the leader should serve; without an answer from the
    broker, a retriable error on those whose offset lies past the remote end."""
    fwd = ctx.forwarder
    assert fwd is not None
    for p in parts:
        if p.error is not ErrorCode.none or p.topic is None:
            continue
        try:
            plan = await ctx.call(partial(ctx.fetcher.plan, p.topic, p.partition))
        except RlmError as e:
            log.warning("kafka_merged_route_failed", topic=p.topic, partition=p.partition, error=str(e))
            continue  # the remote read reports it
        p.remote_start = plan.log_start
        try:
            local_start = await fwd.local_log_start(p.topic, p.partition)
        except (RlmError, OSError, TimeoutError, asyncio.IncompleteReadError) as e:
            log.warning("kafka_merged_route_failed", topic=p.topic, partition=p.partition, error=str(e))
            if p.offset >= plan.log_end:  # only the broker has it: retry, never reset
                p.error = ErrorCode.not_leader_or_follower
            continue  # the remote tier has it: serve it
        p.local_start = local_start
        p.forward = p.offset >= local_start or p.offset >= plan.log_end


def past_remote_history(parts: list[Any]) -> None:
    """Forward, at the broker's log start, the partitions whose remote read found nothing at or
    after their offset while that offset is below the broker's log start: the offset lies in a gap
    ending the remote history, and only the broker holds what comes next. ``moved_from`` keeps
    the consumer's offset (the broker's answer then holds only batches above it)."""
    for p in parts:
        if (
            p.forward
            or p.error is not ErrorCode.none
            or not p.remote_exhausted
            or p.local_start is None
            or p.offset >= p.local_start
        ):
            continue
        log.info("kafka_merged_gap_at_remote_end", topic=p.topic, partition=p.partition, offset=p.offset,
                 local_start=p.local_start)
        p.moved_from, p.offset, p.forward = p.offset, p.local_start, True


async def forward(
    ctx: EndpointContext, parts: list[Any], isolation: IsolationLevel, max_wait_ms: int, max_bytes: int
) -> None:
    """Fetch the forwarded partitions from their leaders, at once. A partition the broker
    answers out of range below its local log start while the remote tier holds the offset is
    handed back (``forward`` cleared) for the caller to read remotely."""
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
        remote_start = getattr(p, "remote_start", None)
        if f.error is ErrorCode.offset_out_of_range and p.moved_from is not None:
            # the broker's log start moved on since routing: the remote (empty) answer stands and
            # the next fetch routes again with the broker's new log start
            fwd.forget_local_start(p.topic, p.partition)
            p.offset = p.moved_from
            return
        if (
            f.error is ErrorCode.offset_out_of_range
            and remote_start is not None
            and remote_start <= p.offset < f.log_start
        ):
            # the broker's local start moved past the offset since routing (local retention)
            log.info("kafka_merged_below_local_start", topic=p.topic, partition=p.partition, offset=p.offset)
            fwd.forget_local_start(p.topic, p.partition)
            p.forward = False
            return
        p.error = f.error
        p.records = f.records
        p.hw, p.lso = f.high_watermark, f.last_stable_offset
        p.log_start = (
            f.log_start if remote_start is None or f.log_start < 0 else min(remote_start, f.log_start)
        )
        p.aborted = (
            None if f.aborted is None else tuple(AbortedTransaction(pid, first) for pid, first in f.aborted)
        )

    await asyncio.gather(*(one(p) for p in parts))
