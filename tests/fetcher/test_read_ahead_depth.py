"""The scan's read-ahead depth: the chunks that cover the shortest GET time at the decoder's rate."""

from __future__ import annotations

from fetcher.read_ahead_depth import ReadAheadDepth


def test_the_whole_budget_until_a_get_and_a_decode_are_measured() -> None:
    depth = ReadAheadDepth(8)
    assert depth.depth == 8  # a scan starts as fast as a plain download does
    depth.got(0.05)
    assert depth.depth == 8
    depth.used(0.05)
    assert depth.depth == 2  # one on the wire while one is decoded


def test_gets_slowed_by_the_scan_s_own_parallel_gets_do_not_deepen_it() -> None:
    """A store that is its own bound: four GETs at once take four times as long as one alone. The
    average GET time would ask for five chunks in flight (and so keep four GETs running: the depth
    confirms itself); the shortest asks for what one GET alone needs."""
    depth = ReadAheadDepth(8)
    for _ in range(12):
        depth.got(0.08)  # four at once, 20 ms each alone
    depth.got(0.02)  # one that ran alone
    depth.used(0.02)  # the decoder's 20 ms per chunk
    assert depth.depth == 2
    assert depth.shortest_get_s == 0.02


def test_a_store_far_away_gets_the_budget() -> None:
    """30 ms to the first byte and 100 MB/s per connection: one 8 MiB GET takes 0.11 s even alone,
    the decoder 20 ms per chunk: six GETs in flight would be needed, within a budget of 8."""
    depth = ReadAheadDepth(8)
    for _ in range(8):
        depth.got(0.03 + (8 << 20) / 100e6)
        depth.used(0.02)
    assert depth.depth == 7  # ceil(0.114 / 0.02) + 1
    small = ReadAheadDepth(4)
    small.got(0.5)
    small.used(0.01)
    assert small.depth == 4  # never past the budget


def test_a_store_that_slows_down_is_followed_once_its_fast_gets_age_out() -> None:
    depth = ReadAheadDepth(8, window=4)
    depth.got(0.01)
    depth.used(0.02)
    assert depth.depth == 2
    for _ in range(4):
        depth.got(0.1)
    assert depth.depth == 6  # ceil(0.1 / 0.02) + 1


def test_a_budget_of_one_chunk_reads_nothing_ahead() -> None:
    depth = ReadAheadDepth(1)
    depth.got(1.0)
    depth.used(0.001)
    assert depth.depth == 1
