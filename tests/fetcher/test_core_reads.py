"""The read core against a standalone tiered partition (local storage + file metadata store).

Every answer is compared with the local partition directory the daemon tiered, read by
``rlm.log`` (whose readers are checked against a real broker's files in tests/log_*).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pyarrow as pa
import pytest

from fetcher import RemoteFetcher
from rlm.errors import (
    FencedLeaderEpochError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from rlm.log.lookup import find_offset_for_timestamp
from rlm.log.records import iter_batches
from tests.fetcher._tiered import Tiered, tier


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Tiered:
    return tier(tmp_path_factory.mktemp("reads"))


@pytest.fixture
def fetcher(tiered: Tiered) -> Iterator[RemoteFetcher]:
    f = RemoteFetcher.from_config(tiered.config)
    yield f
    f.close()


def rows(table: pa.Table) -> list[tuple[int, bytes | None, bytes | None, int]]:
    return list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist(), table.column("timestamp").cast(pa.int64()).to_pylist(),
                    strict=True))


def test_plan_covers_exactly_the_tiered_segments(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    plan = fetcher.plan("mixed", 0)
    segs = tiered.tiered_segments()
    assert [link.first for link in plan.segments] == [s.base_offset for s in segs]
    assert plan.log_start == 0
    assert plan.log_end == tiered.local_records()[-1][0] + 1 or plan.log_end > tiered.local_records()[-1][0]
    assert plan.gaps == ()
    assert [e for e, _ in plan.lineage] == [0, 4]
    assert dict(plan.lineage)[4] == tiered.epoch_change_offset
    assert set(fetcher.topics()) == {"mixed"}


def test_scan_returns_every_record(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    table = pa.Table.from_batches(list(fetcher.scan("mixed", 0)))
    assert rows(table) == tiered.local_records()
    assert table.column("topic").unique().to_pylist() == ["mixed"]
    headers = table.column("headers").to_pylist()
    assert headers[0] == [{"key": "h", "value": b"0"}]


def test_scan_read_committed_drops_aborted(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    lso = fetcher.last_stable_offset("mixed", 0)
    committed = [r for r in tiered.local_committed() if r[0] < lso]
    assert len(committed) < len(tiered.local_records())
    table = pa.Table.from_batches(list(fetcher.scan("mixed", 0, isolation="read_committed")))
    assert rows(table) == committed


def test_scan_sub_range_and_timestamps(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    recs = tiered.local_records()
    lo, hi = recs[100][0], recs[2000][0]
    table = pa.Table.from_batches(list(fetcher.scan("mixed", 0, start_offset=lo, end_offset=hi)))
    assert rows(table) == [r for r in recs if lo <= r[0] < hi]
    ts = recs[1500][3]
    first = fetcher.offset_for_timestamp("mixed", 0, ts)
    assert first is not None
    table = pa.Table.from_batches(list(fetcher.scan("mixed", 0, start_timestamp=ts)))
    data_offsets = [r[0] for r in recs if r[0] >= first.offset]
    assert table.column("offset")[0].as_py() == data_offsets[0]  # the answer may be a control record
    assert all(r[0] >= first.offset for r in rows(table))
    assert {r[0] for r in recs if r[3] >= ts} <= {r[0] for r in rows(table)}  # KIP-33 guarantee


def test_fetch_walk_reproduces_the_segment_bytes(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    plan = fetcher.plan("mixed", 0)
    off, data = plan.log_start, b""
    while off < plan.log_end:
        r = fetcher.fetch("mixed", 0, off, max_bytes=7000)
        assert r.records, off
        assert r.log_start == plan.log_start and r.log_end == plan.log_end
        data += r.records
        off = r.next_offset
    assert data == tiered.local_bytes()


def test_fetch_first_batch_whole_and_min_one_message(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    seg = tiered.tiered_segments()[1]
    batches = list(iter_batches(seg.log_path))
    h = batches[3]
    inside = h.base_offset + (h.last_offset - h.base_offset) // 2
    r = fetcher.fetch("mixed", 0, inside, max_bytes=1)
    assert r.first_batch_offset == h.base_offset
    assert r.records == seg.log_path.read_bytes()[h.position:h.end_position]
    assert r.next_offset == h.next_offset
    empty = fetcher.fetch("mixed", 0, inside, max_bytes=1, min_one_message=False)
    assert empty.records == b"" and empty.next_offset == inside
    raw = fetcher.fetch("mixed", 0, h.base_offset, max_bytes=h.size + 100, raw_tail=True)
    assert len(raw.records) == h.size + 100
    assert raw.records == seg.log_path.read_bytes()[h.position:h.position + h.size + 100]


def test_fetch_read_committed_aborted_transactions(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    segs = tiered.tiered_segments()
    aborted_batches = [h for s in segs for h in iter_batches(s.log_path)
                       if h.is_transactional and not h.is_control
                       and h.base_offset not in {r[0] for r in tiered.local_committed()}]
    assert aborted_batches
    h = aborted_batches[0]
    r = fetcher.fetch("mixed", 0, h.base_offset, max_bytes=4096, isolation="read_committed")
    assert r.aborted_transactions is not None
    assert (h.producer_id, h.base_offset) in {(a.producer_id, a.first_offset) for a in r.aborted_transactions}
    plain = fetcher.fetch("mixed", 0, h.base_offset, max_bytes=4096)
    assert plain.aborted_transactions is None
    dropped = fetcher.fetch("mixed", 0, h.base_offset, max_bytes=20000, isolation="read_committed",
                            drop_aborted=True)
    kept = list(iter_batches(dropped.records))
    assert all(not k.is_control for k in kept)
    assert h.base_offset not in {k.base_offset for k in kept}


def test_offsets_for_timestamps_match_the_local_log(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    recs = tiered.local_records()
    plan = fetcher.plan("mixed", 0)
    candidates = sorted({r[3] for r in recs[::97]} | {recs[0][3] - 1, max(r[3] for r in recs) + 1})
    for ts in candidates:
        local = find_offset_for_timestamp(tiered.pdir, ts)
        remote = fetcher.offset_for_timestamp("mixed", 0, ts)
        if local is None or local.offset >= plan.log_end:
            assert remote is None, ts
        else:
            assert remote is not None, ts
            assert (remote.offset, remote.timestamp) == (local.offset, local.timestamp), ts
            assert remote.source == "remote"
    earliest = fetcher.offset_for_timestamp("mixed", 0, -2)
    latest = fetcher.offset_for_timestamp("mixed", 0, -1)
    assert earliest is not None and latest is not None
    assert (earliest.offset, latest.offset) == (plan.log_start, plan.log_end)


def test_out_of_range_and_unknown(fetcher: RemoteFetcher) -> None:
    plan = fetcher.plan("mixed", 0)
    with pytest.raises(OffsetOutOfRangeError) as e:
        fetcher.fetch("mixed", 0, plan.log_end)
    assert (e.value.log_start, e.value.log_end) == (plan.log_start, plan.log_end)
    with pytest.raises(OffsetOutOfRangeError):
        fetcher.fetch("mixed", 0, -1)
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        fetcher.fetch("nope", 0, 0)
    with pytest.raises(UnknownTopicOrPartitionError, match="mixed-7"):
        fetcher.fetch("mixed", 7, 0)


def test_leader_epoch_fencing(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    change = tiered.epoch_change_offset
    assert fetcher.fetch("mixed", 0, change - 1, leader_epoch=0).records
    assert fetcher.fetch("mixed", 0, change, leader_epoch=0).records  # at the epoch's end: continues
    with pytest.raises(FencedLeaderEpochError, match="epoch 0 ended at offset"):
        fetcher.fetch("mixed", 0, change + 1, leader_epoch=0)
    assert fetcher.fetch("mixed", 0, change + 1, leader_epoch=4).records
    with pytest.raises(UnknownLeaderEpochError):
        fetcher.fetch("mixed", 0, 0, leader_epoch=9)


def test_fetch_continues_across_segment_boundaries_sequentially(tiered: Tiered) -> None:
    shutil.rmtree(tiered.work / "remote-log-index-cache", ignore_errors=True)
    with RemoteFetcher.from_config(tiered.config) as f:
        plan = f.plan("mixed", 0)
        off, n = plan.log_start, 0
        while off < plan.log_end:
            r = f.fetch("mixed", 0, off, max_bytes=2048, sequential=True)
            off, n = r.next_offset, n + 1
        stats = f.stats.snapshot()
    size = sum(link.metadata.segment_size_in_bytes for link in plan.segments)
    chunks_needed = sum(-(-link.metadata.segment_size_in_bytes // f.read_config.chunk_bytes)
                        for link in plan.segments)
    assert stats["get_bytes"] == size  # each byte fetched once: chunks cached and read ahead
    assert stats["get_requests"] == chunks_needed < n
    assert stats["index_fetches"] == 3 * len(plan.segments)


def test_scan_with_small_chunks_cuts_batches_and_reads_them_whole(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Scans decode each cached chunk in place; a batch cut by a chunk end is read whole on its own.
    4 KiB chunks cut most batches of the mixed partition (every codec, transactions)."""
    small = tier(tmp_path_factory.mktemp("small-chunks"), chunk_bytes=4096, chunk_cache_bytes=64 * 1024)
    with RemoteFetcher.from_config(small.config) as f:
        table = pa.Table.from_batches(list(f.scan("mixed", 0)))
        stats = f.stats.snapshot()
        committed = pa.Table.from_batches(list(f.scan("mixed", 0, isolation="read_committed")))
        sizes = [link.metadata.segment_size_in_bytes for link in f.plan("mixed", 0).segments]
    assert rows(table) == small.local_records()
    assert rows(committed) == small.local_committed()
    assert stats["get_bytes"] == sum(sizes)  # every chunk fetched once, cut batches from the cache


