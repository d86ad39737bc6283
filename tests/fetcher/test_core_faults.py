"""The read core when things go wrong: truncated or deleted remote objects, corrupt or evicted
index cache entries, a full reader pool, timeouts, gaps, and metadata that grows while reading."""

from __future__ import annotations

import random
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from fetcher import RemoteFetcher
from fetcher.index_cache import DIR_NAME, RemoteIndexCache, entry_stem
from fetcher.pool import ReaderPool
from rlm.cli import main as cli_main
from rlm.errors import (
    FetchTimeoutError,
    ReaderBusyError,
    RemoteSegmentDeletedError,
    RemoteSegmentIncompleteError,
    RemoteStorageIntegrityError,
)
from rlm.exit_codes import ExitCode
from rlm.log.records import iter_batches
from rlm.types import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from rlmm.file import FileRemoteLogMetadataManager
from tests.fetcher._tiered import Tiered, tier


@pytest.fixture
def tiered(tmp_path: Path) -> Tiered:
    return tier(tmp_path)


@pytest.fixture
def fetcher(tiered: Tiered) -> Iterator[RemoteFetcher]:
    f = RemoteFetcher.from_config(tiered.config)
    yield f
    f.close()


def remote_log_of(tiered: Tiered, segment_id: str, suffix: str = ".log") -> Path:
    [path] = [p for p in tiered.remote_files(suffix) if segment_id in p.name]
    return path


def test_truncated_remote_object_is_an_integrity_error(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    plan = fetcher.plan("mixed", 0)
    link = plan.segments[2]
    path = remote_log_of(tiered, link.metadata.remote_log_segment_id.id.text)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    last_batch = list(iter_batches(data))[-1]
    sid = link.metadata.remote_log_segment_id.id.text
    # the local plugin checks sizes itself; other stores give our RemoteSegmentIncompleteError
    with pytest.raises(RemoteStorageIntegrityError, match=sid):
        fetcher.fetch("mixed", 0, last_batch.base_offset, max_bytes=1 << 20)
    with pytest.raises(RemoteStorageIntegrityError, match=sid):
        list(fetcher.scan("mixed", 0))
    first_ok = fetcher.fetch("mixed", 0, plan.segments[0].first, max_bytes=1000)
    assert first_ok.records  # the other segments still read


def test_deleted_remote_segment_is_a_retriable_error(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    link = fetcher.plan("mixed", 0).segments[1]
    fetcher.fetch("mixed", 0, link.first, max_bytes=100)  # indexes now cached
    remote_log_of(tiered, link.metadata.remote_log_segment_id.id.text).unlink()
    with pytest.raises(RemoteSegmentDeletedError) as e:
        fetcher.fetch("mixed", 0, link.first + 1, max_bytes=100)
    assert e.value.retriable


def test_index_cache_survives_restart_and_refetches_corrupt_entries(tiered: Tiered) -> None:
    with RemoteFetcher.from_config(tiered.config) as f:
        plan = f.plan("mixed", 0)
        for link in plan.segments:
            f.fetch("mixed", 0, link.first, max_bytes=100)
        assert f.stats.snapshot()["index_fetches"] == 3 * len(plan.segments)
    cache_dir = tiered.work / DIR_NAME
    names = sorted(p.name for p in cache_dir.iterdir())
    first = plan.segments[0].metadata
    assert f"{first.start_offset}_{first.remote_log_segment_id.id.text}.index" in names
    assert not [n for n in names if n.endswith(".tmp")]
    with RemoteFetcher.from_config(tiered.config) as f:
        for link in plan.segments:
            f.fetch("mixed", 0, link.first, max_bytes=100)
        assert f.stats.snapshot()["index_fetches"] == 0  # warm after a restart
    victim = cache_dir / f"{first.start_offset}_{first.remote_log_segment_id.id.text}.index"
    victim.write_bytes(b"\x01\x02\x03")  # not a multiple of 8: corrupt
    with RemoteFetcher.from_config(tiered.config) as f:
        r = f.fetch("mixed", 0, plan.segments[0].first + 5, max_bytes=100)
        assert r.records
        assert f.stats.snapshot()["index_fetches"] == 3  # that one entry fetched again
    assert len(victim.read_bytes()) % 8 == 0


def test_index_cache_bounded_under_concurrent_readers(tiered: Tiered) -> None:
    shutil.rmtree(tiered.work / DIR_NAME, ignore_errors=True)
    cfg = tiered.config.model_copy(update={"index_file_cache_total_size_bytes": 1})  # one entry at a time
    want = pa.Table.from_batches(list(RemoteFetcher.from_config(tiered.config).scan("mixed", 0)))
    by_offset = dict(zip(want.column("offset").to_pylist(), want.column("value").to_pylist(), strict=True))
    errors: list[BaseException] = []
    with RemoteFetcher.from_config(cfg) as f:
        plan = f.plan("mixed", 0)
        offsets = list(by_offset)

        def reader(seed: int) -> None:
            rnd = random.Random(seed)
            try:
                for _ in range(25):
                    off = rnd.choice(offsets)
                    r = f.fetch("mixed", 0, off, max_bytes=1, timeout_ms=30_000)
                    h = next(iter_batches(r.records))
                    assert h.base_offset <= off <= h.last_offset
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:1]
        assert len(f.indexes) <= 1
        assert f.stats.snapshot()["index_fetches"] > 3 * len(plan.segments)  # evictions happened
    files = list((tiered.work / DIR_NAME).iterdir())
    assert len(files) <= 3


def test_index_cache_single_flight(tmp_path: Path, tiered: Tiered, fetcher: RemoteFetcher) -> None:
    md = fetcher.plan("mixed", 0).segments[0].metadata
    calls = []
    gate = threading.Event()

    def slow_fetch(m, t):  # type: ignore[no-untyped-def]
        calls.append(t)
        gate.wait(5)
        return fetcher.rsm.fetch_index(m, t)

    cache = RemoteIndexCache(tmp_path / "cache", 1 << 20, slow_fetch)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get(md))) for _ in range(5)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert len(calls) == 3  # offset, time and txn index fetched once for five readers
    assert len({id(g) for g in got}) == 1


