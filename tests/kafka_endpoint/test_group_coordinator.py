"""The classic group coordinator's state machine, driven directly (no sockets): Kafka's answers for
joins, syncs, heartbeats, leaves, expiry, static members, fencing and a join flood."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from fetcher.kafka.groups import GroupCoordinator, GroupState, JoinResult, coordinator_index

PROTO = [("range", b"r-meta"), ("roundrobin", b"rr-meta")]


def run(test: Callable[[GroupCoordinator], Awaitable[None]], delay_ms: int = 0) -> None:
    async def main() -> None:
        c = GroupCoordinator(initial_delay_ms=delay_ms)
        try:
            await asyncio.wait_for(test(c), 30)
        finally:
            c.close()

    asyncio.run(main())


async def join(c: GroupCoordinator, member: str = "", *, group: str = "g", instance: str | None = None,
               protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10_000,
               rebalance_ms: int = 5_000, client: str = "c") -> JoinResult:
    return await c.join(group, member, instance, "consumer", protocols or PROTO, session_ms, rebalance_ms,
                        client)


async def two_members(c: GroupCoordinator) -> tuple[JoinResult, JoinResult]:
    a = await join(c)
    assert a.error is ErrorCode.none and a.leader == a.member_id and a.generation == 1
    await sync_all(c, {a.member_id: b"A1"}, [a])
    # b joins: a learns from its heartbeat and rejoins; both answers come together
    b_join = asyncio.ensure_future(join(c, client="b"))
    await asyncio.sleep(0.05)
    assert c.heartbeat("g", a.member_id, None, a.generation) is ErrorCode.rebalance_in_progress
    a2, b = await asyncio.gather(join(c, a.member_id), b_join)
    assert a2.generation == b.generation == 2 and a2.leader == a.member_id == b.leader
    return a2, b


async def sync_all(c: GroupCoordinator, plan: dict[str, bytes], joined: list[JoinResult]) -> list[bytes]:
    leader = next(j for j in joined if j.member_id == j.leader)
    followers = [asyncio.ensure_future(c.sync("g", j.member_id, None, j.generation, []))
                 for j in joined if j is not leader]
    await asyncio.sleep(0.02)
    lead = await c.sync("g", leader.member_id, None, leader.generation, list(plan.items()))
    got = [lead, *await asyncio.gather(*followers)]
    assert all(r.error is ErrorCode.none for r in got), got
    return [r.assignment for r in got]


def test_members_rebalance_and_get_their_assignments() -> None:
    async def t(c: GroupCoordinator) -> None:
        a, b = await two_members(c)
        assert {m for m, _i, _md in a.members} == {a.member_id, b.member_id} and b.members == ()
        assert all(md == b"r-meta" for _m, _i, md in a.members)  # the chosen protocol's metadata
        assert a.protocol_name == "range"
        got = await sync_all(c, {a.member_id: b"A", b.member_id: b"B"}, [a, b])
        assert got == [b"A", b"B"]
        g = c.describe("g")
        assert g is not None and g.state is GroupState.STABLE
        assert c.heartbeat("g", b.member_id, None, b.generation) is ErrorCode.none
        assert c.heartbeat("g", b.member_id, None, b.generation - 1) is ErrorCode.illegal_generation
        assert c.heartbeat("g", "nobody", None, b.generation) is ErrorCode.unknown_member_id
        assert c.commit_allowed("g", b.member_id, b.generation) is ErrorCode.none
        assert c.commit_allowed("g", b.member_id, 1) is ErrorCode.illegal_generation
        assert c.commit_allowed("g", "", -1) is ErrorCode.unknown_member_id  # a live group's offsets
        assert c.commit_allowed("other", "", -1) is ErrorCode.none  # a simple (assign) consumer
        # a stable follower rejoining unchanged: same generation, no rebalance
        again = await join(c, b.member_id)
        assert again.generation == b.generation and c.describe("g").state is GroupState.STABLE  # type: ignore[union-attr]

    run(t)


def test_leave_and_expiry_rebalance_the_rest() -> None:
    async def t(c: GroupCoordinator) -> None:
        a, b = await two_members(c)
        await sync_all(c, {a.member_id: b"A", b.member_id: b"B"}, [a, b])
        assert c.leave("g", a.member_id) is ErrorCode.none  # the leader leaves
        assert c.heartbeat("g", b.member_id, None, b.generation) is ErrorCode.rebalance_in_progress
        b2 = await join(c, b.member_id)
        assert b2.generation == 3 and b2.leader == b.member_id and len(b2.members) == 1
        # a member that stops heartbeating is removed after its session timeout
        c3 = asyncio.ensure_future(join(c, client="c3", session_ms=1000))
        await asyncio.sleep(0.05)
        b3, j3 = await asyncio.gather(join(c, b.member_id, session_ms=1000), c3)
        await sync_all(c, {}, [b3, j3])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # only j3 heartbeats
            await asyncio.sleep(0.2)
            if c.heartbeat("g", j3.member_id, None, j3.generation) is ErrorCode.rebalance_in_progress:
                break
        else:
            raise AssertionError("the silent member was never expired")
        j4 = await join(c, j3.member_id)
        assert [m for m, _i, _md in j4.members] == [j3.member_id] and j4.leader == j3.member_id

    run(t)


def test_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout() -> None:
    async def t(c: GroupCoordinator) -> None:
        a = await join(c, rebalance_ms=500)
        await sync_all(c, {}, [a])
        start = time.monotonic()
        b = await join(c, client="b", rebalance_ms=500)  # a never rejoins (but is not expired yet)
        assert time.monotonic() - start >= 0.4
        assert b.leader == b.member_id and [m for m, _i, _md in b.members] == [b.member_id]
        assert c.heartbeat("g", a.member_id, None, a.generation) is ErrorCode.unknown_member_id

    run(t)


def test_member_id_required_and_static_members() -> None:
    async def t(c: GroupCoordinator) -> None:
        first = await c.join("g", "", None, "consumer", PROTO, 10_000, 5_000, "c", require_known_id=True)
        assert first.error is ErrorCode.member_id_required and first.member_id
        assert (await join(c, "made-up")).error is ErrorCode.unknown_member_id
        a = await join(c, first.member_id, instance="pod-0")
        assert a.error is ErrorCode.none and a.member_id == first.member_id
        await sync_all(c, {a.member_id: b"A"}, [a])
        # pod-0 restarts: it joins with no member id and takes the old one's place (old id fenced)
        a2 = await join(c, instance="pod-0")
        assert a2.error is ErrorCode.none and a2.member_id != a.member_id
        assert c.heartbeat("g", a.member_id, "pod-0", a.generation) is ErrorCode.fenced_instance_id
        assert (await join(c, a.member_id, instance="pod-0")).error is ErrorCode.fenced_instance_id
        assert c.leave("g", "", "pod-0") is ErrorCode.none

    run(t)


def test_protocols_must_match_and_the_vote_picks_one_all_support() -> None:
    async def t(c: GroupCoordinator) -> None:
        a = await join(c, protocols=[("range", b"1"), ("cooperative-sticky", b"2")])
        bad = await c.join("g", "", None, "connect", PROTO, 10_000, 5_000, "x")
        assert bad.error is ErrorCode.inconsistent_group_protocol
        none_common = await join(c, protocols=[("sticky", b"")])
        assert none_common.error is ErrorCode.inconsistent_group_protocol
        b_join = asyncio.ensure_future(join(c, protocols=[("cooperative-sticky", b"b"), ("range", b"r")]))
        await asyncio.sleep(0.05)
        a2, b = await asyncio.gather(
            join(c, a.member_id, protocols=[("cooperative-sticky", b"2"), ("range", b"1")]), b_join)
        assert a2.protocol_name == b.protocol_name == "cooperative-sticky"

    run(t)


def test_initial_delay_collects_members_into_one_rebalance() -> None:
    async def t(c: GroupCoordinator) -> None:
        joins = [asyncio.ensure_future(join(c, client=f"m{i}")) for i in range(3)]
        got = await asyncio.gather(*joins)
        assert {j.generation for j in got} == {1}, "one rebalance for the three"
        leader = [j for j in got if j.member_id == j.leader]
        assert len(leader) == 1 and len(leader[0].members) == 3

    run(t, delay_ms=300)


def test_sync_of_a_stale_generation_and_bad_requests() -> None:
    async def t(c: GroupCoordinator) -> None:
        a = await join(c)
        r = await c.sync("g", a.member_id, None, a.generation + 5, [])
        assert r.error is ErrorCode.illegal_generation
        assert (await c.sync("g", "ghost", None, a.generation, [])).error is ErrorCode.unknown_member_id
        no_id = await c.join("", "", None, "consumer", PROTO, 10_000, 5_000, "c")
        assert no_id.error is ErrorCode.invalid_group_id
        assert (await join(c, session_ms=10)).error is ErrorCode.invalid_session_timeout
        assert c.leave("nope", "x") is ErrorCode.unknown_member_id

    run(t)


def test_a_join_flood_is_bounded_and_other_groups_unaffected() -> None:
    async def t(c: GroupCoordinator) -> None:
        other = await join(c, group="quiet")
        limit = c.max_size
        flood: list[Any] = [asyncio.ensure_future(join(c, group="flood", client=f"f{i}"))
                            for i in range(limit + 5)]
        done = await asyncio.gather(*flood)
        refused = [j for j in done if j.error is ErrorCode.group_max_size_reached]
        assert len(refused) == 5 and len([j for j in done if j.error is ErrorCode.none]) == limit
        assert c.heartbeat("quiet", other.member_id, None, other.generation) is ErrorCode.none

    run(t)


def test_coordinator_index_is_stable_and_spread() -> None:
    owners = [coordinator_index(f"group-{i}", 3) for i in range(300)]
    assert owners == [coordinator_index(f"group-{i}", 3) for i in range(300)]
    assert {owners.count(k) for k in range(3)} and min(owners.count(k) for k in range(3)) > 60
    assert coordinator_index("x", 0) == 0


def test_close_ends_pending_joins() -> None:
    """A join still waiting for its rebalance when the endpoint closes does not hang."""
    async def t(c: GroupCoordinator) -> None:
        a = await join(c)
        await sync_all(c, {a.member_id: b"A"}, [a])
        pending = asyncio.ensure_future(join(c, client="late"))  # waits for a to rejoin
        await asyncio.sleep(0.05)
        assert not pending.done()
        c.close()
        with pytest.raises(asyncio.CancelledError):
            await pending

    run(t)
