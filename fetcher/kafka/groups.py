"""Classic consumer groups, one member each: enough for ``subscribe`` on a history reader.

Join makes the joiner the group's only member and leader and bumps the generation; the leader's
SyncGroup assignment is handed back to it. A second consumer joining a group whose member is
still alive (heartbeat within its session timeout) gets GROUP_MAX_SIZE_REACHED, as a broker with
``group.max.size=1`` would answer: multi-member rebalancing is not implemented. State lives in
memory (a restart forgets members, not offsets: those are in :mod:`fetcher.kafka.offset_store`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    metadata: bytes
    session_timeout_ms: int
    last_seen: float = field(default_factory=time.monotonic)

    def alive(self, now: float) -> bool:
        return now - self.last_seen < self.session_timeout_ms / 1000


@dataclass(slots=True)
class Group:
    group_id: str
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    member: Member | None = None
    assignment: bytes = b""
    synced: bool = False


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    member_id: str = ""
    metadata: bytes = b""


class GroupCoordinator:
    """In-memory single-member groups (called from the event loop only: no locking)."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}

    def _group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        return g

    def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        client_id: str,
    ) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id)
        if not protocols:
            return JoinResult(ErrorCode.inconsistent_group_protocol)
        g = self._group(group_id)
        now = time.monotonic()
        cur = g.member
        if (
            cur is not None
            and cur.member_id != member_id
            and cur.alive(now)
            and not (instance_id is not None and cur.instance_id == instance_id)
        ):
            return JoinResult(ErrorCode.group_max_size_reached)
        if member_id and (cur is None or cur.member_id != member_id) and instance_id is None:
            return JoinResult(ErrorCode.unknown_member_id)
        mid = member_id or f"{client_id or 'consumer'}-{uuid.uuid4()}"
        name, metadata = protocols[0]
        g.member = Member(mid, instance_id, metadata, session_timeout_ms, now)
        g.generation += 1
        g.protocol_type = protocol_type
        g.protocol_name = name
        g.assignment = b""
        g.synced = False
        return JoinResult(ErrorCode.none, g.generation, protocol_type, name, mid, metadata)

    def check(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        """Member and generation valid? (Heartbeat, SyncGroup, OffsetCommit within a group.)"""
        g = self.groups.get(group_id)
        if g is None or g.member is None or g.member.member_id != member_id:
            return ErrorCode.unknown_member_id
        if generation != g.generation:
            return ErrorCode.illegal_generation
        g.member.last_seen = time.monotonic()
        return ErrorCode.none

    def sync(
        self, group_id: str, member_id: str, generation: int, assignments: list[tuple[str, bytes]]
    ) -> tuple[ErrorCode, Group | None]:
        err = self.check(group_id, member_id, generation)
        if err is not ErrorCode.none:
            return err, None
        g = self.groups[group_id]
        for mid, data in assignments:
            if mid == member_id:
                g.assignment = data
        g.synced = True
        return ErrorCode.none, g

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        return self.check(group_id, member_id, generation)

    def leave(self, group_id: str, member_id: str) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None or g.member is None or g.member.member_id != member_id:
            return ErrorCode.unknown_member_id
        g.member = None
        g.synced = False
        return ErrorCode.none

    def commit_allowed(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        """Simple (generation -1, no member) commits are accepted; group commits are checked."""
        if generation < 0 and not member_id:
            return ErrorCode.none
        return self.check(group_id, member_id, generation)
