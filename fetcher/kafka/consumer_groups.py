"""KIP-848 consumer groups (``group.protocol=consumer``): the coordinator's side of
ConsumerGroupHeartbeat, as Kafka's GroupMetadataManager runs it.

Three steps on every heartbeat (Kafka's order):

1. **Member**: created on a join (member epoch 0), updated from the request's non-null fields. A
   new member, a left one, a changed subscription, or a subscribed topic whose partition count
   changed bumps the **group epoch**.
2. **Target assignment**: when the group epoch is ahead of the assignment epoch, the server-side
   assignor (:mod:`fetcher.kafka.assignors`, ``uniform`` by default, or the member's
   ``group.remote.assignor``) computes a new target for every member.
3. **Reconciliation** (Kafka's CurrentAssignmentBuilder): a member first gives up what it must
   (it keeps ``assigned ∩ target``, stays at its epoch in *UNREVOKED_PARTITIONS* until its
   heartbeat no longer reports those partitions as owned), then moves to the target epoch and
   receives its new partitions — except those another member still holds (*UNRELEASED_PARTITIONS*;
   they come on a later heartbeat once released). So a partition is never owned by two members.

Fencing: a heartbeat with an epoch ahead of the member's, or behind it (other than the previous
epoch with owned partitions within the current assignment: a lost response), gets
FENCED_MEMBER_EPOCH; an unknown member UNKNOWN_MEMBER_ID. A member silent for the session timeout,
or one that does not revoke within its rebalance timeout, is removed. OffsetCommit/OffsetFetch of
a member must carry its current epoch (STALE_MEMBER_EPOCH otherwise).

A group is either classic or consumer: a classic JoinGroup to a live consumer group, or a
heartbeat to a live classic group, is refused (Kafka's ``group.consumer.migration.policy=disabled``
behaviour; mixed groups are not supported). State lives in memory on the event loop.

Bounds: at most ``max_size`` members per group (Kafka's ``group.consumer.max.size``); a group
with no members and no committed offsets is removed on the next tick (Kafka deletes an empty
group once its offsets are gone), and the wall-clock time a group became empty is kept for
offset retention. Regex subscriptions are RE2 (:mod:`fetcher.kafka.topic_regex`), resolved by the
handler on an executor before the heartbeat runs; each member keeps only the matches its
principal may DESCRIBE (:data:`VISIBLE_TOPICS`), so neither its assignment nor a describe of the
group names a topic it may not see.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from fetcher.kafka.assignors import ASSIGNORS, Assignment, assign
from fetcher.kafka.groups import GROUP_MAX_SIZE, live_since
from fetcher.kafka.topic_regex import InvalidRegex, RegexResolver

log = structlog.get_logger(__name__)

#: the topic names the principal of the request being handled may DESCRIBE (set per request by the
#: authorization layer); None: no authorization, every topic is visible
VISIBLE_TOPICS: ContextVar[frozenset[str] | None] = ContextVar("visible_topics", default=None)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed: tuple[str, ...] = ()
    regex: str = ""
    #: the topics its regex matched at its last heartbeat that its principal may DESCRIBE
    regex_topics: frozenset[str] = frozenset()
    rack_id: str | None = None
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)
    revoke_deadline: float | None = None


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)
    #: the subscribed topics' (id, partition count) the target was computed from
    topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    #: wall-clock time (s) the last member left; offsets' retention counts from it
    empty_since: float | None = None

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState names, as ListGroups and describe tools show them."""
        if not self.members:
            return "Empty"
        if self.epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int  # -1: unchanged
    subscribed: tuple[str, ...] | None  # None: unchanged
    regex: str | None
    assignor: str | None
    owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None  # None: unchanged
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    #: the member's assignment when the answer carries one (a full request or a change)
    assignment: Assignment | None = None


