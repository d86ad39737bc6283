"""The KIP-848 coordinator's state machine and the server-side assignors, without sockets.

The central property (Kafka's): a partition is never owned by two members at once, even while
members join, leave and lag a heartbeat behind; and once heartbeats settle every partition is
owned by exactly one member, balanced. A randomized run of simulated clients checks it.
"""

from __future__ import annotations

import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from fetcher.kafka.assignors import assign
from fetcher.kafka.consumer_groups import ConsumerGroupCoordinator, HeartbeatRequest, HeartbeatResult

TID = uuid.UUID(int=7)
TOPICS = {"t": (TID, 6)}


def hb(member: str, epoch: int, owned: set[int] | None = None, *, group: str = "g",
       subscribed: tuple[str, ...] | None = ("t",), timeout_ms: int = 30_000, assignor: str | None = None,
       instance: str | None = None) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance, rack_id=None,
        rebalance_timeout_ms=timeout_ms if epoch == 0 else -1,
        subscribed=subscribed if epoch == 0 else None, regex=None, assignor=assignor,
        owned=((TID, tuple(sorted(owned))),) if owned else (() if owned is not None else None))


def parts(r: HeartbeatResult) -> set[int]:
    assert r.assignment is not None
    return set(r.assignment.get(TID, frozenset()))


def test_a_second_member_gets_partitions_only_after_the_first_revoked_them() -> None:
    c = ConsumerGroupCoordinator()
    a = c.heartbeat(hb("a", 0, set()), TOPICS, now=0)
    assert a.error is ErrorCode.none and a.member_epoch == 1 and parts(a) == set(range(6))
    b = c.heartbeat(hb("b", 0, set()), TOPICS, now=1)
    assert b.member_epoch == 2 and parts(b) == set()  # a still owns everything: nothing free yet
    a2 = c.heartbeat(hb("a", 1, set(range(6))), TOPICS, now=2)
    assert a2.member_epoch == 1 and len(parts(a2)) == 3  # a keeps half, at its old epoch: revoke
    kept = parts(a2)
    b2 = c.heartbeat(hb("b", 2, set()), TOPICS, now=3)
    assert not b2.assignment or parts(b2) == set()  # still held by a until a says it let go
    a3 = c.heartbeat(hb("a", 1, kept), TOPICS, now=4)
    assert a3.member_epoch == 2  # revoked: a moves to the new epoch
    b3 = c.heartbeat(hb("b", 2, set()), TOPICS, now=5)
    assert parts(b3) == set(range(6)) - kept


def test_fencing_and_unknown_members() -> None:
    c = ConsumerGroupCoordinator()
    c.heartbeat(hb("a", 0, set()), TOPICS, now=0)
    assert c.heartbeat(hb("a", 5, set()), TOPICS, now=1).error is ErrorCode.fenced_member_epoch
    assert c.heartbeat(hb("x", 1, set()), TOPICS, now=1).error is ErrorCode.unknown_member_id
    c.heartbeat(hb("b", 0, set()), TOPICS, now=1)  # group epoch 2
    r = c.heartbeat(hb("a", 1, set(range(6))), TOPICS, now=2)  # a must revoke, stays at 1
    c.heartbeat(hb("a", 1, set(r.assignment[TID]) if r.assignment else set()), TOPICS, now=3)
    # a lost response: the previous epoch with owned partitions inside the assignment is accepted
    ok = c.heartbeat(hb("a", 1, set(r.assignment[TID]) if r.assignment else set()), TOPICS, now=4)
    assert ok.error is ErrorCode.none and ok.member_epoch == 2
    assert c.heartbeat(hb("a", 1, set(range(6))), TOPICS, now=5).error is ErrorCode.fenced_member_epoch


@pytest.mark.parametrize(("req", "code"), [
    (hb("a", 0, set(), timeout_ms=-1), ErrorCode.invalid_request),  # join without a rebalance timeout
    (hb("a", 0, {1}), ErrorCode.invalid_request),  # join owning partitions
    (hb("a", 0, set(), subscribed=()), ErrorCode.invalid_request),  # join subscribing to nothing
    (hb("", 0, set()), ErrorCode.invalid_request),  # v1: the client makes the member id
    (hb("a", 0, set(), group=""), ErrorCode.invalid_request),
    (hb("a", -3, set()), ErrorCode.invalid_request),
    (hb("a", 0, set(), assignor="sticky"), ErrorCode.unsupported_assignor),
    (hb("a", 0, set(), instance=""), ErrorCode.invalid_request),
])
def test_invalid_requests_are_refused_as_kafka_refuses_them(req: HeartbeatRequest, code: ErrorCode) -> None:
    r = ConsumerGroupCoordinator().heartbeat(req, TOPICS, now=0)
    assert r.error is code and r.message


