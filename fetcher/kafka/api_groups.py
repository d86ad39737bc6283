"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup over :class:`~fetcher.kafka.groups.GroupCoordinator`."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import make, nested, response_class


async def handle_join_group(ctx: Any, req: Any, version: int, header: Any) -> Any:
    cls = response_class(11, version)
    mcls = nested(cls, "JoinGroupResponseMember")
    protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
    timeout_ms = int(req.session_timeout.total_seconds() * 1000)
    r = ctx.groups.join(
        req.group_id,
        req.member_id,
        getattr(req, "group_instance_id", None),
        req.protocol_type,
        protocols,
        timeout_ms,
        header.client_id or "",
    )
    if r.error is not ErrorCode.none:
        return make(
            cls,
            throttle_time=ZERO,
            error_code=r.error,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if version >= 7 else "",
            leader="",
            skip_assignment=False,
            member_id=req.member_id,
            members=(),
        )
    members = (
        make(
            mcls,
            member_id=r.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            metadata=r.metadata,
        ),
    )
    return make(
        cls,
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        generation_id=r.generation,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        leader=r.member_id,
        skip_assignment=False,
        member_id=r.member_id,
        members=members,
    )


async def handle_sync_group(ctx: Any, req: Any, version: int, header: Any) -> Any:
    cls = response_class(14, version)
    assignments = [(a.member_id, bytes(a.assignment)) for a in req.assignments]
    code, g = ctx.groups.sync(req.group_id, req.member_id, int(req.generation_id), assignments)
    return make(
        cls,
        throttle_time=ZERO,
        error_code=code,
        protocol_type=g.protocol_type if g else None,
        protocol_name=g.protocol_name if g else None,
        assignment=g.assignment if g else b"",
    )


async def handle_heartbeat(ctx: Any, req: Any, version: int, header: Any) -> Any:
    cls = response_class(12, version)
    code = ctx.groups.heartbeat(req.group_id, req.member_id, int(req.generation_id))
    return make(cls, throttle_time=ZERO, error_code=code)


async def handle_leave_group(ctx: Any, req: Any, version: int, header: Any) -> Any:
    cls = response_class(13, version)
    if version < 3:
        return make(cls, throttle_time=ZERO, error_code=ctx.groups.leave(req.group_id, req.member_id))
    mcls = nested(cls, "MemberResponse")
    members = tuple(
        make(
            mcls,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            error_code=ctx.groups.leave(req.group_id, m.member_id),
        )
        for m in req.members
    )
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, members=members)
