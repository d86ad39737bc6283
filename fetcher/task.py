"""Scans of planned ranges where no metadata store is at hand (Spark executors, worker processes).

The driver plans with :class:`fetcher.RemoteFetcher` (lineage, dedup, gaps, trimming) and ships
each :class:`fetcher.ScanRange` — frozen dataclasses of remote segment metadata, picklable —
together with the storage plugin. :class:`RangeScanner` is the other half: the same
:class:`SegmentReader` and :class:`RemoteIndexCache` the core uses, over that plugin and a
scratch directory, decoding with :func:`fetcher.scan.scan_range`. Segment choice is never
re-done here: the range names its segment, and the next link only feeds read-ahead.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa

from fetcher.fetch import IsolationLevel
from fetcher.index_cache import DIR_NAME, RemoteIndexCache
from fetcher.planning import PartitionPlan, PlannedSegment
from fetcher.reader import ByteRateLimiter, ReadStats, SegmentReader
from fetcher.scan import ScanRange, scan_range
from rlm.config import ReadConfig
from rlm.log.txn_index import AbortedTxn
from rlm.types import TopicIdPartition
from rsm_plugins.api import RemoteStorageManager


class RangeScanner:
    """Decode planned :class:`ScanRange` objects through a storage plugin; thread-safe.

    ``work_dir`` holds the on-disk index cache; without one a private temporary directory is
    created and removed by :meth:`close`.
    """

    def __init__(self, rsm: RemoteStorageManager, *, work_dir: Path | None = None,
                 read: ReadConfig | None = None, index_cache_bytes: int = 256 << 20) -> None:
        rc = read or ReadConfig.model_validate({})
        self.read_config = rc
        self.rsm = rsm
        self._tmp = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="rlm-scan-")) if work_dir is None else work_dir
        self.stats = ReadStats()
        self.indexes = RemoteIndexCache(self.work_dir / DIR_NAME, index_cache_bytes, rsm.fetch_index,
                                        on_fetch=lambda _t, n: self.stats.add_index(n))
        self.reader = SegmentReader(rsm, chunk_bytes=rc.chunk_bytes, cache_bytes=rc.chunk_cache_bytes,
                                    read_ahead_chunks=rc.read_ahead_chunks, parallel_gets=rc.parallel_gets,
                                    read_ahead_bytes=rc.read_ahead_bytes,
                                    limiter=ByteRateLimiter(rc.fetch_max_bytes_per_second), stats=self.stats)
        self._lock = threading.Lock()
        self._closed = False

    def scan(self, tp: TopicIdPartition, rng: ScanRange, *, next_link: PlannedSegment | None = None,
             isolation: str | IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
             include_headers: bool = True, max_batch_rows: int = 65536,
             aborted: Sequence[AbortedTxn] | None = None) -> Iterator[pa.RecordBatch]:
        """Arrow batches (:data:`rlm.log.KAFKA_SCHEMA`) of ``rng`` in offset order.

        ``read_committed`` drops the records of ``aborted`` (the driver collected them over the
        whole plan and the frontier: an ABORT marker may sit segments later); without it, of
        the aborted transactions this link's and the next link's transaction indexes know.
        """
        links = (rng.link,) if next_link is None else (rng.link, next_link)
        plan = PartitionPlan(tp, links, (), ())
        yield from scan_range(plan, rng, self.reader, self.indexes, isolation=IsolationLevel.parse(isolation),
                              max_batch_rows=max_batch_rows,
                              include_headers=include_headers, aborted=aborted)

    def close(self) -> None:
        """Release the reader (the plugin stays open: its owner closes it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.reader.close()
        if self._tmp:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> RangeScanner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