def test_session_and_rebalance_timeouts_remove_members() -> None:
    c = ConsumerGroupCoordinator(session_timeout_ms=10_000)
    c.heartbeat(hb("a", 0, set(), timeout_ms=5_000), TOPICS, now=0)
    c.heartbeat(hb("b", 0, set()), TOPICS, now=1)
    c.heartbeat(hb("a", 1, set(range(6))), TOPICS, now=2)  # asked to revoke by now + 5 s
    c.tick(6.9)
    assert set(c.groups["g"].members) == {"a", "b"}
    c.tick(7.1)  # a never revoked: fenced at its rebalance timeout
    assert set(c.groups["g"].members) == {"b"}
    c.tick(11.5)  # b's last heartbeat was at 1: its session timed out
    assert "g" not in c.groups  # no member and no committed offset left: the group is removed


def test_leave_and_static_members() -> None:
    c = ConsumerGroupCoordinator()
    c.heartbeat(hb("a", 0, set(), instance="i1"), TOPICS, now=0)
    taken = c.heartbeat(hb("b", 0, set(), instance="i1"), TOPICS, now=1)
    assert taken.error is ErrorCode.unreleased_instance_id
    assert c.heartbeat(hb("a", -2, None, instance="i1"), TOPICS, now=2).member_epoch == -2
    back = c.heartbeat(hb("b", 0, set(), instance="i1"), TOPICS, now=3)  # restarted under a new id
    assert back.error is ErrorCode.none and parts(back) == set(range(6))  # its place, its partitions
    assert c.heartbeat(hb("b", back.member_epoch, set(range(6))), TOPICS, now=4).error is ErrorCode.none
    left = c.heartbeat(hb("b", -1, None), TOPICS, now=5)
    assert left.member_epoch == -1 and not c.groups["g"].members


def test_offset_requests_carry_the_member_epoch() -> None:
    c = ConsumerGroupCoordinator()
    c.heartbeat(hb("a", 0, set()), TOPICS, now=0)
    assert c.validate_offset_request("g", "a", 1, commit=True) is ErrorCode.none
    assert c.validate_offset_request("g", "a", 0, commit=True) is ErrorCode.stale_member_epoch
    assert c.validate_offset_request("g", "zz", 1, commit=True) is ErrorCode.unknown_member_id
    assert c.validate_offset_request("g", "", -1, commit=True) is ErrorCode.unknown_member_id  # group live
    assert c.validate_offset_request("g", None, -1, commit=False) is ErrorCode.none  # admin fetch
    assert c.validate_offset_request("other", "", -1, commit=True) is ErrorCode.none


def test_assignors_balance_and_stick() -> None:
    members = {m: ("t",) for m in ("a", "b", "c")}
    u = assign("uniform", members, {"t": (TID, 7)}, {})
    assert sorted(len(a.get(TID, ())) for a in u.values()) == [2, 2, 3]
    grown = assign("uniform", {**members, "d": ("t",)}, {"t": (TID, 7)}, u)
    assert sorted(len(a.get(TID, ())) for a in grown.values()) == [1, 2, 2, 2]
    moved = sum(len(u[m][TID] - grown[m].get(TID, frozenset())) for m in u)
    assert moved == 1  # only what the newcomer needs moves
    r = assign("range", members, {"t": (TID, 7)}, {})
    assert [sorted(r[m][TID]) for m in ("a", "b", "c")] == [[0, 1, 2], [3, 4], [5, 6]]


def test_random_joins_and_leaves_never_give_a_partition_to_two_members() -> None:
    """Simulated clients heartbeat in random order, apply answers as clients do (give up what is
    no longer assigned, take the rest), report what they own; members come and go."""
    rng = random.Random(848)
    c = ConsumerGroupCoordinator(session_timeout_ms=60_000)
    clients: dict[str, tuple[int, set[int]]] = {}  # member -> (epoch, owned)
    now = 0.0
    names = iter(f"m{i}" for i in range(1000))
    for step in range(600):
        now += 0.1
        action = rng.random()
        if action < 0.08 and len(clients) < 5:
            mid = next(names)
            r = c.heartbeat(hb(mid, 0, set()), TOPICS, now=now)
            clients[mid] = (r.member_epoch, set(parts(r)))
        elif action < 0.12 and clients:
            mid = rng.choice(sorted(clients))
            c.heartbeat(hb(mid, -1, None), TOPICS, now=now)
            del clients[mid]
        elif clients:
            mid = rng.choice(sorted(clients))
            epoch, owned = clients[mid]
            r = c.heartbeat(hb(mid, epoch, owned), TOPICS, now=now)
            assert r.error is ErrorCode.none, (step, r)
            if r.assignment is not None:
                owned = set(r.assignment.get(TID, frozenset()))  # revoke first, then take
            clients[mid] = (r.member_epoch, owned)
        held = [p for _, o in clients.values() for p in o]
        assert len(held) == len(set(held)), (step, clients)
    for _ in range(4 * max(1, len(clients))):  # settle: every member heartbeats a few times
        for mid in sorted(clients):
            epoch, owned = clients[mid]
            r = c.heartbeat(hb(mid, epoch, owned), TOPICS, now=now)
            if r.assignment is not None:
                owned = set(r.assignment.get(TID, frozenset()))
            clients[mid] = (r.member_epoch, owned)
    if clients:
        held = sorted(p for _, o in clients.values() for p in o)
        assert held == list(range(6)), clients
        sizes = [len(o) for _, o in clients.values()]
        assert max(sizes) - min(sizes) <= 1, clients
