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
  requests carry only changed partitions, its answers only partitions with news. A session is
  its connection's and principal's alone.
- With SASL, every partition the answer may carry (a session's too, not only the request's) is
  checked against the principal's READ on each request (:data:`~fetcher.kafka.requester.FETCH_ACCESS`,
  the guard's cached ACL decisions): a partition without it answers TOPIC_AUTHORIZATION_FAILED
  and is never read, so a revoked ACL ends an open session's access within the cache time.
- Field values the protocol does not allow answer INVALID_REQUEST
  (:class:`~fetcher.kafka.errors.InvalidRequest`): an isolation level other than 0/1 or a
  negative ``max_bytes`` for the whole request, a negative partition index or
  ``partition_max_bytes`` for that partition.
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
from fetcher.kafka.errors import InvalidRequest, error_code_for
from fetcher.kafka.fetch_sessions import FetchSession, SessionPartition
from fetcher.kafka.requester import CONNECTION, FETCH_ACCESS, FetchAccess
from rlm.errors import FetchTimeoutError, RlmError

log = structlog.get_logger(__name__)

_MAX_WAIT_CAP_MS = 5_000
#: errors that only refuse a partition: they neither end a long-poll early nor count as news of a read
_REFUSED = (ErrorCode.topic_authorization_failed, ErrorCode.invalid_request)


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
    #: merged mode: the broker's log start seen when routing (None: not asked, or no answer)
    local_start: int | None = None
    #: a remote read (one record at least allowed) found no record at or after the offset
    remote_exhausted: bool = False
    #: merged mode: the consumer's offset when the fetch was moved up to the broker's log start
    moved_from: int | None = None


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
            if p.partition < 0 or p.partition_max_bytes < 0:
                part.error = ErrorCode.invalid_request
            elif entry is None:
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
            p.remote_exhausted = r.empty
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
        p.remote_exhausted = r.empty and total == 0  # with min_one_message: nothing at or after
        total += n
        left -= n
    return total


def _session_request(ctx: EndpointContext, req: Any, version: int, access: FetchAccess | None) -> tuple[
        ErrorCode, FetchSession | None, bool]:
    """(error, session, incremental) for the request's session id and epoch (KIP-227), as seen by
    this connection and principal: another owner's session id is unknown here."""
    if version < 7:
        return ErrorCode.none, None, False
    sid, epoch = int(req.session_id), int(req.session_epoch)
    sessions = ctx.fetch_sessions
    connection, principal = CONNECTION.get(), access.principal if access is not None else None
    size = sum(len(t.partitions) for t in req.topics)
    if epoch in (-1, 0):  # full: close the given session (if ours); epoch 0 also starts a new one
        if sid:
            sessions.close(sid, connection, principal)
        return ErrorCode.none, (sessions.new(connection, principal, size) if epoch == 0 else None), False
    session = sessions.get(sid, connection, principal)
    if session is None:
        if access is not None and sessions.foreign(sid, connection, principal):
            access.denied("fetch session of another connection or principal", [])
        return ErrorCode.fetch_session_id_not_found, None, False
    if epoch != session.epoch:
        return ErrorCode.invalid_fetch_session_epoch, None, False
    session.epoch += 1  # now, before any await: a pipelined copy of this request is a replay
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
    return session


