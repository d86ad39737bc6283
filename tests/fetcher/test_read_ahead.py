"""A scan's read-ahead (fetcher.read_ahead, fetcher.chunk_buffers): buffer reuse, short answers,
cancellation and the memory bound, over a plugin that serves large objects from memory cheaply."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from fetcher.chunk_buffers import WARM, ChunkBufferPool, WarmBuffers
from fetcher.get_pool import Priority
from fetcher.read_ahead import Extent, SequentialRead
from fetcher.reader import ByteRateLimiter, ReadStats, SegmentReader
from rlm.errors import RemoteSegmentIncompleteError

CHUNK = 1 << 20
GiB = 1 << 30


class PatternStore:
    """Objects whose byte at position p of chunk i is ``i % 251``: any reused or misplaced chunk
    shows. Counts calls and the GETs running at once."""

    def __init__(self, *, short_by: int = 0, gate: threading.Event | None = None) -> None:
        self.short_by = short_by
        self.gate = gate  # set: GETs after the first wait for it
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        self._fills = {i: bytes([i]) * CHUNK for i in range(251)}

    def _enter(self) -> None:
        with self._lock:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)

    def _exit(self) -> None:
        with self._lock:
            self.active -= 1

    def read_log_segment_range_into(self, md: Any, start: int, out: memoryview) -> int:
        self._enter()
        try:
            if self.gate is not None and start > 0:
                self.gate.wait()
            n = max(0, min(len(out), md.segment_size_in_bytes - start) - self.short_by)
            out[:n] = self._fills[(start // CHUNK) % 251][:n]
            return n
        finally:
            self._exit()

    def read_log_segment_range(self, md: Any, start: int, end: int) -> bytes:
        buf = bytearray(end + 1 - start)
        n = self.read_log_segment_range_into(md, start, memoryview(buf))
        return bytes(buf[:n])


def segment(name: str, size: int) -> Any:
    return SimpleNamespace(segment_size_in_bytes=size, start_offset=0, end_offset=1,
                           remote_log_segment_id=SimpleNamespace(id=name))


def reader(store: PatternStore, parallel_gets: int = 4) -> SegmentReader:
    return SegmentReader(store, chunk_bytes=CHUNK, cache_bytes=0, read_ahead_chunks=0,  # type: ignore[arg-type]
                         parallel_gets=parallel_gets, limiter=ByteRateLimiter(2**63 - 1), stats=ReadStats())


def walk(stream: SequentialRead, extents: list[Extent], *, keep: list[memoryview] | None = None) -> int:
    """Read every chunk of ``extents`` as a scan does, checking each one's pattern; ``keep``: hold
    a view of every chunk past its release (what the guard must make harmless)."""
    read = 0
    for e in extents:
        for pos in range(e.start, e.stop, CHUNK):
            view = stream.view(e.md, pos, min(pos + CHUNK, e.stop))
            assert view[0] == view[-1] == (pos // CHUNK) % 251
            read += len(view)
            if keep is not None:
                keep.append(view[:16])
            del view
            stream.release_before(e.md, pos + CHUNK)
    return read


def test_a_chunk_buffer_is_never_reused_while_a_view_of_it_is_held() -> None:
    """A caller keeps a slice of every chunk it read: the scan goes on (buffers would be reused
    from the third chunk on), and every kept slice still shows the bytes it was read with. Without
    the guard (fetcher.chunk_buffers.still_viewed) later chunks overwrite them."""
    rd = reader(PatternStore())
    extents = [Extent(segment("s", 24 * CHUNK), 0, 24 * CHUNK)]
    stream = rd.sequential(extents, budget_bytes=3 * CHUNK)
    kept: list[memoryview] = []
    try:
        walk(stream, extents, keep=kept)
    finally:
        stream.close()
    assert [v[0] for v in kept] == [i % 251 for i in range(24)]
    assert stream.pool.retired == 24  # each one held, so each one retired
    rd.close()


def test_buffers_are_reused_when_nobody_holds_a_view() -> None:
    rd = reader(PatternStore())
    extents = [Extent(segment("s", 32 * CHUNK), 0, 32 * CHUNK)]
    stream = rd.sequential(extents, budget_bytes=4 * CHUNK)
    try:
        assert walk(stream, extents) == 32 * CHUNK
        assert stream.pool.retired == 0
        assert stream.pool.peak_held_bytes <= 4 * CHUNK
    finally:
        stream.close()
    rd.close()


def test_a_finished_scan_s_buffers_serve_the_next_scan() -> None:
    """The next scan (another fetcher's too) receives into the buffers the last one left warm:
    no fresh memory per scan, and still every byte right."""
    WARM.clear()
    rd = reader(PatternStore())
    extents = [Extent(segment("s", 8 * CHUNK), 0, 8 * CHUNK)]
    first = rd.sequential(extents, budget_bytes=4 * CHUNK)
    try:
        assert walk(first, extents) == 8 * CHUNK
    finally:
        first.close()
    assert WARM.idle_bytes == 4 * CHUNK
    reused = WARM.reused
    other = reader(PatternStore())
    second = other.sequential(extents, budget_bytes=4 * CHUNK)
    try:
        assert walk(second, extents) == 8 * CHUNK
    finally:
        second.close()
    assert WARM.reused - reused == 4
    rd.close()
    other.close()


def test_a_buffer_still_viewed_never_reaches_the_next_scan() -> None:
    """A caller holds a view of every chunk of one scan; the next scan, reading other bytes, must
    not receive into those buffers. Without the guard they would go to the warm cache at the
    first scan's close and the held views would show the second scan's bytes."""
    WARM.clear()
    rd = reader(PatternStore())
    held = [Extent(segment("held", 6 * CHUNK), 0, 6 * CHUNK)]
    kept: list[memoryview] = []
    first = rd.sequential(held, budget_bytes=3 * CHUNK)
    try:
        walk(first, held, keep=kept)
    finally:
        first.close()
    assert WARM.idle_bytes == 0  # every buffer was viewed: none is cached
    later = [Extent(segment("later", 40 * CHUNK), 20 * CHUNK, 40 * CHUNK)]
    second = rd.sequential(later, budget_bytes=3 * CHUNK)
    try:
        walk(second, later)
    finally:
        second.close()
    assert [v[0] for v in kept] == list(range(6))
    rd.close()


def test_the_warm_cache_keeps_at_most_its_bytes() -> None:
    warm = WarmBuffers(2 * CHUNK)
    pool = ChunkBufferPool(CHUNK, 3, warm=warm)
    bufs = [pool.take() for _ in range(3)]
    for b in bufs:
        assert b is not None and pool.give_back(b)
    pool.clear()
    assert warm.idle_bytes == 2 * CHUNK  # the third is dropped
    assert pool.held_bytes == 0
    assert warm.get(CHUNK) is not None and warm.get(CHUNK) is not None and warm.get(CHUNK) is None
    assert warm.get(2 * CHUNK) is None  # only a buffer of the size asked for


@pytest.mark.parametrize(("raw", "want"), [("", 128 << 20), ("64", 64 << 20), ("0", 0), ("-5", 0),
                                          ("lots", 128 << 20), ("1e3", 128 << 20)])
def test_the_warm_cache_size_from_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                  want: int) -> None:
    """``RLM_READ_BUFFER_CACHE_MB``: MiB, 0 turns the cache off; garbage is the default, never a crash."""
    from fetcher import chunk_buffers

    monkeypatch.setenv("RLM_READ_BUFFER_CACHE_MB", raw)
    assert chunk_buffers._cache_bytes_from_env() == want


def test_the_pool_retires_a_buffer_with_a_live_numpy_view() -> None:
    np = pytest.importorskip("numpy")
    pool = ChunkBufferPool(CHUNK, 1)
    buf = pool.take()
    assert buf is not None
    arr = np.frombuffer(memoryview(buf)[10:20], np.uint8)
    assert not pool.give_back(buf)
    again = pool.take()
    assert again is not None and again is not buf
    del arr
    assert pool.give_back(again)


@pytest.mark.parametrize("short_by", [1, CHUNK // 2])
def test_a_short_answer_is_an_error_never_fewer_bytes(short_by: int) -> None:
    rd = reader(PatternStore(short_by=short_by))
    md = segment("s", 4 * CHUNK)
    stream = rd.sequential([Extent(md, 0, 4 * CHUNK)])
    try:
        with pytest.raises(RemoteSegmentIncompleteError, match="expected"):
            stream.view(md, 0, CHUNK)
    finally:
        stream.close()
    rd.close()


def test_a_scan_stopped_early_leaves_no_get_running_and_frees_its_buffers() -> None:
    """One GET worker, a deep read-ahead, a store that holds every GET after the first: when the
    scan stops after its first chunk, one GET runs and the rest are queued. Closing cancels the
    queued ones (they never reach the store, even later), waits for the running one, and no
    buffer stays held."""
    gate = threading.Event()
    store = PatternStore(gate=gate)
    rd = reader(store, parallel_gets=1)
    md = segment("s", 64 * CHUNK)
    stream = rd.sequential([Extent(md, 0, 64 * CHUNK)], budget_bytes=16 * CHUNK)
    assert stream.view(md, 0, CHUNK)[0] == 0  # the whole budget was asked for: chunks 0-15
    stream.release_before(md, CHUNK)
    assert stream.in_flight == 15  # chunks 1-15: one GET running, 14 queued
    closer = threading.Thread(target=stream.close)
    closer.start()
    gate.set()  # the running GET may finish: close() waits for it
    closer.join(timeout=60)
    assert not closer.is_alive()
    assert store.active == 0
    assert stream.in_flight == 0
    assert stream.pool.held_bytes == 0
    calls = store.calls
    # a GET submitted after the close runs after every cancelled one was taken off the queue
    rd.submit_get(lambda: None, Priority.READ_AHEAD).future.result(timeout=30)
    assert store.calls == calls == 2  # the first chunk and the one running at the close
    rd.close()


def test_a_scan_of_a_gibibyte_holds_at_most_its_read_ahead_budget() -> None:
    """16 segments of 64 MiB read through with an 8 MiB budget: the buffers the scan holds (free
    or out, counted by its pool) never exceed the budget, though every byte went through them."""
    store = PatternStore()
    rd = reader(store)
    extents = [Extent(segment(f"s{i}", 64 * CHUNK), 0, 64 * CHUNK) for i in range(16)]
    budget = 8 * CHUNK
    stream = rd.sequential(extents, budget_bytes=budget)
    try:
        assert walk(stream, extents) == GiB
        assert 0 < stream.pool.peak_held_bytes <= budget
        assert stream.gets == GiB // CHUNK  # each chunk fetched once
        assert store.max_active <= 4
    finally:
        stream.close()
    assert stream.pool.held_bytes == 0
    rd.close()


def test_a_scan_feeds_its_depth_with_full_chunk_gets_and_decode_times() -> None:
    """The depth a scan keeps comes from its own measurements once it has them (not the budget):
    every full chunk's GET time and the decoder's time per chunk; a short tail chunk's GET is not
    one of them (it would understate a GET's time)."""
    rd = reader(PatternStore())
    extents = [Extent(segment("s", 8 * CHUNK + 100), 0, 8 * CHUNK + 100)]
    stream = rd.sequential(extents, budget_bytes=4 * CHUNK)
    try:
        walk(stream, extents)
        ctl = stream.depth_control
        assert ctl is not None and ctl.shortest_get_s is not None
        assert len(ctl._gets) == 8  # the 8 full chunks, not the 100-byte tail
        assert 1 <= stream.depth <= 4
    finally:
        stream.close()
    rd.close()


def test_the_read_ahead_depth_starts_at_the_budget_and_is_one_without_read_ahead() -> None:
    """The whole budget at first (a scan starts as fast as a plain download does); then what the
    store and the decoder measure (tests/fetcher/test_read_ahead_depth.py)."""
    rd = reader(PatternStore())
    stream = rd.sequential([], budget_bytes=8 * CHUNK)
    assert stream.depth == 8
    assert stream.depth_control is not None and stream.depth_control.max_depth == 8
    assert rd.sequential([], budget_bytes=0).depth == 1  # read-ahead off
    rd.close()
