"""Who gets a connection slot (fetcher/kafka/admission.py), without sockets: the not-logged-in
share given out by address, and the per-address creation rate (KIP-612's per-IP quota).

The listener tests with real sockets are in test_connection_storm.py and test_prelogin_limits.py.
"""

from __future__ import annotations

import pytest

from fetcher.kafka.admission import ConnectionSlots, CreationRate

pytestmark = [pytest.mark.security]


class _Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed: str | None = None

    def close_now(self, reason: str) -> None:
        self.closed = reason


def _fill(slots: ConnectionSlots, address: str, n: int) -> list[_Conn]:
    conns = [_Conn(f"{address}#{i}") for i in range(n)]
    for c in conns:
        assert slots.admit(c, address) is None
    return conns


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _slots(max_unauthenticated: int, clock: _Clock, min_wait_s: float = 5.0) -> ConnectionSlots:
    return ConnectionSlots(100, 0, max_unauthenticated, min_wait_s=min_wait_s, clock=clock)


def test_a_full_share_refuses_the_heaviest_address_and_admits_another() -> None:
    """The flood's own address is refused (nobody is closed: no churn); a client from another
    address takes the place of the flood's oldest connection."""
    clock = _Clock()
    slots = _slots(4, clock)
    flood = _fill(slots, "10.0.0.1", 4)
    assert slots.admit(_Conn("again"), "10.0.0.1") == "unauthenticated_connections_full"
    assert all(c.closed is None for c in flood)
    client = _Conn("client")
    assert slots.admit(client, "10.0.0.2") is None
    assert flood[0].closed == "unauthenticated_connections_full"
    assert [c.closed for c in flood[1:]] == [None, None, None]
    assert slots.unauthenticated == 4 and len(slots) == 4


def test_a_flood_spread_over_addresses_stops_churning_once_shares_are_equal() -> None:
    """Many addresses with equal shares: a new connection from any of them is refused (it would
    only push out another of the flood's, which would come back); a new address still gets in."""
    clock = _Clock()
    slots = _slots(8, clock)
    for a in range(4):
        _fill(slots, f"10.0.1.{a}", 2)
    for a in range(4):
        assert slots.admit(_Conn("more"), f"10.0.1.{a}") == "unauthenticated_connections_full"
    assert slots.admit(_Conn("client"), "10.0.2.1") is None


def test_the_oldest_gives_way_once_it_has_waited_long_enough() -> None:
    """As many addresses as slots, one each (no heavier address to take from), or a client whose
    host opens several connections at once: the oldest connection not logged in gives way once it
    has waited the minimum (it had time to log in), not before; so churn is bounded by it."""
    clock = _Clock()
    slots = _slots(3, clock)
    first, *_ = [_fill(slots, f"10.0.3.{a}", 1)[0] for a in range(3)]
    assert slots.admit(_Conn("new"), "10.0.3.9") == "unauthenticated_connections_full"
    clock.now += 5
    assert slots.admit(_Conn("new"), "10.0.3.9") is None
    assert first.closed == "unauthenticated_connections_full"
    # right after, the others (as old as first) give way too, one per new connection
    assert slots.admit(_Conn("new2"), "10.0.3.9") is None
    assert slots.unauthenticated == 3


def test_logged_in_connections_leave_the_share() -> None:
    slots = ConnectionSlots(max_connections=10, max_per_address=0, max_unauthenticated=2)
    a, b = _fill(slots, "10.0.4.1", 2)
    slots.logged_in(a)
    slots.logged_in(b)
    assert slots.unauthenticated == 0
    _fill(slots, "10.0.4.1", 2)  # the share is free again, the logged-in ones keep their slots
    assert len(slots) == 4
    slots.release(a)
    slots.release(a)  # idempotent
    assert len(slots) == 3


def test_creation_rate_is_per_address() -> None:
    clock = _Clock()
    rate = CreationRate(2.0, burst=3, clock=clock)
    assert [rate.take("10.0.5.1") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert rate.take("10.0.5.1") == pytest.approx(0.5)  # a token comes back after 1/rate
    assert rate.take("10.0.5.2") == 0.0  # another address is untouched
    clock.now += 0.5
    assert rate.take("10.0.5.1") == 0.0
    assert rate.take("10.0.5.1") > 0


def test_creation_rate_zero_is_no_limit_and_its_table_is_bounded() -> None:
    assert all(CreationRate(0).take("10.0.6.1") == 0.0 for _ in range(10_000))
    clock = _Clock()
    rate = CreationRate(10.0, burst=5, clock=clock)
    for i in range(5000):  # addresses that each opened one connection, long ago by the end
        rate.take(f"10.1.{i // 256}.{i % 256}")
        clock.now += 0.01
    clock.now += 10
    rate.take("10.0.6.2")
    for i in range(2000):
        rate.take(f"10.2.{i // 256}.{i % 256}")
    assert len(rate) < 5000  # the refilled entries were swept