def test_reader_pool_busy_and_timeout() -> None:
    pool = ReaderPool(threads=1, max_pending=1, default_timeout_ms=50)
    release = threading.Event()
    try:
        running = pool.submit(lambda: release.wait(10))
        queued = pool.submit(lambda: 1)
        with pytest.raises(ReaderBusyError) as e:
            pool.submit(lambda: 2)
        assert e.value.retriable and pool.rejected == 1
        with pytest.raises((ReaderBusyError, FetchTimeoutError)):
            pool.run(lambda: 3)
        release.set()
        assert running.result(10) is True and queued.result(10) == 1
        blocker = threading.Event()
        with pytest.raises(FetchTimeoutError, match="within 50 ms"):
            pool.run(lambda: blocker.wait(10))
        blocker.set()
    finally:
        release.set()
        pool.close()


def test_gap_reads_the_next_batch_and_plan_reports_it(tiered: Tiered) -> None:
    with RemoteFetcher.from_config(tiered.config) as f:
        gone = f.plan("mixed", 0).segments[2]
    writer = FileRemoteLogMetadataManager.open(tiered.work / "metadata")
    try:
        sid = gone.metadata.remote_log_segment_id
        for state in (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                      RemoteLogSegmentState.DELETE_SEGMENT_FINISHED):
            writer.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(sid, 1, state, 1))
    finally:
        writer.close()
    with RemoteFetcher.from_config(tiered.config) as f:
        plan = f.plan("mixed", 0)
        assert plan.gaps == ((gone.first, gone.last),)
        r = f.fetch("mixed", 0, gone.first + 3, max_bytes=100)
        assert r.first_batch_offset == gone.last + 1
        rows = pa.Table.from_batches(list(f.scan("mixed", 0))).column("offset").to_pylist()
        assert not [o for o in rows if gone.first <= o <= gone.last]


