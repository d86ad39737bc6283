"""The scan's read-ahead depth follows the bytes per second more chunks in flight deliver.

A model store answers a depth with a rate (bytes per second the scan then reads at) and a share of
the decoder's time spent waiting; the controller is fed as a scan feeds it, on a fake clock."""

from __future__ import annotations

from collections.abc import Callable

from fetcher.read_ahead_depth import ThroughputDepth

CHUNK = 8 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(store: Callable[[int], tuple[float, float]], chunks: int, *, max_depth: int = 8) -> tuple[
        ThroughputDepth, list[int]]:
    """Consume ``chunks`` chunks; ``store(depth)`` is (bytes per second, share of time waited)."""
    clock = Clock()
    ctl = ThroughputDepth(max_depth, clock=clock)
    depths = []
    for _ in range(chunks):
        rate, stalled = store(ctl.depth)
        dt = CHUNK / rate
        ctl.waited(dt * stalled)
        clock.now += dt
        ctl.consumed(CHUNK)
        depths.append(ctl.depth)
    return ctl, depths


def test_a_decoder_that_never_waits_gets_no_more_than_the_minimum() -> None:
    ctl, depths = run(lambda d: (500e6, 0.0), 200)
    assert set(depths) == {2}
    assert ctl.history and all(e.stall_share == 0.0 for e in ctl.history)


def test_a_store_far_away_gets_chunks_in_flight_up_to_the_budget() -> None:
    """Each GET waits the same time before its first byte: bytes per second grow with the depth
    (until the decoder is the bound at 6 in flight); the depth climbs to where that happens."""
    def far(depth: int) -> tuple[float, float]:
        rate = min(depth, 6) * 100e6
        return rate, max(0.0, 1 - rate / 600e6)

    _, depths = run(far, 400)
    assert depths[-1] >= 6
    assert max(depths) <= 8
    assert 6 <= sorted(depths)[len(depths) // 2] <= 8  # most of the scan at or past the product


def test_a_store_that_is_its_own_bound_gets_no_parallel_gets_that_buy_nothing() -> None:
    """SeaweedFS on the scan's cores: the same bytes per second at any depth and the decoder
    waiting: growth is tried, does not pay, is undone; the depth stays at the minimum but for a
    probe now and then."""
    ctl, depths = run(lambda d: (300e6, 0.4), 400)
    assert depths.count(2) > 0.8 * len(depths)
    assert max(depths) <= 4  # a probe doubles once from 2, never further
    probes = [e for e in ctl.history if e.next_depth > e.depth]
    assert 1 <= len(probes) <= len(ctl.history) // 4


def test_a_growth_that_stops_paying_is_undone_to_the_depth_that_paid() -> None:
    """Rate grows to 4 in flight and not past it: the depth settles at 4, not the budget."""
    _, depths = run(lambda d: (min(d, 4) * 100e6, 0.5), 400, max_depth=16)
    tail = depths[len(depths) // 2:]
    assert sorted(tail)[len(tail) // 2] == 4
    assert max(depths) <= 8  # one doubling past 4 was tried, then by one chunk at most


def test_the_depth_stays_within_the_budget_and_its_floor() -> None:
    _, depths = run(lambda d: (d * 1e6, 0.9), 300, max_depth=5)
    assert max(depths) == 5 and min(depths) >= 2
    assert ThroughputDepth(1).depth == 1  # a budget of one chunk: no read-ahead to grow
