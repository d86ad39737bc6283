"""Output memory recycled between decodes (rlm.log._recycle): reuse happens, and never under a reader.

The guard is reference counting: a mapping goes back to the pool only when the last array,
slice or numpy view of it dies. These tests keep a column of one decode alive while the next
decodes run and check that its bytes never change (with the guard removed, e.g. a mapping given
back when its batch is emitted, the next decode overwrites them); and that once a table is gone
the next decode does reuse its memory (the point of the pool).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from rlm.log import Compression, _recycle, encode_batch, read_arrow


def _segment(seed: int, batches: int = 40, records: int = 200) -> bytes:
    out = []
    for b in range(batches):
        recs = [
            (b"k%d-%d" % (seed, i), (b"%d:%d:%d|" % (seed, b, i)) * 40, [("h", b"%d" % seed)], 1000 + i)
            for i in range(records)
        ]
        out.append(encode_batch(recs, base_offset=b * records, compression=Compression.ZSTD))
    return b"".join(out)


@pytest.fixture
def pool() -> Iterator[_recycle.RecyclePool]:
    old = _recycle.POOL
    _recycle.POOL = _recycle.RecyclePool(256 << 20)
    try:
        yield _recycle.POOL
    finally:
        _recycle.POOL.clear()
        _recycle.POOL = old


def test_a_column_held_by_a_reader_is_never_reused(pool: _recycle.RecyclePool) -> None:
    first = read_arrow(_segment(1), topic="t", partition=0)
    values = first.column("value").combine_chunks()
    want = values.to_pylist()
    del first
    gc.collect()
    for seed in range(2, 6):  # decodes of other data while the reader still holds ``values``
        other = read_arrow(_segment(seed), topic="t", partition=0)
        assert other.column("value")[0].as_py().startswith(b"%d:" % seed)
        del other
        gc.collect()
    assert values.to_pylist() == want
    assert pool.created >= 2  # the held memory could not be lent: new mappings were made


def test_memory_of_a_dropped_table_is_reused(pool: _recycle.RecyclePool) -> None:
    data = _segment(7)
    expected = _dict(data)
    read_arrow(data, topic="t", partition=0)
    gc.collect()
    created = pool.created
    assert created >= 1 and pool.idle_bytes > 0  # the table above is gone: its mappings wait
    for _ in range(3):
        got = read_arrow(data, topic="t", partition=0)
        assert got.to_pydict() == expected
        del got
        gc.collect()
    assert pool.created == created  # nothing new was mapped
    assert pool.reused >= 3


def _dict(data: bytes) -> dict[str, list[object]]:
    """The same decode without recycling (Arrow's pool): the reference for content."""
    old = _recycle.POOL
    _recycle.POOL = _recycle.RecyclePool(0)
    try:
        table: dict[str, list[object]] = read_arrow(data, topic="t", partition=0).to_pydict()
        return table
    finally:
        _recycle.POOL = old


def test_idle_memory_stays_within_the_budget() -> None:
    small = _recycle.RecyclePool(4 << 20)
    arrays = [small.array(3 << 20) for _ in range(4)]
    for a in arrays:
        a[:] = 1
    del arrays, a
    gc.collect()
    assert small.idle_bytes <= 4 << 20
    small.clear()
    assert small.idle_bytes == 0


def test_arrow_buffers_keep_their_mapping_alive(pool: _recycle.RecyclePool) -> None:
    arr = _recycle.empty(4 << 20, pa.uint8().to_pandas_dtype())
    arr[:] = 5
    buf = pa.py_buffer(arr[:100])
    del arr
    gc.collect()
    assert pool.idle_bytes == 0  # the Arrow buffer still sees it
    again = _recycle.empty(4 << 20, pa.uint8().to_pandas_dtype())
    again[:] = 9
    assert bytes(buf) == b"\x05" * 100
    del buf, again
    gc.collect()
    assert pool.idle_bytes > 0


def test_a_lease_dying_while_its_thread_holds_the_pool_lock_does_not_deadlock() -> None:
    """A lease can die inside the garbage collector while the same thread holds the pool's lock
    (the collector runs on an allocation in ``_take``): the whole suite hung there once, in
    test_libzstd. Giving a mapping back never waits for the lock; it is kept at the next use."""
    import threading

    from rlm.log._recycle import RecyclePool

    pool = RecyclePool(64 << 20)
    outcome: list[int] = []

    def scenario() -> None:
        arr = pool.array(1 << 20)
        with pool._lock:  # what _take holds when the collector runs
            del arr  # the last reference: the lease dies here, in this thread
        outcome.append(pool.idle_bytes)
        pool.array(1 << 20)
        outcome.append(pool.reused)

    worker = threading.Thread(target=scenario, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "giving a mapping back waited for a lock its own thread held"
    assert outcome == [2 << 20, 1]  # kept as idle (one 2 MiB mapping), then handed out again


def _address(arr: object) -> int:
    root = arr
    while isinstance(getattr(root, "base", None), np.ndarray):
        root = root.base  # type: ignore[attr-defined]
    return int(root.base.lease.address)  # type: ignore[attr-defined]


def test_of_equal_idle_mappings_the_most_written_is_lent_first() -> None:
    """A decode's value buffer must get the warm mapping a former value buffer filled, not the
    one a small column barely touched (else most of it is faulted in and zeroed again)."""
    pool = _recycle.RecyclePool(64 << 20)
    little, much = pool.array(8 << 20, sparse=True), pool.array(8 << 20, sparse=True)
    little[: 1 << 20] = 1
    much[:] = 2
    _recycle.note_used(little, 1 << 20)
    _recycle.note_used(much, 8 << 20)
    warm = _address(much)
    del little, much
    gc.collect()
    again = pool.array(8 << 20, sparse=True)
    assert _address(again) == warm
    del again
    pool.clear()


def test_the_default_budget_follows_the_memory_of_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """An eighth of the memory limit, never below 256 MiB nor above 2 GiB (a whole-file read of a
    256 MB zstd segment builds ~1 GB of columns: with less kept, most of it is fresh memory again
    at every read)."""
    for limit, want in ((None, 256 << 20), (1 << 30, 256 << 20), (8 << 30, 1 << 30), (64 << 30, 2 << 30)):
        monkeypatch.setattr(_recycle, "_memory_limit", lambda limit=limit: limit)
        assert _recycle.default_budget() == want
    monkeypatch.setenv("RLM_DECODE_CACHE_MB", "0")
    assert _recycle._budget_from_env() == 0


def test_file_windows_reuse_memory_and_a_kept_slice_keeps_its_bytes(
    pool: _recycle.RecyclePool, tmp_path: Path
) -> None:
    """A file is read into a recycled mapping: the next read of a file reuses it (no fresh pages
    to fault in and zero), but never while a caller still holds a slice of the earlier one."""
    from rlm.log.source import open_source

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(_segment(1, batches=800))
    b.write_bytes(_segment(2, batches=800))
    assert a.stat().st_size >= _recycle.MIN_BYTES
    with open_source(a) as view:
        kept = view[100:200]
        want = bytes(kept)
    created = pool.created
    for _ in range(3):
        with open_source(b) as view:
            assert bytes(view[:50]) == b.read_bytes()[:50]
    assert bytes(kept) == want  # the mapping under ``kept`` was not lent to the reads of b
    assert pool.created == created + 1  # b's reads shared one new mapping
    del kept, view
    gc.collect()
    with open_source(a) as view:
        assert bytes(view[100:200]) == want
    assert pool.created == created + 1 and pool.reused >= 3