class ConsumerGroupError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ConsumerGroupCoordinator:
    """Every KIP-848 group this endpoint process coordinates."""

    def __init__(self, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000,
                 default_assignor: str = "uniform", max_size: int = GROUP_MAX_SIZE,
                 has_offsets: Callable[[str], bool] | None = None) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.default_assignor = default_assignor
        self.max_size = max_size
        self.groups: dict[str, ConsumerGroup] = {}
        self.regexes = RegexResolver()
        self._has_offsets = has_offsets or (lambda _group: False)

    # ---- the heartbeat ------------------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest, topics: Mapping[str, tuple[uuid.UUID, int]],
                  now: float | None = None, *, version: Hashable | None = None,
                  visible: frozenset[str] | None = None) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat; ``topics`` are the tiered topics (name -> (id, partitions)),
        ``version`` identifies that catalog for the regex cache (the handler resolves the member's
        regex for it beforehand, off the event loop; None: the topic names are the key), ``visible``
        the names the member's principal may DESCRIBE (None: all)."""
        now = time.monotonic() if now is None else now
        try:
            _validate(req)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(req)
            matched = self._regex_matches(req, topics, frozenset(topics) if version is None else version)
            return self._heartbeat(req, topics, now, matched, visible)
        except ConsumerGroupError as e:
            log.info("kafka_consumer_group_heartbeat_refused", group=req.group_id, member=req.member_id,
                     epoch=req.member_epoch, error=e.code.name, reason=str(e))
            return HeartbeatResult(e.code, str(e), req.member_id or None, -1)

    def regex_of(self, group_id: str, member_id: str) -> str:
        """The member's current regex ("" when it has none, or is not a member)."""
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        return m.regex if m is not None else ""

    def _regex_matches(self, req: HeartbeatRequest, topics: Mapping[str, object],
                       version: Hashable) -> frozenset[str]:
        """What the member's regex (the request's, else the one it has) matches in ``topics``;
        INVALID_REGULAR_EXPRESSION when it does not compile (before any state changes, as Kafka)."""
        regex = req.regex if req.regex is not None else self.regex_of(req.group_id, req.member_id)
        if not regex:
            return frozenset()
        got = self.regexes.cached(regex, version)
        if got is None:  # not resolved by the handler (a direct caller): RE2 is linear, run it here
            got = self.regexes.resolve(regex, topics, version)
        if isinstance(got, InvalidRegex):
            raise ConsumerGroupError(ErrorCode.invalid_regular_expression, str(got))
        return got

    def _heartbeat(self, req: HeartbeatRequest, topics: Mapping[str, tuple[uuid.UUID, int]],
                   now: float, matched: frozenset[str], visible: frozenset[str] | None) -> HeartbeatResult:
        joining = req.member_epoch == 0
        g = self.groups.get(req.group_id)
        if g is None:
            if not joining:
                raise ConsumerGroupError(ErrorCode.unknown_member_id,
                                         f"group {req.group_id} has no member {req.member_id}")
            g = self.groups[req.group_id] = ConsumerGroup(req.group_id)
        member_id = req.member_id or str(uuid.uuid4())
        if len(g.members) >= self.max_size and member_id not in g.members:
            raise ConsumerGroupError(ErrorCode.group_max_size_reached,
                                     f"group {g.group_id} has reached its maximum of {self.max_size} members")
        m, bump = self._member(g, req, member_id, now)
        before = (m.epoch, _frozen(m.assigned))
        if req.rebalance_timeout_ms != -1:
            m.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            m.rack_id = req.rack_id
        if req.assignor is not None:
            m.assignor = req.assignor
        if req.subscribed is not None and tuple(sorted(set(req.subscribed))) != m.subscribed:
            m.subscribed = tuple(sorted(set(req.subscribed)))
            bump = True
        if req.regex is not None and req.regex != m.regex:
            m.regex = req.regex
            bump = True
        mine = matched if visible is None else matched & visible
        if mine != m.regex_topics:  # the catalog, the regex or the principal's DESCRIBE changed
            m.regex_topics = mine
            bump = True
        m.client_id, m.client_host, m.last_seen = req.client_id, req.client_host, now
        wanted = {t for mm in g.members.values() for t in _topics_of(mm, topics)}
        subscribed = {t: topics[t] for t in sorted(wanted) if t in topics}
        if subscribed != g.topics:
            bump = True
        if bump:
            g.epoch += 1
            log.info("kafka_consumer_group_epoch", group=g.group_id, epoch=g.epoch, members=len(g.members))
        if g.epoch > g.assignment_epoch:
            g.topics = subscribed
            name = self._assignor(g)
            subs = {mid: _topics_of(mm, topics) for mid, mm in g.members.items()}
            g.target = assign(name, subs, subscribed, g.target)
            g.assignment_epoch = g.epoch
        self._reconcile(g, m, req.owned, now)
        full = joining or (req.rebalance_timeout_ms != -1 and req.subscribed is not None
                           and req.owned is not None)
        changed = (m.epoch, _frozen(m.assigned)) != before
        return HeartbeatResult(ErrorCode.none, None, m.member_id, m.epoch,
                               dict(m.assigned) if full or changed else None)

    def _member(self, g: ConsumerGroup, req: HeartbeatRequest, member_id: str,
                now: float) -> tuple[ConsumerMember, bool]:
        """The request's member (created on a join); True when it is new to the group."""
        m = g.members.get(member_id)
        if req.member_epoch == 0 and req.instance_id is not None:
            old_id = g.static.get(req.instance_id)
            old = g.members.get(old_id) if old_id is not None else None
            if old is not None and old.member_id != member_id:
                if old.epoch != STATIC_LEAVE_EPOCH:
                    raise ConsumerGroupError(
                        ErrorCode.unreleased_instance_id,
                        f"static member {req.instance_id} of group {g.group_id} is still in use by {old_id}")
                # a static member coming back takes its old place (and assignment) under a new id
                del g.members[old.member_id]
                if old.member_id in g.target:
                    g.target[member_id] = g.target.pop(old.member_id)
                old.member_id, old.epoch, old.previous_epoch = member_id, 0, -1
                old.pending_revocation, old.state = {}, MemberState.STABLE
                g.members[member_id] = old
                g.static[req.instance_id] = member_id
                return old, False
        if m is not None and req.member_epoch == 0:
            # a member rejoining under its id (after FENCED_MEMBER_EPOCH it has released every
            # partition: a join reports none owned) starts over from epoch 0
            m.epoch, m.previous_epoch, m.assigned, m.pending_revocation = 0, -1, {}, {}
            m.state, m.revoke_deadline = MemberState.STABLE, None
            return m, False
        if m is None:
            if req.member_epoch != 0:
                raise ConsumerGroupError(ErrorCode.unknown_member_id,
                                         f"{member_id} is not a member of group {g.group_id}")
            m = ConsumerMember(member_id, req.instance_id, req.client_id, req.client_host,
                               req.rebalance_timeout_ms, last_seen=now)
            g.members[member_id] = m
            g.empty_since = None
            if req.instance_id is not None:
                g.static[req.instance_id] = member_id
            log.info("kafka_consumer_group_member_joined", group=g.group_id, member=member_id)
            return m, True
        _check_epoch(m, req.member_epoch, req.owned)
        return m, False

    def assignor_of(self, g: ConsumerGroup) -> str:
        return self._assignor(g)

    def _assignor(self, g: ConsumerGroup) -> str:
        """The assignor most members ask for (Kafka's choice), else the default."""
        asked = [m.assignor for m in g.members.values() if m.assignor]
        if not asked:
            return self.default_assignor
        return max(sorted(set(asked)), key=asked.count)

    # ---- reconciliation (Kafka's CurrentAssignmentBuilder) --------------------------------
    def _reconcile(self, g: ConsumerGroup, m: ConsumerMember,
                   owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None, now: float) -> None:
        if m.epoch == g.assignment_epoch and m.state is MemberState.STABLE:
            return
        if m.state is MemberState.UNREVOKED_PARTITIONS and _owns_any(owned, m.pending_revocation):
            return
        target = g.target.get(m.member_id, {})
        held = self._held_by_others(g, m)
        assigned: dict[uuid.UUID, set[int]] = {}
        revoke: dict[uuid.UUID, set[int]] = {}
        pending: dict[uuid.UUID, set[int]] = {}
        unreleased = False
        for tid in set(target) | set(m.assigned):
            want = set(target.get(tid, frozenset()))
            cur = set(m.assigned.get(tid, frozenset()))
            keep = cur & want
            if keep:
                assigned[tid] = keep
            if cur - keep:
                revoke[tid] = cur - keep
            add = want - keep
            blocked = {p for p in add if (tid, p) in held}
            unreleased = unreleased or bool(blocked)
            if add - blocked:
                pending[tid] = add - blocked
        frozen_revoke = {t: frozenset(ps) for t, ps in revoke.items()}
        if frozen_revoke and _owns_any(owned, frozen_revoke):
            m.state = MemberState.UNREVOKED_PARTITIONS
            m.assigned = {t: frozenset(ps) for t, ps in assigned.items()}
            m.pending_revocation = frozen_revoke
            if m.revoke_deadline is None:
                m.revoke_deadline = now + m.rebalance_timeout_ms / 1000
            return
        for tid, ps in pending.items():
            assigned.setdefault(tid, set()).update(ps)
        if m.epoch != g.assignment_epoch:
            m.previous_epoch, m.epoch = m.epoch, g.assignment_epoch
        m.assigned = {t: frozenset(ps) for t, ps in assigned.items()}
        m.pending_revocation = {}
        m.revoke_deadline = None
        m.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE

    @staticmethod
    def _held_by_others(g: ConsumerGroup, m: ConsumerMember) -> set[tuple[uuid.UUID, int]]:
        """Partitions another member still owns (assigned, or pending its revocation)."""
        return {(tid, p) for other in g.members.values() if other is not m
                for a in (other.assigned, other.pending_revocation) for tid, ps in a.items() for p in ps}

    # ---- leaving, expiry ------------------------------------------------------------------
    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        g = self.groups.get(req.group_id)
        m = g.members.get(req.member_id) if g is not None else None
        if g is None or m is None:
            raise ConsumerGroupError(ErrorCode.unknown_member_id,
                                     f"{req.member_id} is not a member of group {req.group_id}")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # a static member leaving for a restart keeps its assignment until it is back (or
            # its session times out)
            m.epoch, m.pending_revocation, m.state = STATIC_LEAVE_EPOCH, {}, MemberState.STABLE
            return HeartbeatResult(ErrorCode.none, None, m.member_id, STATIC_LEAVE_EPOCH)
        self._remove(g, m, "left")
        return HeartbeatResult(ErrorCode.none, None, req.member_id, LEAVE_EPOCH)

    def _remove(self, g: ConsumerGroup, m: ConsumerMember, why: str) -> None:
        g.members.pop(m.member_id, None)
        if m.instance_id is not None and g.static.get(m.instance_id) == m.member_id:
            del g.static[m.instance_id]
        g.target.pop(m.member_id, None)
        g.epoch += 1
        if not g.members:
            g.empty_since = time.time()
        log.info("kafka_consumer_group_member_removed", group=g.group_id, member=m.member_id, reason=why,
                 epoch=g.epoch)

    def tick(self, now: float) -> None:
        """Remove members past their session timeout, or past their rebalance timeout while
        holding partitions they were asked to revoke (Kafka fences both); then remove the groups
        left with no member and no committed offset."""
        for g in list(self.groups.values()):
            for m in list(g.members.values()):
                if now - m.last_seen >= self.session_timeout_ms / 1000:
                    self._remove(g, m, "session_timeout")
                elif m.revoke_deadline is not None and now >= m.revoke_deadline:
                    self._remove(g, m, "rebalance_timeout")
            if not g.members and not self._has_offsets(g.group_id):
                del self.groups[g.group_id]
                log.info("kafka_consumer_group_removed", group=g.group_id, reason="empty, no offsets")

    def live_since(self, group_id: str) -> float | None:
        return live_since(self.groups.get(group_id))

    # ---- offsets and tools ----------------------------------------------------------------
    def is_consumer_group(self, group_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    def validate_offset_request(self, group_id: str, member_id: str | None, epoch: int,
                                commit: bool) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit/validateOffsetFetch for this group."""
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.none
        if epoch < 0 and (not member_id if not commit else not g.members):
            return ErrorCode.none  # the admin client, or a consumer not using the group
        m = g.members.get(member_id or "")
        if m is None:
            return ErrorCode.unknown_member_id
        return ErrorCode.none if epoch == m.epoch else ErrorCode.stale_member_epoch

    def describe(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)


def _topics_of(m: ConsumerMember, topics: Mapping[str, object]) -> tuple[str, ...]:
    """The member's topics: its names, plus the tiered topics its regex matched that its principal
    may DESCRIBE (resolved at its heartbeat; a topic gone from the catalog since is dropped)."""
    if not m.regex_topics:
        return m.subscribed
    return tuple(sorted(set(m.subscribed) | {t for t in m.regex_topics if t in topics}))


def _validate(req: HeartbeatRequest) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
    if not req.group_id:
        raise ConsumerGroupError(ErrorCode.invalid_request, "GroupId can't be empty.")
    if req.instance_id == "":
        raise ConsumerGroupError(ErrorCode.invalid_request, "InstanceId can't be empty.")
    if req.rack_id == "":
        raise ConsumerGroupError(ErrorCode.invalid_request, "RackId can't be empty.")
    if req.version >= 1 and not req.member_id:
        raise ConsumerGroupError(ErrorCode.invalid_request, "MemberId can't be empty.")
    if req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH:
        if not req.member_id:
            raise ConsumerGroupError(ErrorCode.invalid_request, "MemberId can't be empty.")
    elif req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise ConsumerGroupError(ErrorCode.invalid_request,
                                     "RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise ConsumerGroupError(ErrorCode.invalid_request,
                                     "TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed and not req.regex:
            raise ConsumerGroupError(ErrorCode.invalid_request,
                                     "SubscribedTopicNames or a regex must be set in the first request.")
    elif req.member_epoch == STATIC_LEAVE_EPOCH:
        if not req.member_id or req.instance_id is None:
            raise ConsumerGroupError(ErrorCode.invalid_request, "MemberId and InstanceId must be set.")
    else:
        raise ConsumerGroupError(ErrorCode.invalid_request, "MemberEpoch is invalid.")
    if req.assignor is not None and req.assignor not in ASSIGNORS:
        raise ConsumerGroupError(ErrorCode.unsupported_assignor,
                                 f"ServerAssignor {req.assignor} is not supported. Supported assignors: "
                                 f"{', '.join(ASSIGNORS)}.")


def _check_epoch(m: ConsumerMember, epoch: int,
                 owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
    if epoch > m.epoch:
        raise ConsumerGroupError(ErrorCode.fenced_member_epoch,
                                 f"member epoch {epoch} is ahead of the coordinator's {m.epoch}; "
                                 "the member must abandon its partitions and rejoin")
    if epoch < m.epoch and (epoch != m.previous_epoch or not _subset(owned, m.assigned)):
        raise ConsumerGroupError(ErrorCode.fenced_member_epoch,
                                 f"member epoch {epoch} is behind the coordinator's {m.epoch}; "
                                 "the member must abandon its partitions and rejoin")


def _subset(owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(tid in assigned and set(ps) <= assigned[tid] for tid, ps in owned)


def _owns_any(owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None, revoke: Assignment) -> bool:
    """Does the member (by its last report) still own one of ``revoke``? Unknown counts as yes."""
    if owned is None:
        return True
    return any(p in revoke.get(tid, frozenset()) for tid, ps in owned for p in ps)


def _frozen(a: Assignment) -> frozenset[tuple[uuid.UUID, int]]:
    return frozenset((t, p) for t, ps in a.items() for p in ps)


Owned = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


def owned_from_request(parts: Sequence[Any] | None) -> Owned | None:
    """The request's ``topic_partitions`` as plain tuples (``None`` stays "unchanged")."""
    if parts is None:
        return None
    return tuple((uuid.UUID(str(t.topic_id)), tuple(int(p) for p in t.partitions)) for t in parts)