@pytest.mark.parametrize("max_bytes", [1, 3000, 9000, 70_000])
def test_sequential_fetches_across_small_chunks_equal_exact_range_fetches(
        tmp_path_factory: pytest.TempPathFactory, max_bytes: int) -> None:
    """A sequential Fetch walks views of cached chunks and reads only the batches cut by a chunk's
    end across it: with 4 KiB chunks (most batches cut) every answer — records, next offset,
    aborted transactions — equals the exact-range read's, and together they are the segments."""
    small = tier(tmp_path_factory.mktemp(f"seq-{max_bytes}"), chunk_bytes=4096, chunk_cache_bytes=1 << 20)
    with RemoteFetcher.from_config(small.config) as f:
        plan = f.plan("mixed", 0)
        for isolation in ("read_uncommitted", "read_committed"):
            off, data = plan.log_start, b""
            while off < plan.log_end:
                seq = f.fetch("mixed", 0, off, max_bytes=max_bytes, isolation=isolation, sequential=True)
                exact = f.fetch("mixed", 0, off, max_bytes=max_bytes, isolation=isolation)
                views = f.fetch("mixed", 0, off, max_bytes=max_bytes, isolation=isolation, sequential=True,
                                as_views=True)
                assert (seq.records, seq.next_offset, seq.aborted_transactions) == (
                    exact.records, exact.next_offset, exact.aborted_transactions), (isolation, off)
                assert views.records == b"" and views.views is not None and views.size == seq.size
                assert (bytes(views.views), views.next_offset, views.aborted_transactions) == (
                    seq.records, seq.next_offset, seq.aborted_transactions), (isolation, off)
                assert list(views.data_records()) == list(seq.data_records())
                # consecutive batches of one cached chunk are one view, not one per batch
                assert len(views.views.parts) <= 2 * (len(seq.records) // 4096 + 1) + 1
                assert seq.records, off
                data += seq.records
                off = seq.next_offset
            assert data == small.local_bytes()


def test_reads_of_cached_chunks_return_exactly_the_range(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Random reads answered from the chunk cache, and sequential views, within and across chunks."""
    small = tier(tmp_path_factory.mktemp("cached-ranges"), chunk_bytes=4096, chunk_cache_bytes=1 << 20)
    with RemoteFetcher.from_config(small.config) as f:
        md = f.plan("mixed", 0).segments[0].metadata
        local = small.tiered_segments()[0].log_path.read_bytes()
        assert f.reader.read(md, 0, len(local), sequential=True) == local  # every chunk now cached
        before = f.stats.snapshot()["get_requests"]
        for lo, hi in ((100, 200), (4000, 4200), (4096, 8192), (5000, 13000), (0, len(local))):
            assert f.reader.read(md, lo, hi) == local[lo:hi], (lo, hi)
            assert bytes(f.reader.read_view(md, lo, hi)) == local[lo:hi], (lo, hi)
        assert f.stats.snapshot()["get_requests"] == before


def test_public_surface_list_offset_counters_and_data_records(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    """What faces use instead of the core's parts: one ListOffsets answer, counters, one batch walker."""
    from fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

    plan = fetcher.plan("mixed", 0)
    earliest = fetcher.list_offset("mixed", 0, EARLIEST_TIMESTAMP)
    assert earliest is not None and earliest.offset == plan.log_start
    latest = fetcher.list_offset("mixed", 0, LATEST_TIMESTAMP)
    assert latest is not None and (latest.offset, latest.leader_epoch) == (plan.log_end, plan.latest_epoch)
    committed = fetcher.list_offset("mixed", 0, LATEST_TIMESTAMP, isolation="read_committed")
    assert committed is not None and committed.offset == fetcher.last_stable_offset("mixed", 0)
    assert fetcher.list_offset("mixed", 0, -3) is None  # max-timestamp: no remote answer
    want = tiered.local_records()
    mid = want[len(want) // 2]
    by_time = fetcher.list_offset("mixed", 0, mid[3])
    assert by_time is not None
    assert by_time.offset == fetcher.offset_for_timestamp("mixed", 0, mid[3]).offset  # type: ignore[union-attr]

    start = want[5][0] + 1  # inside a batch: records before it in the batch are left out
    got: list[tuple[int, bytes | None, bytes | None, int]] = []
    offset = start
    while offset < plan.log_end:
        r = fetcher.fetch("mixed", 0, offset, max_bytes=64 * 1024)
        got += [(rec.offset, rec.key, rec.value, rec.timestamp) for _h, rec in r.data_records(start)]
        offset = r.next_offset
    assert got == [w for w in want if w[0] >= start]

    before = fetcher.counters()
    assert fetcher.run_bounded(lambda: 42, what="a unit of work") == 42
    after = fetcher.counters()
    assert after["get_requests"] >= before["get_requests"] > 0
    assert after["pool_capacity"] == fetcher.read_capacity > 0
    assert {"index_cache_hits", "index_cache_misses", "pool_rejected", "pool_timeouts"} <= set(after)
