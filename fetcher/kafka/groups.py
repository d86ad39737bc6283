"""Classic consumer groups with many members, as a broker's group coordinator runs them.

The state machine is Kafka's (``GroupCoordinator``/``GroupMetadata``): *Empty* → a JoinGroup
starts *PreparingRebalance*; the join phase ends when every known member has rejoined (or the
rebalance timeout passed: members that did not rejoin are removed), the generation is bumped, the
protocol every member supports is chosen by vote, and each JoinGroup is answered — the leader
gets all members' metadata; → *CompletingRebalance* until the leader's SyncGroup brings the
assignment (computed by the client-side assignor, passed through untouched: range, roundrobin,
cooperative-sticky) → *Stable*. A member that joins, leaves (LeaveGroup) or stops heartbeating
within ``session.timeout.ms`` starts a new rebalance; members learn of it from Heartbeat's
REBALANCE_IN_PROGRESS. Requests of a stale generation get ILLEGAL_GENERATION, unknown members
UNKNOWN_MEMBER_ID, a replaced static member (``group.instance.id``) FENCED_INSTANCE_ID.
JoinGroup v4+ without a member id is answered MEMBER_ID_REQUIRED with a new id (KIP-394), so a
client retrying a timed-out join does not leave a ghost member behind. A new group waits
``initial_delay_ms`` (Kafka's ``group.initial.rebalance.delay.ms``) for more members before its
first rebalance completes.

Bounds (a client may send any number of JoinGroups): members and pending member ids together
are at most ``max_size`` per group (Kafka's ``group.max.size``; GROUP_MAX_SIZE_REACHED past it);
a pending id (answered MEMBER_ID_REQUIRED, not yet used) expires after the session timeout the
JoinGroup asked for, as Kafka's pending-member expiration; an *Empty* group with no pending ids
and no committed offsets is removed on the next tick (Kafka deletes an empty group once its
offsets are gone). The wall-clock time a group became empty is kept: offsets' retention counts
from it.

State lives in memory, on the event loop (no locking); committed offsets are kept by
:mod:`fetcher.kafka.offset_store`. Several endpoint processes split groups between them by hash
(:func:`coordinator_index`), so each group has exactly one coordinator.
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
import zlib
from collections.abc import Callable, Coroutine, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

log = structlog.get_logger(__name__)

#: the client address of the request being handled (set per connection by the server)
CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="")

_TICK_S = 0.1
#: members (and pending member ids) of one group, classic or KIP-848, unless configured
#: (``read.kafka_group_max_size``; Kafka's classic default is unbounded: a bound keeps a flood finite)
GROUP_MAX_SIZE = 1000


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    member_id: str = ""
    leader: str = ""
    #: the leader's answer: (member id, group instance id, metadata of the chosen protocol)
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_seen: float = field(default_factory=time.monotonic)
    assignment: bytes = b""
    joining: asyncio.Future[JoinResult] | None = None
    syncing: asyncio.Future[SyncResult] | None = None

    def expired(self, now: float) -> bool:
        return self.joining is None and now - self.last_seen >= self.session_timeout_ms / 1000

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending: dict[str, float] = field(default_factory=dict)  # MEMBER_ID_REQUIRED ids -> expiry (monotonic)
    join_deadline: float = 0.0
    new_group: bool = True  # the initial rebalance delay applies
    #: wall-clock time (s) the group last became empty; offsets' retention counts from it
    empty_since: float | None = None

    def supports(self, protocol_type: str, protocols: Sequence[tuple[str, bytes]]) -> bool:
        if not self.members:
            return True
        names = {n for n, _ in protocols}
        return all(protocol_type == m.protocol_type and names & {n for n, _ in m.protocols}
                   for m in self.members.values())


def coordinator_index(group_id: str, replicas: int) -> int:
    """Which of ``replicas`` endpoint processes coordinates ``group_id``: the same answer in every
    process (CRC-32 of the name, as stable as Kafka's hash of the group id to an offsets partition)."""
    return zlib.crc32(group_id.encode()) % max(1, replicas)


class GroupCoordinator:
    """Every classic group of one endpoint process (event loop only)."""

    def __init__(self, initial_delay_ms: int = 3000,
                 also_tick: Callable[[float], None] | None = None, *, max_size: int = GROUP_MAX_SIZE,
                 has_offsets: Callable[[str], bool] | None = None,
                 housekeeping: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        self.groups: dict[str, Group] = {}
        self.initial_delay_s = initial_delay_ms / 1000
        self.max_size = max_size
        self._ticker: asyncio.Task[None] | None = None
        #: another coordinator's expiry (the KIP-848 groups) run by the same ticker
        self._also_tick = also_tick
        self._has_offsets = has_offsets or (lambda _group: False)
        #: slower work (offset expiry, on an executor) started by the ticker, one run at a time
        self._housekeeping = housekeeping
        self._housework: asyncio.Task[None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    def ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(_TICK_S)
            now = time.monotonic()
            self.tick(now)
            if self._also_tick is not None:
                self._also_tick(now)
            if self._housekeeping is not None and (self._housework is None or self._housework.done()):
                self._housework = asyncio.get_running_loop().create_task(self._housekeeping())

    def close(self) -> None:
        for task in (self._ticker, self._housework):
            if task is not None:
                task.cancel()
        for g in self.groups.values():
            for m in g.members.values():
                for fut in (m.joining, m.syncing):
                    if fut is not None and not fut.done():
                        fut.cancel()

    def tick(self, now: float) -> None:
        """Expire silent members and pending member ids, end join phases whose time is up, and
        remove empty groups that have nothing left (no pending id, no committed offset)."""
        for g in list(self.groups.values()):
            g.pending = {mid: until for mid, until in g.pending.items() if now < until}
            gone = [m for m in g.members.values() if m.expired(now)]
            for m in gone:
                log.info("kafka_group_member_expired", group=g.group_id, member=m.member_id,
                         session_timeout_ms=m.session_timeout_ms)
                self._remove(g, m.member_id)
            if gone and g.state is not GroupState.PREPARING_REBALANCE:
                self._prepare_rebalance(g, now)
            if g.state is GroupState.PREPARING_REBALANCE and (
                    now >= g.join_deadline or self._all_joined(g, now)):
                self._complete_join(g)
            if (g.state is GroupState.EMPTY and not g.members and not g.pending
                    and not self._has_offsets(g.group_id)):
                del self.groups[g.group_id]
                log.info("kafka_group_removed", group=g.group_id, reason="empty, no offsets")

    def live_since(self, group_id: str) -> float | None:
        return live_since(self.groups.get(group_id))

    # ---- JoinGroup -------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, instance_id: str | None, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   client_id: str, *, require_known_id: bool = False) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id)
        if not protocols or not protocol_type:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        if not 1000 <= session_timeout_ms <= 30 * 60 * 1000:  # group.min/max.session.timeout.ms
            return JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id)
        self.ensure_ticker()
        now = time.monotonic()
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        if not g.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        if instance_id is not None:
            current = g.static.get(instance_id)
            if current is not None and member_id and member_id != current:
                return JoinResult(ErrorCode.fenced_instance_id, member_id=member_id)
            if current is not None and not member_id:  # a restarted static member takes its place
                old = g.members.pop(current, None)
                member_id = f"{instance_id}-{uuid.uuid4()}"
                if old is not None:
                    _cancel(old)
                    old.member_id = member_id
                    g.members[member_id] = old
                    if g.leader == current:
                        g.leader = member_id
                g.static[instance_id] = member_id
        m = g.members.get(member_id) if member_id else None
        if m is None:
            if member_id and member_id not in g.pending:
                return JoinResult(ErrorCode.unknown_member_id, member_id=member_id)
            # a pending id already holds its place; any other newcomer needs a free one
            if len(g.members) + len(g.pending) - (member_id in g.pending) >= self.max_size:
                log.info("kafka_group_full", group=g.group_id, members=len(g.members),
                         pending=len(g.pending), max_size=self.max_size)
                return JoinResult(ErrorCode.group_max_size_reached, member_id=member_id)
            if not member_id and require_known_id and instance_id is None:
                new_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
                g.pending[new_id] = now + session_timeout_ms / 1000
                return JoinResult(ErrorCode.member_id_required, member_id=new_id)
            member_id = member_id or f"{client_id or 'consumer'}-{uuid.uuid4()}"
            g.pending.pop(member_id, None)
            m = Member(member_id, instance_id, client_id, CLIENT_HOST.get(), protocol_type, protocols,
                       session_timeout_ms, rebalance_timeout_ms, now)
            g.members[member_id] = m
            g.empty_since = None
            if instance_id is not None:
                g.static[instance_id] = member_id
            changed = True
        else:
            changed = m.protocols != protocols
            m.protocols, m.session_timeout_ms = protocols, session_timeout_ms
            m.rebalance_timeout_ms, m.last_seen = rebalance_timeout_ms, now
        if not changed and (g.state is GroupState.COMPLETING_REBALANCE
                            or (g.state is GroupState.STABLE and m.member_id != g.leader)):
            # Kafka: a member rejoining with what it had gets the current generation, no
            # rebalance (in Stable only a follower: a leader's rejoin asks for one)
            return self._join_answer(g, m)
        _cancel(m, joining=True)
        waiting: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        m.joining = waiting
        if g.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g, now)
        if self._all_joined(g, now):
            self._complete_join(g)
        return await waiting

    def _all_joined(self, g: Group, now: float) -> bool:
        if g.new_group and now < g.join_deadline:
            return False  # the initial delay: more members may be on their way
        return bool(g.members) and all(m.joining is not None for m in g.members.values())

    def _prepare_rebalance(self, g: Group, now: float) -> None:
        for m in g.members.values():  # those waiting for an assignment must rejoin
            if m.syncing is not None and not m.syncing.done():
                m.syncing.set_result(SyncResult(ErrorCode.rebalance_in_progress))
            m.syncing = None
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000
        if g.new_group or g.state is GroupState.EMPTY:
            g.new_group = True
            timeout = max(self.initial_delay_s, 0.0)
        g.join_deadline = now + timeout
        g.state = GroupState.PREPARING_REBALANCE
        log.info("kafka_group_rebalance", group=g.group_id, members=len(g.members), generation=g.generation)

    def _complete_join(self, g: Group) -> None:
        g.new_group = False
        for m in [m for m in g.members.values() if m.joining is None]:
            log.info("kafka_group_member_removed", group=g.group_id, member=m.member_id,
                     why="did not rejoin within the rebalance timeout")
            self._remove(g, m.member_id)
        g.generation += 1
        if not g.members:
            g.state, g.protocol_type, g.protocol_name, g.leader = GroupState.EMPTY, None, None, None
            g.empty_since = time.time()
            return
        g.protocol_type = next(iter(g.members.values())).protocol_type
        g.protocol_name = self._vote(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = GroupState.COMPLETING_REBALANCE
        for m in g.members.values():
            m.assignment = b""
            m.last_seen = time.monotonic()
            fut, m.joining = m.joining, None
            if fut is not None and not fut.done():
                fut.set_result(self._join_answer(g, m))

    @staticmethod
    def _vote(g: Group) -> str | None:
        """Kafka's protocol selection: among protocols every member supports, each member votes
        for the first of its own list it can; the most votes win (ties: the first member's order)."""
        common = set.intersection(*({n for n, _ in m.protocols} for m in g.members.values()))
        votes: dict[str, int] = {}
        for m in g.members.values():
            choice = next((n for n, _ in m.protocols if n in common), None)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        order = [n for n, _ in next(iter(g.members.values())).protocols]
        return max(votes, key=lambda n: (votes[n], -order.index(n) if n in order else 0), default=None)

    def _join_answer(self, g: Group, m: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if m.member_id == g.leader:
            members = tuple((x.member_id, x.instance_id, x.metadata_for(g.protocol_name))
                            for x in g.members.values())
        return JoinResult(ErrorCode.none, g.generation, g.protocol_type, g.protocol_name, m.member_id,
                          g.leader or "", members)

    def _remove(self, g: Group, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        _cancel(m)
        if m.instance_id is not None and g.static.get(m.instance_id) == member_id:
            del g.static[m.instance_id]
        if g.leader == member_id:
            g.leader = next(iter(g.members), None)

    # ---- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------
    def _member(self, group_id: str, member_id: str, instance_id: str | None,
                generation: int) -> tuple[ErrorCode, Group | None, Member | None]:
        g = self.groups.get(group_id)
        if instance_id is not None and g is not None:
            current = g.static.get(instance_id)
            if current is not None and current != member_id:
                return ErrorCode.fenced_instance_id, g, None
        m = g.members.get(member_id) if g is not None else None
        if g is None or m is None:
            return ErrorCode.unknown_member_id, g, None
        if generation != g.generation:
            return ErrorCode.illegal_generation, g, m
        return ErrorCode.none, g, m

    async def sync(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                   assignments: list[tuple[str, bytes]]) -> SyncResult:
        err, g, m = self._member(group_id, member_id, instance_id, generation)
        if err is not ErrorCode.none or g is None or m is None:
            return SyncResult(err)
        m.last_seen = time.monotonic()
        if g.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        if g.state is GroupState.STABLE:
            return SyncResult(ErrorCode.none, g.protocol_type, g.protocol_name, m.assignment)
        if member_id == g.leader:  # CompletingRebalance: the leader brings everyone's assignment
            given = dict(assignments)
            for x in g.members.values():
                x.assignment = given.get(x.member_id, b"")
                if x.syncing is not None and not x.syncing.done():
                    x.syncing.set_result(SyncResult(ErrorCode.none, g.protocol_type, g.protocol_name,
                                                    x.assignment))
                x.syncing = None
            g.state = GroupState.STABLE
            log.info("kafka_group_stable", group=g.group_id, generation=g.generation, members=len(g.members))
            return SyncResult(ErrorCode.none, g.protocol_type, g.protocol_name, m.assignment)
        if m.syncing is None or m.syncing.done():
            m.syncing = asyncio.get_running_loop().create_future()
        return await m.syncing

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        err, g, m = self._member(group_id, member_id, instance_id, generation)
        if m is not None:
            m.last_seen = time.monotonic()
        if err is not ErrorCode.none or g is None:
            return err
        if g.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, member_id: str, instance_id: str | None = None) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if instance_id is not None:
            current = g.static.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != current:
                return ErrorCode.fenced_instance_id
            member_id = current
        if member_id not in g.members:
            return ErrorCode.unknown_member_id
        self._remove(g, member_id)
        log.info("kafka_group_member_left", group=group_id, member=member_id)
        if g.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g, time.monotonic())
        if self._all_joined(g, time.monotonic()) or not g.members:
            self._complete_join(g)
        return ErrorCode.none

    def commit_allowed(self, group_id: str, member_id: str, generation: int,
                       instance_id: str | None = None) -> ErrorCode:
        """Simple commits (generation -1, no member: ``assign`` users) are accepted; a group
        member's must carry the current generation, and not while the assignment is being
        handed out (Kafka: REBALANCE_IN_PROGRESS in CompletingRebalance)."""
        if generation < 0 and not member_id:
            g = self.groups.get(group_id)
            if g is not None and g.members:
                return ErrorCode.unknown_member_id  # a live group's offsets are its members'
            return ErrorCode.none
        err, g, m = self._member(group_id, member_id, instance_id, generation)
        if err is not ErrorCode.none or g is None:
            return err
        if m is not None:
            m.last_seen = time.monotonic()
        if g.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ---- DescribeGroups, ListGroups --------------------------------------------------------
    def describe(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def listing(self) -> list[Group]:
        return [g for g in self.groups.values() if g.members or g.generation > 0]


def _cancel(m: Member, *, joining: bool = False) -> None:
    """Answer a member's pending JoinGroup (and, unless ``joining``, SyncGroup) that will never
    complete as asked: the member was replaced or removed, or sent its JoinGroup again."""
    if m.joining is not None and not m.joining.done():
        m.joining.set_result(JoinResult(ErrorCode.unknown_member_id, member_id=m.member_id))
    m.joining = None
    if not joining:
        if m.syncing is not None and not m.syncing.done():
            m.syncing.set_result(SyncResult(ErrorCode.unknown_member_id))
        m.syncing = None


class Membership(Protocol):
    """What offset retention asks of a group, classic or KIP-848."""

    members: Any
    empty_since: float | None


def live_since(group: Membership | None) -> float | None:
    """For offset retention: +inf while the group has members, the wall-clock time it became
    empty, or None when there is no such group (a standalone consumer's commits)."""
    if group is None:
        return None
    return float("inf") if group.members else group.empty_since
