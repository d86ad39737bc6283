"""Fetch: Kafka's remote read through :meth:`RemoteFetcher.fetch`, answered as the partition leader.

- Records are whole batches from the read core (the first one may start before the fetch
  offset; clients skip those records). ``read_committed`` carries the aborted transactions.
- High watermark = last stable offset = the remote log end, log start = the remote log start:
  the end of tiered history looks like the end of the log, so a consumer that reaches it waits
  (long-poll, ``max_wait_ms``) instead of resetting, and never sees a gap it would loop on.
- A fetch at the end waits up to ``max_wait_ms`` and reads again (more may have been tiered).
- A remote read that times out gives empty records and no error (Kafka's DelayedRemoteFetch
  expiry); out-of-range offsets get OFFSET_OUT_OF_RANGE so clients apply ``auto.offset.reset``.
- Incremental fetch sessions (KIP-227, :mod:`fetcher.kafka.fetch_sessions`): a session's
  requests carry only changed partitions, its answers only partitions with news.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from fetcher.fetch import AbortedTransaction, FetchResult, IsolationLevel, RecordViews
from fetcher.kafka import merged
from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import has_field, make, nested, response_class
from fetcher.kafka.context import Catalog, EndpointContext
from fetcher.kafka.errors import error_code_for
from fetcher.kafka.fetch_sessions import FetchSession, SessionPartition
from rlm.errors import FetchTimeoutError, RlmError

log = structlog.get_logger(__name__)

_MAX_WAIT_CAP_MS = 5_000


@dataclass(slots=True)
class _Part:
    topic: str | None
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int
    error: ErrorCode = ErrorCode.none
    records: bytes | RecordViews = b""
    hw: int = -1
    lso: int = -1
    log_start: int = -1
    forward: bool = False
    remote_start: int | None = None
    aborted: tuple[AbortedTransaction, ...] | None = None


def _wanted(req: Any, catalog: Catalog, partition_cap: int) -> list[tuple[Any, list[_Part]]]:
    """The request's partitions; ``partition_max_bytes`` capped at ``partition_cap``."""
    out = []
    for t in req.topics:
        key = getattr(t, "topic_id", None) if has_field(type(t), "topic_id") else t.topic
        if has_field(type(t), "topic_id"):
            entry = catalog.by_id.get(t.topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            entry = catalog.by_name.get(t.topic)
            missing = ErrorCode.unknown_topic_or_partition
        parts = []
        for p in t.partitions:
            part = _Part(
                entry.name if entry else None,
                p.partition,
                int(p.fetch_offset),
                min(int(p.partition_max_bytes), partition_cap),
                int(getattr(p, "current_leader_epoch", -1)),
            )
            if entry is None:
                part.error = missing
            elif all(tp.partition != p.partition for tp in entry.partitions):
                part.error = ErrorCode.unknown_topic_or_partition
            parts.append(part)
        out.append((key, parts))
    return out


def _prepare(ctx: EndpointContext, p: _Part, isolation: IsolationLevel) -> bool:
    """Range, epoch check and empty defaults of one partition; True when there is a read to do."""
    assert p.topic is not None
    try:
        plan = ctx.fetcher.plan(p.topic, p.partition)
    except RlmError as e:
        p.error = error_code_for(e)
        return False
    p.hw = p.lso = plan.log_end
    p.log_start = plan.log_start
    epoch = max(plan.latest_epoch, 0)
    if p.leader_epoch >= 0 and p.leader_epoch != epoch:
        p.error = ErrorCode.fenced_leader_epoch if p.leader_epoch < epoch else ErrorCode.unknown_leader_epoch
        return False
    if isolation is IsolationLevel.READ_COMMITTED:
        p.aborted = ()
        p.lso = ctx.fetcher.last_stable_offset(p.topic, p.partition)
        return not p.lso <= p.offset <= plan.log_end  # at/past the LSO: empty, no error
    return p.offset != plan.log_end  # at the end: empty, no error (the client waits)


def _read_one(
    ctx: EndpointContext, p: _Part, size: int, isolation: IsolationLevel, min_one: bool
) -> FetchResult:
    """The core's read (or its read-ahead result), then read-ahead of the next one.

    A read-ahead that failed is a miss, not an answer: its error may be seconds old (a storage
    fault since cleared), so the read is done again now and reports its own outcome.
    """
    assert p.topic is not None
    ahead = ctx.prefetch.take((p.topic, p.partition, p.offset, size, int(isolation)))
    r = None
    if ahead is not None:
        try:
            r = ahead.result()
        except Exception as e:  # storage errors, a cancelled read-ahead: read again
            log.info("kafka_read_ahead_failed", topic=p.topic, partition=p.partition, offset=p.offset,
                     error=str(e))
    if r is None or (not min_one and r.size > size):
        r = ctx.fetcher.fetch(
            p.topic, p.partition, p.offset, max_bytes=size, isolation=isolation, min_one_message=min_one,
            sequential=ctx.settings.sequential_reads, as_views=True,
        )
    if not r.empty and r.next_offset < r.log_end:
        ctx.prefetch.start((p.topic, p.partition, r.next_offset, size, int(isolation)),
                           ctx.settings.sequential_reads)
    return r


def _apply(p: _Part, r: FetchResult) -> int:
    p.records = r.views if r.views is not None else r.records  # written out part by part
    p.hw = p.lso = r.log_end
    if r.last_stable_offset is not None:
        p.lso = r.last_stable_offset
    p.log_start = r.log_start
    p.aborted = r.aborted_transactions
    return r.size


def _fail(p: _Part, e: RlmError) -> None:
    if isinstance(e, FetchTimeoutError):
        return  # Kafka's DelayedRemoteFetch expiry: empty records, no error
    p.error = error_code_for(e)
    p.hw = p.lso = p.log_start = -1


def _read(ctx: EndpointContext, parts: list[_Part], max_bytes: int, isolation: IsolationLevel) -> int:
    """Blocking: fill every partition; returns the bytes read.

    When every partition's limit fits in the response limit (the usual case) the partitions are
    read at once; otherwise one after another, each getting what the earlier ones left. Either
    way the result is Kafka's: only the first partition with data may exceed its limit with
    one oversized batch (``minOneMessage``).
    """
    todo = [p for p in parts if p.error is ErrorCode.none and p.topic is not None and not p.forward]
    todo = [p for p in todo if _prepare(ctx, p, isolation)]
    total = 0
    if sum(max(1, p.max_bytes) for p in todo) <= max_bytes:
        futs = [ctx.reads.submit(_read_one, ctx, p, max(1, p.max_bytes), isolation, True) for p in todo]
        for p, fut in zip(todo, futs, strict=True):
            try:
                r = fut.result()
            except RlmError as e:
                _fail(p, e)
                continue
            if total and r.size > max(1, p.max_bytes):
                continue  # an oversized first batch after another partition's data: Kafka gives none
            total += _apply(p, r)
        return total
    left = max_bytes
    for p in todo:
        if left <= 0:
            break
        try:
            r = _read_one(ctx, p, max(1, min(p.max_bytes, left)), isolation, total == 0)
        except RlmError as e:
            _fail(p, e)
            continue
        n = _apply(p, r)
        total += n
        left -= n
    return total


def _session_request(ctx: EndpointContext, req: Any, version: int) -> tuple[
        ErrorCode, FetchSession | None, bool]:
    """(error, session, incremental) for the request's session id and epoch (KIP-227)."""
    if version < 7:
        return ErrorCode.none, None, False
    sid, epoch = int(req.session_id), int(req.session_epoch)
    sessions = ctx.fetch_sessions
    if sid == 0:
        return ErrorCode.none, (sessions.new() if epoch == 0 else None), False
    if epoch in (-1, 0):  # close it; epoch 0 also starts a new one
        sessions.close(sid)
        return ErrorCode.none, (sessions.new() if epoch == 0 else None), False
    session = sessions.get(sid)
    if session is None:
        return ErrorCode.fetch_session_id_not_found, None, False
    if epoch != session.epoch:
        return ErrorCode.invalid_fetch_session_epoch, None, False
    return ErrorCode.none, session, True


def _merge_session(session: FetchSession, req: Any, incremental: bool) -> Any:
    """Apply the request's partitions (added or changed) and forgotten ones to the session, and
    return the full partition list to read, in the request's shape."""
    if not incremental:
        session.parts.clear()
    for t in getattr(req, "forgotten_topics_data", ()) or ():
        key = getattr(t, "topic_id", None) if has_field(type(t), "topic_id") else t.topic
        for p in t.partitions:
            session.parts.pop((key, int(p)), None)
    for t in req.topics:
        key = getattr(t, "topic_id", None) if has_field(type(t), "topic_id") else t.topic
        for p in t.partitions:
            old = session.parts.get((key, int(p.partition)))
            session.parts[(key, int(p.partition))] = SessionPartition(
                int(p.fetch_offset), int(p.partition_max_bytes), int(getattr(p, "current_leader_epoch", -1)),
                old.sent if old is not None else None)
    session.epoch = session.epoch + 1 if incremental else 1
    return session


async def handle_fetch(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(1, version)
    code, session, incremental = _session_request(ctx, req, version)
    if code is not ErrorCode.none:
        return make(cls, throttle_time=ZERO, error_code=code, session_id=0, responses=())
    isolation = IsolationLevel(int(getattr(req, "isolation_level", 0)) or 0)
    # client-sent limits are capped as a broker caps them (fetch.max.bytes): one request must
    # not turn into a GET of a whole segment
    max_bytes = min(int(getattr(req, "max_bytes", 0x7FFFFFFF)), ctx.settings.fetch_max_bytes)
    max_wait_ms = min(int(req.max_wait.total_seconds() * 1000), _MAX_WAIT_CAP_MS)
    deadline = time.monotonic() + max_wait_ms / 1000
    catalog = await ctx.topics()
    if session is not None:
        _merge_session(session, req, incremental)
        wanted = _wanted_in_session(session, version >= 13, catalog, ctx.settings.max_partition_fetch_bytes)
    else:
        wanted = _wanted(req, catalog, ctx.settings.max_partition_fetch_bytes)
    flat = [p for _, ps in wanted for p in ps]
    if ctx.forwarder is not None:
        await merged.route(ctx, flat)
    got = await ctx.call(lambda: _read(ctx, flat, max_bytes, isolation))
    tail = [p for p in flat if p.forward]
    if tail:
        await merged.forward(ctx, tail, isolation, 0 if got else max_wait_ms, max_bytes - got)
        back = [p for p in tail if not p.forward]  # below the broker's new local start: remote
        if back:
            await ctx.call(lambda: _read(ctx, back, max(1, max_bytes - got), isolation))
    elif got < max(int(req.min_bytes), 1) and not any(p.error is not ErrorCode.none for p in flat):
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)
            await ctx.call(lambda: _read(ctx, flat, max_bytes, isolation))
    if session is not None:
        wanted = _news(session, wanted, incremental)
    return _response(cls, wanted, ctx.settings.node_id, session.session_id if session is not None else 0)


def _wanted_in_session(session: FetchSession, by_id: bool, catalog: Catalog,
                       partition_cap: int) -> list[tuple[Any, list[_Part]]]:
    """Every partition of the session, grouped by topic in the session's order."""
    grouped: dict[Any, list[_Part]] = {}
    for (key, partition), sp in session.parts.items():
        entry = catalog.by_id.get(key) if by_id else catalog.by_name.get(key)
        part = _Part(entry.name if entry else None, partition, sp.fetch_offset,
                     min(sp.max_bytes, partition_cap), sp.leader_epoch)
        if entry is None:
            part.error = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
        elif all(tp.partition != partition for tp in entry.partitions):
            part.error = ErrorCode.unknown_topic_or_partition
        grouped.setdefault(key, []).append(part)
    return list(grouped.items())


def _news(session: FetchSession, wanted: list[tuple[Any, list[_Part]]],
          incremental: bool) -> list[tuple[Any, list[_Part]]]:
    """What the answer carries: everything for a full request; for an incremental one only
    partitions with records, an error, or a changed high watermark / LSO / log start."""
    out = []
    for key, parts in wanted:
        keep = []
        for p in parts:
            sp = session.parts.get((key, p.partition))
            state = (p.hw, p.lso, p.log_start)
            news = p.records or p.error is not ErrorCode.none or sp is None or sp.sent != state
            if news or not incremental:
                keep.append(p)
            if sp is not None:
                sp.sent = state
        if keep:
            out.append((key, keep))
    return out


def _response(cls: Any, wanted: list[tuple[Any, list[_Part]]], node: int, session_id: int = 0) -> Any:
    topic_cls = nested(cls, "FetchableTopicResponse")
    part_cls = nested(cls, "PartitionData")
    aborted_cls = nested(cls, "AbortedTransaction")
    topics = []
    for key, parts in wanted:
        out = []
        for p in parts:
            aborted = (
                None
                if p.aborted is None
                else tuple(
                    make(aborted_cls, producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in p.aborted
                )
            )
            out.append(
                make(
                    part_cls,
                    partition_index=p.partition,
                    error_code=p.error,
                    high_watermark=p.hw,
                    last_stable_offset=p.lso,
                    log_start_offset=p.log_start,
                    aborted_transactions=aborted,
                    preferred_read_replica=-1,
                    records=p.records,
                )
            )
        topics.append(make(topic_cls, topic=key, topic_id=key, partitions=tuple(out)))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, session_id=session_id,
                responses=tuple(topics))