async def handle_fetch(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(1, version)
    isolation, max_bytes = _request_limits(ctx, cls, req, version)
    access = FETCH_ACCESS.get()
    code, session, incremental = _session_request(ctx, req, version, access)
    if code is not ErrorCode.none:
        return make(cls, throttle_time=ZERO, error_code=code, session_id=0, responses=())
    if session is not None:  # before any await: pipelined requests of a session apply in order
        _merge_session(session, req, incremental)
    max_wait_ms = min(int(req.max_wait.total_seconds() * 1000), _MAX_WAIT_CAP_MS)
    deadline = time.monotonic() + max_wait_ms / 1000
    catalog = await ctx.topics()
    if session is not None:
        wanted = _wanted_in_session(session, version >= 13, catalog, ctx.settings.max_partition_fetch_bytes)
    else:
        wanted = _wanted(req, catalog, ctx.settings.max_partition_fetch_bytes)
    if access is not None:
        _authorize(wanted, access)
    flat = [p for _, ps in wanted for p in ps]
    if ctx.forwarder is not None:
        await merged.route(ctx, flat)
    got = await ctx.call(lambda: _read(ctx, flat, max_bytes, isolation))
    if ctx.forwarder is not None:
        merged.past_remote_history(flat)  # a gap ending the remote history: the broker goes on
    tail = [p for p in flat if p.forward]
    served = [p for p in flat if p.error not in _REFUSED]
    if tail:
        await merged.forward(ctx, tail, isolation, 0 if got else max_wait_ms, max_bytes - got)
        back = [p for p in tail if not p.forward]  # below the broker's new local start: remote
        if back:
            await ctx.call(lambda: _read(ctx, back, max(1, max_bytes - got), isolation))
    elif served and got < max(int(req.min_bytes), 1) and all(p.error is ErrorCode.none for p in served):
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)
            await ctx.call(lambda: _read(ctx, flat, max_bytes, isolation))
    if session is not None:
        wanted = _news(session, wanted, incremental)
    return _response(cls, wanted, ctx.settings.node_id, session.session_id if session is not None else 0)


def _request_limits(ctx: EndpointContext, cls: Any, req: Any, version: int) -> tuple[IsolationLevel, int]:
    """The request's isolation level and response limit (capped as a broker caps it,
    ``fetch.max.bytes``: one request must not turn into a GET of a whole segment); values the
    protocol does not allow raise :class:`InvalidRequest`."""
    level = int(getattr(req, "isolation_level", 0) or 0)
    if level not in (0, 1):
        raise InvalidRequest("isolation_level", level, _invalid_response(cls, req, version))
    requested = int(getattr(req, "max_bytes", 0x7FFFFFFF))
    if requested < 0:
        raise InvalidRequest("max_bytes", requested, _invalid_response(cls, req, version))
    return IsolationLevel(level), min(requested, ctx.settings.fetch_max_bytes)


def _invalid_response(cls: Any, req: Any, version: int) -> Any:
    """Before v7 a Fetch answer has no top-level error: INVALID_REQUEST on every partition asked
    (Kafka's ``getErrorResponse``); from v7 None, the top-level error."""
    if has_field(cls, "error_code"):
        return None
    wanted = []
    for t in req.topics:
        parts = [_Part(None, p.partition, -1, 0, -1, error=ErrorCode.invalid_request) for p in t.partitions]
        wanted.append((t.topic, parts))
    return _response(cls, wanted, 0)


def _authorize(wanted: list[tuple[Any, list[_Part]]], access: FetchAccess) -> None:
    """TOPIC_AUTHORIZATION_FAILED, and no read, for every partition of a topic the principal may not
    READ. A topic named in the request but unknown here is refused the same way (as a broker
    does: no hint that it exists); an unknown topic id stays UNKNOWN_TOPIC_ID."""
    refused = set()
    for key, parts in wanted:
        for p in parts:
            name = p.topic if p.topic is not None else (key if isinstance(key, str) else None)
            if name is None or p.error is ErrorCode.invalid_request or access.readable(name):
                continue
            p.error = ErrorCode.topic_authorization_failed
            p.hw = p.lso = p.log_start = -1
            p.records = b""
            refused.add(name)
    if refused:
        access.denied("no READ on topic", sorted(refused))


def _wanted_in_session(session: FetchSession, by_id: bool, catalog: Catalog,
                       partition_cap: int) -> list[tuple[Any, list[_Part]]]:
    """Every partition of the session, grouped by topic in the session's order."""
    grouped: dict[Any, list[_Part]] = {}
    for (key, partition), sp in session.parts.items():
        entry = catalog.by_id.get(key) if by_id else catalog.by_name.get(key)
        part = _Part(entry.name if entry else None, partition, sp.fetch_offset,
                     min(sp.max_bytes, partition_cap), sp.leader_epoch)
        if partition < 0 or sp.max_bytes < 0:
            part.error = ErrorCode.invalid_request
        elif entry is None:
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
