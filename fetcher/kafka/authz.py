"""Authorization by the cluster's own ACLs: the broker is asked, as the client's principal.

The SASL relay (:mod:`fetcher.kafka.sasl`) leaves each client connection with a broker
connection authenticated as the same principal. On it the endpoint asks Metadata v12 with
``include_topic_authorized_operations`` (KIP-430): a topic the principal may not DESCRIBE is not
listed at all, and each listed one carries the bitfield of what it may do. DescribeGroups v5
with ``include_authorized_operations`` does the same for a consumer group. The answers are the
broker's authorizer's (StandardAuthorizer, AclAuthorizer, a plugin: whatever the cluster runs),
so there is no second ACL list to keep in sync.

What the endpoint then answers is what a broker answers: Metadata leaves out topics without
DESCRIBE (or, when they were named, answers TOPIC_AUTHORIZATION_FAILED for them); Fetch and
ListOffsets answer TOPIC_AUTHORIZATION_FAILED for partitions of topics without READ/DESCRIBE
(their data is never read); group APIs answer GROUP_AUTHORIZATION_FAILED without READ on the
group. Decisions are cached per principal for ``authz_cache_ms`` (shared by that principal's
connections), so an ACL revoked on the broker takes effect within that time. Each denied
request is logged once, with principal, resource and reason.

Limit: DescribeGroups must reach the group's coordinator to report operations; when the relayed
broker is not the coordinator only DESCRIBE is known (a GROUP_AUTHORIZATION_FAILED is still
definite) and READ is assumed from it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from fetcher.cluster_auth import DESCRIBE, READ, AuthzCache, BrokerAccess, BrokerSession, LoginLimiter
from fetcher.kafka.codec import (
    SUPPORTED,
    error_response,
    has_field,
    make,
    nested,
    refused_topics,
    response_class,
)
from fetcher.kafka.consumer_groups import VISIBLE_TOPICS
from fetcher.kafka.context import EndpointContext
from fetcher.kafka.requester import FETCH_ACCESS, FetchAccess
from fetcher.kafka.sasl import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    SASL_VERSIONS,
    CloseConnection,
    LocalExchange,
    SaslSession,
)

log = structlog.get_logger(__name__)

_GROUP_KEYS = {8, 9, 11, 12, 13, 14, 68}  # OffsetCommit, OffsetFetch, Join/Heartbeat/Leave/SyncGroup, KIP-848

Handler = Callable[[EndpointContext, Any, int, Any], Awaitable[Any]]


class LocalPolicy(Protocol):
    """Standalone mode's users and allow rules (:class:`fetcher.kafka.local_auth.LocalUsers`)."""

    def exchange(self, mechanism: str) -> LocalExchange: ...

    def topic_ops(self, principal: str, names: list[str]) -> dict[str, int]: ...

    def group_read(self, principal: str, group: str) -> bool: ...


class PrincipalLimits:
    """Per-principal connection count and a token bucket of fetched record bytes (one second of
    burst), shared by the listener's connections."""

    def __init__(self, max_connections: int, bytes_per_s: int) -> None:
        self.max_connections = max_connections
        self.rate = bytes_per_s
        self._conns: dict[str, int] = {}
        self._bucket: dict[str, tuple[float, float]] = {}  # principal -> (tokens, at)

    def acquire(self, principal: str) -> bool:
        n = self._conns.get(principal, 0)
        if self.max_connections and n >= self.max_connections:
            return False
        self._conns[principal] = n + 1
        return True

    def release(self, principal: str) -> None:
        n = self._conns.get(principal, 0) - 1
        if n > 0:
            self._conns[principal] = n
        else:
            self._conns.pop(principal, None)

    def charge(self, principal: str, nbytes: int) -> float:
        """Take ``nbytes`` from the principal's bucket; the seconds until it is out of debt."""
        if not self.rate:
            return 0.0
        now = time.monotonic()
        tokens, at = self._bucket.get(principal, (float(self.rate), now))
        tokens = min(float(self.rate), tokens + (now - at) * self.rate) - nbytes
        self._bucket[principal] = (tokens, now)
        return max(0.0, -tokens / self.rate)