def test_read_only_store_follows_new_segments(tmp_path: Path) -> None:
    t = tier(tmp_path)
    with RemoteFetcher.from_config(t.config) as f:
        before = f.plan("mixed", 0)
        writer = FileRemoteLogMetadataManager.open(t.work / "metadata")
        try:
            sid = before.segments[-1].metadata.remote_log_segment_id
            for state in (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                          RemoteLogSegmentState.DELETE_SEGMENT_FINISHED):
                writer.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(sid, 1, state, 1))
        finally:
            writer.close()
        gone = before.segments[-1].metadata
        f.fetch("mixed", 0, before.segments[-1].first)  # its indexes and chunks are cached now
        assert f.indexes.total_bytes > 0 and (entry_stem(gone) + ".index") in _cached(f)
        f.rlmm.refresh()  # type: ignore[attr-defined]
        f._invalidate(before.tp)
        after = f.plan("mixed", 0)
        assert len(after.segments) == len(before.segments) - 1
        assert after.log_end == before.segments[-1].first
        # the deleted segment's cache entries go with it (as Kafka's RemoteIndexCache removes them)
        assert not [n for n in _cached(f) if n.startswith(entry_stem(gone))]
        sid = str(gone.remote_log_segment_id.id)
        assert not [k for k in f.reader._chunks if k[0] == sid]


def _cached(f: RemoteFetcher) -> list[str]:
    return [p.name for p in f.indexes.directory.iterdir()]


class _ShortReads:
    """A storage plugin whose ranged reads silently return 100 bytes less (a lying store)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def fetch_log_segment(self, md, start, end=None):  # type: ignore[no-untyped-def]
        import io

        with self.inner.fetch_log_segment(md, start, end) as s:  # type: ignore[attr-defined]
            return io.BytesIO(s.read()[:-100])

    def read_log_segment_range(self, md, start, end):  # type: ignore[no-untyped-def]
        return self.inner.read_log_segment_range(md, start, end)[:-100]  # type: ignore[attr-defined]

    def read_log_segment_range_into(self, md, start, out):  # type: ignore[no-untyped-def]
        return max(0, self.inner.read_log_segment_range_into(md, start, out) - 100)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_short_range_read_is_never_silently_fewer_records(fetcher: RemoteFetcher) -> None:
    link = fetcher.plan("mixed", 0).segments[0]
    fetcher.reader.rsm = _ShortReads(fetcher.rsm)  # type: ignore[assignment]
    with pytest.raises(RemoteSegmentIncompleteError, match=r"expected \d+; the object is shorter"):
        fetcher.fetch("mixed", 0, link.first, max_bytes=1 << 20)
    with pytest.raises(RemoteSegmentIncompleteError):
        list(fetcher.scan("mixed", 0))


def test_missing_producer_snapshot_is_an_integrity_error(
    tiered: Tiered, fetcher: RemoteFetcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The remote LSO comes from the last segment's producer snapshot; without it the open
    transactions are unknown, which is an error naming the segment, not "none open"."""
    plan = fetcher.plan("mixed", 0)
    last = plan.segments[-1].metadata
    sid = last.remote_log_segment_id.id.text
    remote_log_of(tiered, sid, ".snapshot").unlink()
    with pytest.raises(RemoteStorageIntegrityError, match=sid):
        fetcher.last_stable_offset("mixed", 0)
    with pytest.raises(RemoteStorageIntegrityError, match=sid):
        fetcher.fetch("mixed", 0, plan.log_start, max_bytes=1000, isolation="read_committed")
    assert fetcher.fetch("mixed", 0, plan.log_start, max_bytes=1000).records  # read_uncommitted reads on
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({"work_dir": str(tiered.work)}))  # its local storage and metadata
    code = cli_main(["fetch", "--config", str(cfg), "--topic", "mixed", "--partition", "0",
                     "--offset", str(plan.log_start), "--count", "1", "--isolation", "read_committed"])
    assert code == ExitCode.FAILURE
    assert sid in capsys.readouterr().err
