"""The scan's read-ahead depth follows the bytes per second more chunks in flight deliver.

A model store answers a depth with a rate (bytes per second the scan then reads at) and a share of
the decoder's time spent waiting; the controller is fed as a scan feeds it, on a fake clock."""

from __future__ import annotations

import random
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


def test_a_decoder_that_never_waits_comes_down_to_the_minimum() -> None:
    """The read-ahead keeps ahead of the decoder at any depth: the budget is not held for nothing."""
    ctl, depths = run(lambda d: (500e6, 0.0), 200)
    assert depths[0] == 8  # a scan starts as fast as a plain download does
    assert set(depths[40:]) == {2}
    assert all(e.stall_share == 0.0 for e in ctl.history)


def test_a_store_far_away_keeps_the_budget_in_flight() -> None:
    """Each GET waits the same time before its first byte: bytes per second grow with the depth
    (to 6 in flight, then the decoder is the bound); a probe down costs throughput and is undone."""
    def far(depth: int) -> tuple[float, float]:
        rate = min(depth, 6) * 100e6
        return rate, max(0.0, 1 - rate / 600e6)

    ctl, depths = run(far, 400)
    assert depths.count(8) > 0.85 * len(depths)
    assert min(depths) >= 4
    assert [e.next_depth for e in ctl.history if e.judged and e.depth == 4] == [8] * len(
        [e for e in ctl.history if e.judged and e.depth == 4])  # every probe down undone


def test_a_store_that_is_its_own_bound_gets_no_parallel_gets_that_buy_nothing() -> None:
    """SeaweedFS on the scan's cores: the same bytes per second at any depth and the decoder
    waiting: fewer chunks in flight deliver as much, so the depth comes down to the minimum, but
    for a probe up now and then (undone: it buys nothing)."""
    _, depths = run(lambda d: (300e6, 0.4), 600)
    tail = depths[200:]
    assert tail.count(2) > 0.7 * len(tail)
    assert max(tail) <= 4


def test_a_growth_that_stops_paying_is_undone_to_the_depth_that_paid() -> None:
    """Bytes per second grow to 4 in flight and not past it: the depth settles at 4, not at the
    budget of 16 nor below 4."""
    _, depths = run(lambda d: (min(d, 4) * 100e6, 0.5), 800, max_depth=16)
    tail = depths[400:]
    assert tail.count(4) > 0.6 * len(tail)
    assert tail.count(2) < 0.1 * len(tail)


def test_the_depth_stays_within_the_budget_and_its_floor() -> None:
    _, depths = run(lambda d: (d * 1e6, 0.9), 300, max_depth=5)
    assert max(depths) == 5 and min(depths) >= 2
    assert ThroughputDepth(1).depth == 1  # a budget of one chunk: no read-ahead to grow
    assert ThroughputDepth(8, start_depth=30).depth == 8


def test_noise_in_the_measured_rate_does_not_walk_a_far_store_s_depth_down() -> None:
    """Rounds on a shared machine are noisy (each epoch's rate off by up to 30 %, seeded): a far
    store still spends most of the scan at the depth it needs."""
    rnd = random.Random(42)

    def noisy_far(depth: int) -> tuple[float, float]:
        rate = min(depth, 8) * 60e6 * rnd.uniform(0.7, 1.3)
        return rate, 0.5

    _, depths = run(noisy_far, 800)
    assert depths.count(8) > 0.7 * len(depths)