class ConnectionGuard:
    """SASL state and authorization of one client connection, around the endpoint's handlers."""

    def __init__(
        self,
        access: BrokerAccess | None,
        mechanisms: tuple[str, ...],
        cache: AuthzCache,
        peer: str,
        limits: PrincipalLimits | None = None,
        local: LocalPolicy | None = None,
        max_reauth_ms: int = 0,
        logins: LoginLimiter | None = None,
        address: str = "",
    ) -> None:
        self.local = local
        exchange = local.exchange if local is not None else None
        self.sasl = SaslSession(access, mechanisms, peer, exchange, max_reauth_ms, logins, address)
        self.cache = cache
        self.peer = peer
        self.limits = limits or PrincipalLimits(0, 0)
        self._counted: str | None = None  # the principal whose connection slot this holds
        self._muted_until = 0.0

    def admits(self, key: int) -> bool:
        return self.sasl.admits(key)

    @property
    def authenticated(self) -> bool:
        return self.sasl.authenticated

    @property
    def failed(self) -> bool:
        """A SASL request was refused: the listener sends its answer, then closes."""
        return self.sasl.failed

    def versions(self, key: int) -> tuple[int, int] | None:
        """The endpoint's versions of an API, the SASL APIs included."""
        return SUPPORTED.get(key) or SASL_VERSIONS.get(key)

    def close(self) -> None:
        self.sasl.close()
        if self._counted is not None:
            self.limits.release(self._counted)
            self._counted = None

    async def dispatch(
        self, ctx: EndpointContext, key: int, version: int, header: Any, req: Any, handler: Handler | None
    ) -> Any:
        if key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            try:
                if key == SASL_HANDSHAKE_KEY:
                    return await self.sasl.handshake(req, version)
                resp = await self.sasl.authenticate(req, version)
            except CloseConnection:
                raise
            except Exception as e:
                # never a traceback here: the frames hold the client's token (a PLAIN password), and
                # a renderer that shows locals would print it
                log.error("kafka_sasl_failed", peer=self.peer, error_type=type(e).__name__)
                raise CloseConnection from None
            principal = self.sasl.principal
            if self.sasl.authenticated and principal is not None and self._counted is None:
                if not self.limits.acquire(principal):
                    log.warning(
                        "kafka_connection_refused",
                        peer=self.peer,
                        principal=principal,
                        reason="connections_per_principal",
                        limit=self.limits.max_connections,
                    )
                    raise CloseConnection
                self._counted = principal
            return resp
        assert handler is not None
        if key == 18:
            return await self._api_versions(ctx, req, version, header, handler)
        if key == 3:
            return await self._metadata(ctx, req, version, header, handler)
        if key == 1:
            return await self._fetch(ctx, req, version, header, handler)
        if key == 2:
            return await self._list_offsets(ctx, req, version, header, handler)
        if key in _GROUP_KEYS:
            return await self._group(ctx, key, req, version, header, handler)
        # FindCoordinator is answered for every group (a broker refuses it without DESCRIBE):
        # librdkafka then times out on the lookup, whereas the group APIs' refusal reaches the
        # application as GROUP_AUTHORIZATION_FAILED
        if key in (15, 16, 23, 69):  # Describe/ListGroups, OffsetForLeaderEpoch, ConsumerGroupDescribe
            return await self._describe(ctx, key, req, version, header, handler)
        return await handler(ctx, req, version, header)

    # ---- broker answers ------------------------------------------------------------------
    def _session(self) -> tuple[str, BrokerSession]:
        s = self.sasl
        if s.principal is None or s.session is None:
            raise CloseConnection
        return s.principal, s.session

    async def _ops(self, ctx: EndpointContext) -> dict[str, int]:
        if self.local is not None:
            principal = self.sasl.principal
            if principal is None:
                raise CloseConnection
            return self.local.topic_ops(principal, list((await ctx.topics()).by_name))
        principal, session = self._session()
        try:
            return await self.cache.topic_ops(principal, session)
        except (ConnectionError, TimeoutError, OSError) as e:
            log.warning("kafka_authz_broker_lost", peer=self.peer, principal=principal, error=str(e))
            raise CloseConnection from e

    def _denied(self, api: str, reason: str, **what: Any) -> None:
        """Log a denial once: a client retrying every second repeats the same request, and one line
        per (principal, API, resources) and minute says all there is."""
        if not self.cache.first_denial((self.sasl.principal, api, reason, repr(sorted(what.items())))):
            return
        log.warning(
            "kafka_request_denied",
            peer=self.peer,
            principal=self.sasl.principal,
            api=api,
            reason=reason,
            **what,
        )

    # ---- per API ---------------------------------------------------------------------------
    async def _api_versions(
        self, ctx: EndpointContext, req: Any, version: int, header: Any, handler: Handler
    ) -> Any:
        resp = await handler(ctx, req, version, header)
        av = nested(type(resp), "ApiVersion")
        extra = tuple(
            make(av, api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in SASL_VERSIONS.items()
        )
        keys = sorted((*resp.api_keys, *extra), key=lambda k: int(k.api_key))
        return dataclasses.replace(resp, api_keys=tuple(keys))

    async def _metadata(
        self, ctx: EndpointContext, req: Any, version: int, header: Any, handler: Handler
    ) -> Any:
        ops = await self._ops(ctx)
        resp = await handler(ctx, req, version, header)
        topic_cls = nested(type(resp), "MetadataResponseTopic")
        out, denied = [], []
        for t in resp.topics:
            if t.name is None or t.error_code != ErrorCode.none:
                out.append(t)
                continue
            bits = ops.get(str(t.name))
            if bits is None:  # no DESCRIBE: absent from a full listing, an error when named
                denied.append(str(t.name))
                if req.topics is not None:
                    out.append(error_response(
                        topic_cls, ErrorCode.topic_authorization_failed, name=t.name,
                        topic_id=uuid.UUID(int=0), topic_authorized_operations=-(2**31)))
                continue
            if has_field(topic_cls, "topic_authorized_operations") and req_wants_ops(req):
                t = dataclasses.replace(t, topic_authorized_operations=bits)
            out.append(t)
        if denied and req.topics is not None:
            self._denied("Metadata", "no DESCRIBE on topic", topics=sorted(denied))
        return dataclasses.replace(resp, topics=tuple(out))

    async def _fetch(
        self, ctx: EndpointContext, req: Any, version: int, header: Any, handler: Handler
    ) -> Any:
        """The handler decides per partition, a session's included, with this principal's cached
        READ decisions (:class:`FetchAccess`); a request naming only topics it may read and one
        naming none are the same to it."""
        ops = await self._ops(ctx)
        principal = self.sasl.principal
        if principal is None:
            raise CloseConnection
        wait = self._muted_until - time.monotonic()
        if wait > 0:  # KIP-219: the client was told to back off; one that did not waits here
            await asyncio.sleep(wait)
        access = FetchAccess(principal, lambda name: bool(ops.get(name, 0) & READ), self._fetch_denied)
        token = FETCH_ACCESS.set(access)
        try:
            return self._throttle(await handler(ctx, req, version, header))
        finally:
            FETCH_ACCESS.reset(token)

    def _fetch_denied(self, reason: str, topics: list[str]) -> None:
        self._denied("Fetch", reason, topics=topics)

    def _throttle(self, resp: Any) -> Any:
        """Charge the record bytes of a Fetch answer to the principal; over its rate the answer
        carries throttle_time_ms and this connection's next Fetch waits that long."""
        if not self.limits.rate or self.sasl.principal is None:
            return resp
        size = sum(len(p.records or b"") for t in resp.responses for p in t.partitions)
        delay = self.limits.charge(self.sasl.principal, size)
        if delay <= 0:
            return resp
        self._muted_until = time.monotonic() + delay
        return dataclasses.replace(resp, throttle_time=datetime.timedelta(seconds=delay))

    async def _list_offsets(
        self, ctx: EndpointContext, req: Any, version: int, header: Any, handler: Handler
    ) -> Any:
        return await self._per_topic(ctx, 2, req, version, header, handler, DESCRIBE,
                                     ("ListOffsetsTopicResponse", "ListOffsetsPartitionResponse"),
                                     timestamp=-1, offset=-1, leader_epoch=-1)

    async def _per_topic(
        self, ctx: EndpointContext, key: int, req: Any, version: int, header: Any, handler: Handler,
        need: int, structs: tuple[str, str], **partition_values: Any,
    ) -> Any:
        """Topics of ``req`` without ``need`` answered TOPIC_AUTHORIZATION_FAILED for each of their
        partitions, after the handler's answer to the others (ListOffsets, OffsetCommit: as a broker
        does; their data is never read)."""
        ops = await self._ops(ctx)
        refused = [t for t in req.topics if not ops.get(str(t.name), 0) & need]
        if not refused:
            return await handler(ctx, req, version, header)
        self._denied(_API[key], f"no {_OP[need]} on topic", topics=sorted(str(t.name) for t in refused))
        kept = tuple(t for t in req.topics if t not in refused)
        cls = response_class(key, version)
        resp = (
            await handler(ctx, dataclasses.replace(req, topics=kept), version, header)
            if kept
            else make(cls, throttle_time=_zero(), topics=())
        )
        extra = refused_topics(nested(cls, structs[0]), nested(cls, structs[1]), _partitions_of(refused),
                               ErrorCode.topic_authorization_failed, **partition_values)
        return dataclasses.replace(resp, topics=tuple(resp.topics) + extra)

    async def _group(
        self, ctx: EndpointContext, key: int, req: Any, version: int, header: Any, handler: Handler
    ) -> Any:
        # a broker asks DESCRIBE on the group for OffsetFetch, READ for the others
        need = DESCRIBE if key == 9 else READ
        if self.local is not None and self.sasl.principal is not None:
            local, who = self.local, self.sasl.principal
            verdicts = {g: local.group_read(who, g) for g in _group_ids(key, req, version)}
        else:
            principal, session = self._session()
            try:
                verdicts = {
                    g: bool(await self.cache.group_ops(principal, g, session) & need)
                    for g in _group_ids(key, req, version)
                }
            except (ConnectionError, TimeoutError, OSError) as e:
                log.warning("kafka_authz_broker_lost", peer=self.peer, principal=principal, error=str(e))
                raise CloseConnection from e
        if key == 68 and all(verdicts.values()):
            return await self._consumer_heartbeat(ctx, req, version, header, handler)
        return await self._group_verdicts(ctx, key, req, version, header, handler, verdicts)

    async def _consumer_heartbeat(
        self, ctx: EndpointContext, req: Any, version: int, header: Any, handler: Handler
    ) -> Any:
        """ConsumerGroupHeartbeat under the topics' ACLs, as Kafka's KafkaApis: subscribed names the
        principal may not DESCRIBE answer TOPIC_AUTHORIZATION_FAILED (before the group sees them),
        and the coordinator keeps of a regex's matches only what it may DESCRIBE
        (:data:`~fetcher.kafka.consumer_groups.VISIBLE_TOPICS`, for this request only)."""
        ops = await self._ops(ctx)
        visible = frozenset(name for name, bits in ops.items() if bits & DESCRIBE)
        denied = sorted({str(n) for n in req.subscribed_topic_names or ()} - visible)
        if denied:
            self._denied("ConsumerGroupHeartbeat", "no DESCRIBE on topic", topics=denied)
            return error_response(response_class(68, version), ErrorCode.topic_authorization_failed)
        token = VISIBLE_TOPICS.set(visible)
        try:
            return await handler(ctx, req, version, header)
        finally:
            VISIBLE_TOPICS.reset(token)

    async def _group_allowed(self, groups: list[str]) -> dict[str, bool]:
        principal = self.sasl.principal
        if principal is None:
            raise CloseConnection
        if self.local is not None:
            return {g: self.local.group_read(principal, g) for g in groups}
        _, session = self._session()
        try:
            return {g: await self.cache.group_read(principal, g, session) for g in groups}
        except (ConnectionError, TimeoutError, OSError) as e:
            log.warning("kafka_authz_broker_lost", peer=self.peer, principal=principal, error=str(e))
            raise CloseConnection from e

    async def _describe(
        self, ctx: EndpointContext, key: int, req: Any, version: int, header: Any, handler: Handler
    ) -> Any:
        """What a broker hides: DescribeGroups answers GROUP_AUTHORIZATION_FAILED for groups the
        principal may not use, ListGroups lists only the others, OffsetForLeaderEpoch answers
        TOPIC_AUTHORIZATION_FAILED for topics it may not DESCRIBE (nothing of theirs is sent)."""
        resp = await handler(ctx, req, version, header)
        if key == 69:  # ConsumerGroupDescribe: the same rule as DescribeGroups, and Kafka's topic rule
            ok = await self._group_allowed([str(g.group_id) for g in resp.groups])
            described = [g if ok[str(g.group_id)] else dataclasses.replace(
                g, error_code=ErrorCode.group_authorization_failed, error_message=None, group_state="",
                members=()) for g in resp.groups]
            if any(g.error_code == ErrorCode.none and g.members for g in described):
                ops = await self._ops(ctx)
                described = [self._described_topics_visible(g, ops) for g in described]
            return dataclasses.replace(resp, groups=tuple(described))
        if key == 15:
            ok = await self._group_allowed([str(g.group_id) for g in resp.groups])
            code = ErrorCode.group_authorization_failed
            groups = tuple(
                g
                if ok[str(g.group_id)]
                else dataclasses.replace(
                    g, error_code=code, group_state="", protocol_type="", protocol_data="", members=()
                )
                for g in resp.groups
            )
            return dataclasses.replace(resp, groups=groups)
        if key == 16:
            ok = await self._group_allowed([str(g.group_id) for g in resp.groups])
            return dataclasses.replace(resp, groups=tuple(g for g in resp.groups if ok[str(g.group_id)]))
        ops = await self._ops(ctx)
        topics = []
        for t in resp.topics:
            if ops.get(str(t.topic), 0) & DESCRIBE:
                topics.append(t)
                continue
            self._denied("OffsetForLeaderEpoch", "no DESCRIBE on topic", topics=[str(t.topic)])
            parts = tuple(
                dataclasses.replace(
                    p, error_code=ErrorCode.topic_authorization_failed, leader_epoch=-1, end_offset=-1
                )
                for p in t.partitions
            )
            topics.append(dataclasses.replace(t, partitions=parts))
        return dataclasses.replace(resp, topics=tuple(topics))

    def _described_topics_visible(self, g: Any, ops: dict[str, int]) -> Any:
        """A described KIP-848 group whose members subscribe to, hold or are to get a topic the
        principal may not DESCRIBE is refused whole, as Kafka does (TOPIC_AUTHORIZATION_FAILED):
        its members would name the topic."""
        if g.error_code != ErrorCode.none:
            return g
        names = {str(n) for m in g.members for n in m.subscribed_topic_names or ()}
        names |= {str(t.topic_name) for m in g.members for a in (m.assignment, m.target_assignment)
                  if a is not None for t in a.topic_partitions}
        hidden = sorted(n for n in names if not ops.get(n, 0) & DESCRIBE)
        if not hidden:
            return g
        self._denied("ConsumerGroupDescribe", "group uses topics without DESCRIBE", group=str(g.group_id),
                     topics=hidden)
        return dataclasses.replace(
            g, error_code=ErrorCode.topic_authorization_failed, group_state="", members=(),
            error_message="The described group uses topics that the client is not authorized to describe.")

    async def _commit_topics(
        self, ctx: EndpointContext, req: Any, version: int, header: Any, handler: Handler
    ) -> Any:
        return await self._per_topic(ctx, 8, req, version, header, handler, READ, _COMMIT_STRUCTS)

    async def _group_verdicts(
        self,
        ctx: EndpointContext,
        key: int,
        req: Any,
        version: int,
        header: Any,
        handler: Handler,
        verdicts: dict[str, bool],
    ) -> Any:
        if all(verdicts.values()):
            if key == 8:  # committing an offset also needs READ on each topic, as on a broker
                return await self._commit_topics(ctx, req, version, header, handler)
            if key == 9:
                return await OffsetFetchFilter(self, ctx).answer(req, version, header, handler)
            return await handler(ctx, req, version, header)
        denied = sorted(g for g, ok in verdicts.items() if not ok)
        self._denied(_API[key], f"no {'DESCRIBE' if key == 9 else 'READ'} on group", groups=denied)
        cls = response_class(key, version)
        code = ErrorCode.group_authorization_failed
        if key == 9 and version >= 8:  # batched: answer the allowed groups, refuse the others
            kept = tuple(g for g in req.groups if verdicts[str(g.group_id)])
            resp = (
                await OffsetFetchFilter(self, ctx).answer(
                    dataclasses.replace(req, groups=kept), version, header, handler
                )
                if kept
                else make(cls, throttle_time=_zero(), groups=())
            )
            g_cls = nested(cls, "OffsetFetchResponseGroup")
            extra = tuple(make(g_cls, group_id=g, topics=(), error_code=code) for g in denied)
            return dataclasses.replace(resp, groups=tuple(resp.groups) + extra)
        if key == 8:  # OffsetCommit reports per partition
            t_cls, p_cls = (nested(cls, name) for name in _COMMIT_STRUCTS)
            topics = refused_topics(t_cls, p_cls, _partitions_of(req.topics), code)
            return make(cls, throttle_time=_zero(), topics=topics)
        return error_response(cls, code)


class OffsetFetchFilter:
    """OffsetFetch under the topics' ACLs, as a broker's KafkaApis answers it: offsets of a topic
    the principal may not DESCRIBE are never sent. Topics named in the request answer
    TOPIC_AUTHORIZATION_FAILED (offset -1) for each partition, after the authorized ones; when all
    the group's offsets are asked (``topics`` null), such topics are left out."""

    def __init__(self, guard: ConnectionGuard, ctx: EndpointContext) -> None:
        self.guard = guard
        self.ctx = ctx

    async def answer(self, req: Any, version: int, header: Any, handler: Handler) -> Any:
        ops = await self.guard._ops(self.ctx)
        allowed: Callable[[Any], bool] = lambda name: bool(ops.get(str(name), 0) & DESCRIBE)  # noqa: E731
        cls = response_class(9, version)
        if version >= 8:
            groups = list(req.groups)
            refused = {
                str(g.group_id): [t for t in g.topics if not allowed(t.name)]
                for g in groups
                if g.topics is not None
            }
            kept = tuple(
                g
                if g.topics is None
                else dataclasses.replace(g, topics=tuple(t for t in g.topics if allowed(t.name)))
                for g in groups
            )
            resp = await handler(self.ctx, dataclasses.replace(req, groups=kept), version, header)
            t_cls, p_cls = (
                nested(cls, "OffsetFetchResponseTopics"),
                nested(cls, "OffsetFetchResponsePartitions"),
            )
            out = []
            for g in resp.groups:
                extra = refused.get(str(g.group_id), [])
                if g.error_code != ErrorCode.none:
                    out.append(g)
                    continue
                topics = tuple(t for t in g.topics if allowed(t.name)) + self._refused(extra, t_cls, p_cls)
                self._log(str(g.group_id), [t.name for t in g.topics if not allowed(t.name)], extra)
                out.append(dataclasses.replace(g, topics=topics))
            return dataclasses.replace(resp, groups=tuple(out))
        extra = [] if req.topics is None else [t for t in req.topics if not allowed(t.name)]
        if req.topics is not None:
            req = dataclasses.replace(req, topics=tuple(t for t in req.topics if allowed(t.name)))
        resp = await handler(self.ctx, req, version, header)
        if resp.error_code != ErrorCode.none:
            return resp
        t_cls, p_cls = nested(cls, "OffsetFetchResponseTopic"), nested(cls, "OffsetFetchResponsePartition")
        self._log(str(req.group_id), [t.name for t in resp.topics if not allowed(t.name)], extra)
        topics = tuple(t for t in resp.topics if allowed(t.name)) + self._refused(extra, t_cls, p_cls)
        return dataclasses.replace(resp, topics=topics)

    @staticmethod
    def _refused(topics: list[Any], t_cls: Any, p_cls: Any) -> tuple[Any, ...]:
        return refused_topics(t_cls, p_cls, ((t.name, t.partition_indexes) for t in topics),
                              ErrorCode.topic_authorization_failed, committed_offset=-1,
                              committed_leader_epoch=-1, metadata="")

    def _log(self, group: str, hidden: list[Any], named: list[Any]) -> None:
        names = sorted({str(n) for n in hidden} | {str(t.name) for t in named})
        if names:
            self.guard._denied("OffsetFetch", "no DESCRIBE on topic", group=group, topics=names)


def _group_ids(key: int, req: Any, version: int) -> list[str]:
    return [str(g.group_id) for g in req.groups] if key == 9 and version >= 8 else [str(req.group_id)]


_COMMIT_STRUCTS = ("OffsetCommitResponseTopic", "OffsetCommitResponsePartition")
_OP = {READ: "READ", DESCRIBE: "DESCRIBE"}
_API = {
    2: "ListOffsets",
    8: "OffsetCommit",
    9: "OffsetFetch",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    68: "ConsumerGroupHeartbeat",
}


def _partitions_of(topics: Iterable[Any]) -> list[tuple[Any, list[int]]]:
    """(name, partition indexes) of a request's topics (ListOffsets, OffsetCommit)."""
    return [(t.name, [p.partition_index for p in t.partitions]) for t in topics]


def req_wants_ops(req: Any) -> bool:
    return bool(getattr(req, "include_topic_authorized_operations", False))


def _zero() -> Any:
    import datetime

    return datetime.timedelta(0)
