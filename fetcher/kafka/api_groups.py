"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and ListGroups over
:class:`~fetcher.kafka.groups.GroupCoordinator` (classic protocol, many members).

A request for a group another endpoint process coordinates (``read.kafka_peers``) answers
NOT_COORDINATOR, as a broker that does not own the group's offsets partition does: the client asks
FindCoordinator again.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import make, nested, response_class
from fetcher.kafka.context import EndpointContext
from fetcher.kafka.groups import GroupState, JoinResult, SyncResult

_NO_AUTH_OPS = -(2**31)


def _ms(value: Any, default: int) -> int:
    return int(value.total_seconds() * 1000) if value is not None else default


async def handle_join_group(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(11, version)
    if not ctx.owns_group(req.group_id):
        r = JoinResult(ErrorCode.not_coordinator, member_id=req.member_id)
    elif ctx.consumer_groups.is_consumer_group(req.group_id):  # no mixed classic/KIP-848 groups
        r = JoinResult(ErrorCode.inconsistent_group_protocol, member_id=req.member_id)
    else:
        session_ms = _ms(req.session_timeout, 10_000)
        r = await ctx.groups.join(
            req.group_id, req.member_id, getattr(req, "group_instance_id", None), req.protocol_type,
            [(p.name, bytes(p.metadata)) for p in req.protocols], session_ms,
            _ms(getattr(req, "rebalance_timeout", None), session_ms), header.client_id or "",
            require_known_id=version >= 4)
    mcls = nested(cls, "JoinGroupResponseMember")
    ok = r.error is ErrorCode.none
    return make(
        cls,
        throttle_time=ZERO,
        error_code=r.error,
        generation_id=r.generation if ok else -1,
        protocol_type=r.protocol_type if ok else None,
        protocol_name=r.protocol_name if ok else (None if version >= 7 else ""),
        leader=r.leader if ok else "",
        skip_assignment=False,
        member_id=r.member_id,
        members=tuple(make(mcls, member_id=mid, group_instance_id=iid, metadata=md)
                      for mid, iid, md in r.members),
    )


async def handle_sync_group(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(14, version)
    if not ctx.owns_group(req.group_id):
        r = SyncResult(ErrorCode.not_coordinator)
    else:
        r = await ctx.groups.sync(req.group_id, req.member_id, getattr(req, "group_instance_id", None),
                                  int(req.generation_id),
                                  [(a.member_id, bytes(a.assignment)) for a in req.assignments])
    return make(cls, throttle_time=ZERO, error_code=r.error, protocol_type=r.protocol_type,
                protocol_name=r.protocol_name, assignment=r.assignment)


async def handle_heartbeat(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(12, version)
    code = (ctx.groups.heartbeat(req.group_id, req.member_id, getattr(req, "group_instance_id", None),
                                 int(req.generation_id))
            if ctx.owns_group(req.group_id) else ErrorCode.not_coordinator)
    return make(cls, throttle_time=ZERO, error_code=code)


async def handle_leave_group(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(13, version)
    owned = ctx.owns_group(req.group_id)
    if version < 3:
        code = ctx.groups.leave(req.group_id, req.member_id) if owned else ErrorCode.not_coordinator
        return make(cls, throttle_time=ZERO, error_code=code)
    if not owned:
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.not_coordinator, members=())
    mcls = nested(cls, "MemberResponse")
    members = tuple(
        make(mcls, member_id=m.member_id, group_instance_id=m.group_instance_id,
             error_code=ctx.groups.leave(req.group_id, m.member_id, m.group_instance_id))
        for m in req.members
    )
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, members=members)


async def handle_describe_groups(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    """What ``kafka-consumer-groups --describe`` shows: state, protocol, members and assignments."""
    cls = response_class(15, version)
    gcls, mcls = nested(cls, "DescribedGroup"), nested(cls, "DescribedGroupMember")
    out = []
    for group_id in req.groups:
        if not ctx.owns_group(group_id):
            out.append(make(gcls, error_code=ErrorCode.not_coordinator, group_id=group_id, group_state="",
                            protocol_type="", protocol_data="", members=(),
                            authorized_operations=_NO_AUTH_OPS))
            continue
        g = ctx.groups.describe(group_id)
        if g is None:  # Kafka: an unknown group is described as Dead, with no error
            out.append(make(gcls, error_code=ErrorCode.none, group_id=group_id,
                            group_state=GroupState.DEAD.value, protocol_type="", protocol_data="",
                            members=(), authorized_operations=_NO_AUTH_OPS))
            continue
        stable = g.state is GroupState.STABLE
        members = tuple(
            make(mcls, member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                 client_host=m.client_host,
                 member_metadata=m.metadata_for(g.protocol_name) if stable else b"",
                 member_assignment=m.assignment if stable else b"")
            for m in g.members.values()
        )
        out.append(make(gcls, error_code=ErrorCode.none, group_id=group_id, group_state=g.state.value,
                        protocol_type=g.protocol_type or "", protocol_data=g.protocol_name or "",
                        members=members, authorized_operations=_NO_AUTH_OPS))
    return make(cls, throttle_time=ZERO, groups=tuple(out))


async def handle_list_groups(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(16, version)
    lcls = nested(cls, "ListedGroup")
    wanted_states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
    wanted_types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
    groups = []
    for g in ctx.groups.listing():
        if not ctx.owns_group(g.group_id):
            continue
        if wanted_states and g.state.value.lower() not in wanted_states:
            continue
        if wanted_types and "classic" not in wanted_types:
            continue
        groups.append(make(lcls, group_id=g.group_id, protocol_type=g.protocol_type or "",
                           group_state=g.state.value, group_type="classic"))
    for cg in ctx.consumer_groups.groups.values():  # KIP-848 groups: type "consumer"
        if not ctx.owns_group(cg.group_id) or (wanted_types and "consumer" not in wanted_types):
            continue
        if wanted_states and cg.state.lower() not in wanted_states:
            continue
        groups.append(make(lcls, group_id=cg.group_id, protocol_type="consumer", group_state=cg.state,
                           group_type="consumer"))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, groups=tuple(groups))
