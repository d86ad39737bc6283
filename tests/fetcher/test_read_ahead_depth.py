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


def test_a_decoder_that_never_waits_keeps_the_budget() -> None:
    """The read-ahead keeps ahead of the decoder: nothing to gain either way, nothing is probed
    (fewer chunks in flight would only give back memory the budget allows)."""
    ctl, depths = run(lambda d: (500e6, 0.0), 300)
    assert set(depths) == {8}  # a scan starts as fast as a plain download does, and stays
    assert ctl.history and all(e.judged for e in ctl.history)


def test_a_store_far_away_keeps_the_budget_in_flight() -> None:
    """Each GET waits the same time before its first byte: bytes per second grow with the depth
    up to the budget; a probe down (after a long stall at the ceiling) costs throughput and is
    undone at once."""
    ctl, depths = run(lambda d: (d * 50e6, 0.5), 1500)
    assert depths.count(8) > 0.9 * len(depths)
    downs = [e for e in ctl.history if e.judged and e.depth == 4]
    assert downs and all(e.next_depth == 8 for e in downs)  # every probe down undone


def test_a_store_that_is_its_own_bound_gets_no_parallel_gets_that_buy_nothing() -> None:
    """SeaweedFS on the scan's cores: the same bytes per second at any depth and the decoder
    waiting: fewer chunks in flight deliver as much, so the depth comes down to the minimum, but
    for a probe up now and then (undone: it buys nothing)."""
    _, depths = run(lambda d: (300e6, 0.4), 1500)
    tail = depths[750:]
    assert tail.count(2) > 0.8 * len(tail)
    assert max(tail) <= 4


def test_a_growth_that_stops_paying_is_undone_to_the_depth_that_paid() -> None:
    """Bytes per second grow to 4 in flight and not past it: the depth settles at 4, not at the
    budget of 16 nor below 4."""
    _, depths = run(lambda d: (min(d, 4) * 100e6, 0.5), 2500, max_depth=16)
    tail = depths[1250:]
    assert tail.count(4) > 0.75 * len(tail)
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
