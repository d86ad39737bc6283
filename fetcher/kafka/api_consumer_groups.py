"""ConsumerGroupHeartbeat (KIP-848, ``group.protocol=consumer``) over
:class:`~fetcher.kafka.consumer_groups.ConsumerGroupCoordinator`.

The assignment names topics by id, so the tiered topics' ids (the real Kafka topic ids, from the
remote metadata) come from the catalog. A group another endpoint process coordinates answers
NOT_COORDINATOR; a live classic group of the same id answers GROUP_ID_NOT_FOUND (no mixed groups).

A member's regex is resolved here, on the executor, once per (regex, catalog version): the
heartbeat itself then only reads the cached names, so neither a slow pattern nor a large catalog
holds the event loop that serves every other connection.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import make, nested, response_class
from fetcher.kafka.consumer_groups import (
    VISIBLE_TOPICS,
    HeartbeatRequest,
    HeartbeatResult,
    owned_from_request,
)
from fetcher.kafka.context import EndpointContext
from fetcher.kafka.groups import CLIENT_HOST


async def handle_consumer_group_heartbeat(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(68, version)
    if not ctx.owns_group(req.group_id):
        r = HeartbeatResult(ErrorCode.not_coordinator, None, req.member_id or None)
    elif _live_classic(ctx, req.group_id):
        r = HeartbeatResult(ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group.",
                            req.member_id or None)
    else:
        ctx.groups.ensure_ticker()
        catalog = await ctx.topics()
        topics = {name: (e.topic_id, len(e.partitions)) for name, e in catalog.by_name.items()}
        at = catalog.version
        asked = getattr(req, "subscribed_topic_regex", None)
        regex = asked if asked is not None else ctx.consumer_groups.regex_of(req.group_id, req.member_id)
        resolver = ctx.consumer_groups.regexes
        if regex and resolver.cached(regex, at) is None:
            names = tuple(topics)
            await ctx.call(lambda: resolver.resolve(regex, names, at))
        timeout = req.rebalance_timeout
        r = ctx.consumer_groups.heartbeat(HeartbeatRequest(
            group_id=req.group_id, member_id=req.member_id, member_epoch=int(req.member_epoch),
            instance_id=req.instance_id, rack_id=req.rack_id,
            rebalance_timeout_ms=int(timeout.total_seconds() * 1000) if timeout is not None else -1,
            subscribed=tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None,
            regex=asked, assignor=req.server_assignor,
            owned=owned_from_request(req.topic_partitions), client_id=header.client_id or "",
            client_host=CLIENT_HOST.get(), version=version), topics, version=at,
            visible=VISIBLE_TOPICS.get())
    acls = nested(cls, "Assignment")
    tcls = nested(cls, "TopicPartitions")
    assignment = None
    if r.assignment is not None:
        assignment = make(acls, topic_partitions=tuple(
            make(tcls, topic_id=tid, partitions=tuple(sorted(ps)))
            for tid, ps in sorted(r.assignment.items())))
    ok = r.error is ErrorCode.none
    return make(cls, throttle_time=ZERO, error_code=r.error, error_message=r.message,
                member_id=r.member_id, member_epoch=r.member_epoch,
                heartbeat_interval=datetime.timedelta(
                    milliseconds=ctx.settings.consumer_heartbeat_interval_ms if ok else 0),
                assignment=assignment)


def _live_classic(ctx: EndpointContext, group_id: str) -> bool:
    g = ctx.groups.describe(group_id)
    return g is not None and bool(g.members)


async def handle_consumer_group_describe(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    """Each KIP-848 group with its members, their assignments and targets; an unknown or classic
    group answers GROUP_ID_NOT_FOUND, which makes Kafka's admin client describe it the classic way."""
    cls = response_class(69, version)
    gcls, mcls = nested(cls, "DescribedGroup"), nested(cls, "Member")
    acls, tcls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")
    catalog = await ctx.topics()

    def assignment(a: dict[Any, frozenset[int]]) -> Any:
        return make(acls, topic_partitions=tuple(
            make(tcls, topic_id=tid, topic_name=catalog.by_id[tid].name if tid in catalog.by_id else "",
                 partitions=tuple(sorted(ps)))
            for tid, ps in sorted(a.items())))

    out = []
    for group_id in req.group_ids:
        g = ctx.consumer_groups.describe(group_id) if ctx.owns_group(group_id) else None
        if g is None:
            code = ErrorCode.group_id_not_found if ctx.owns_group(group_id) else ErrorCode.not_coordinator
            out.append(make(gcls, error_code=code, error_message=f"Group {group_id} is not a consumer group.",
                            group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1,
                            assignor_name="", members=()))
            continue
        members = tuple(
            make(mcls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                 member_epoch=m.epoch, client_id=m.client_id, client_host=m.client_host,
                 subscribed_topic_names=m.subscribed, subscribed_topic_regex=m.regex or None,
                 assignment=assignment(m.assigned),
                 target_assignment=assignment(g.target.get(m.member_id, {})),
                 member_type=1)
            for m in g.members.values())
        out.append(make(gcls, error_code=ErrorCode.none, group_id=group_id, group_state=g.state,
                        group_epoch=g.epoch, assignment_epoch=g.assignment_epoch,
                        assignor_name=ctx.consumer_groups.assignor_of(g), members=members))
    return make(cls, throttle_time=ZERO, groups=tuple(out))
