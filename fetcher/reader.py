"""Bounded range reads of remote segments: chunk cache, read-ahead, parallel ranged GETs.

Kafka asks storage for "from here to the end of the segment"; the read side always knows where
to stop (offset index + max bytes), so every GET here is a closed range. Reads the caller marks
sequential (scans, a consumer walking forward) go through an LRU of fixed, aligned chunks, with
the following chunks prefetched — past the segment's end into the next segment when the caller
names it — so a scan costs one GET per chunk. Random reads (a 1 MB fetch at some offset) fetch
just their range. Every read is checked complete: fewer bytes than asked, where the metadata says
the object has them, is :class:`RemoteSegmentIncompleteError`, never silently less data.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import structlog

from fetcher.get_pool import GetJob, GetPool, Priority
from fetcher.read_ahead import Extent, SequentialRead
from rlm.errors import (
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteSegmentDeletedError,
    RemoteSegmentIncompleteError,
)
from rlm.types import RemoteLogSegmentMetadata
from rsm_plugins.api import RemoteStorageManager

log = structlog.get_logger(__name__)


@dataclass
class ReadStats:
    """Counters of remote traffic; exported as metrics by the faces that serve HTTP."""

    get_requests: int = 0
    get_bytes: int = 0
    chunk_hits: int = 0
    chunk_misses: int = 0
    index_fetches: int = 0
    index_bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_get(self, nbytes: int) -> None:
        with self._lock:
            self.get_requests += 1
            self.get_bytes += nbytes

    def add_index(self, nbytes: int) -> None:
        with self._lock:
            self.index_fetches += 1
            self.index_bytes += nbytes

    def add_chunk(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.chunk_hits += 1
            else:
                self.chunk_misses += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"get_requests": self.get_requests, "get_bytes": self.get_bytes,
                    "chunk_hits": self.chunk_hits, "chunk_misses": self.chunk_misses,
                    "index_fetches": self.index_fetches, "index_bytes": self.index_bytes}


class ByteRateLimiter:
    """Token bucket over bytes/s (``remote.log.manager.fetch.max.bytes.per.second``), shared by
    all readers; a read larger than one second's budget waits proportionally."""

    def __init__(self, bytes_per_second: int) -> None:
        self.rate = bytes_per_second
        self._lock = threading.Lock()
        self._available = float(bytes_per_second)
        self._stamp = time.monotonic()

    @property
    def unlimited(self) -> bool:
        return self.rate >= 2**62

    def acquire(self, nbytes: int) -> None:
        if self.unlimited or nbytes <= 0:
            return
        with self._lock:
            now = time.monotonic()
            self._available = min(float(self.rate), self._available + (now - self._stamp) * self.rate)
            self._stamp = now
            self._available -= nbytes
            wait = -self._available / self.rate if self._available < 0 else 0.0
        if wait > 0:
            time.sleep(wait)


_ChunkKey = tuple[str, int]


class SegmentReader:
    """Reads byte ranges of remote ``.log`` objects through one storage plugin. Thread-safe."""

    def __init__(self, rsm: RemoteStorageManager, *, chunk_bytes: int, cache_bytes: int,
                 read_ahead_chunks: int, parallel_gets: int, limiter: ByteRateLimiter,
                 stats: ReadStats, read_ahead_bytes: int = 128 << 20) -> None:
        self.rsm = rsm
        self.chunk_bytes = chunk_bytes
        self.cache_bytes = cache_bytes
        self.read_ahead_chunks = read_ahead_chunks
        self.read_ahead_bytes = read_ahead_bytes  # a scan's budget (fetcher.read_ahead)
        self.limiter = limiter
        self.stats = stats
        self._lock = threading.Lock()
        self._chunks: OrderedDict[_ChunkKey, bytes] = OrderedDict()
        self._cached = 0
        self._inflight: dict[_ChunkKey, GetJob] = {}
        self._gets = GetPool(parallel_gets)  # what a reader waits for before read-ahead

    def close(self) -> None:
        self._gets.close()

    # ---- raw ranged GET --------------------------------------------------------------------
    def get_range(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object, checked complete against the metadata's size."""
        with self._ranged_get(md, start, end):
            data = self.rsm.read_log_segment_range(md, start, end - 1)
        self._check_complete(md, start, end, len(data))
        return data

    def get_range_into(self, md: RemoteLogSegmentMetadata, start: int, end: int, out: memoryview) -> None:
        """Bytes ``[start, end)`` received into ``out`` (``end - start`` bytes long): straight from
        the socket when the plugin has ``read_log_segment_range_into``; checked complete."""
        if len(out) != end - start:
            raise ValueError(f"buffer of {len(out)} bytes for a range of {end - start}")
        into: Callable[[RemoteLogSegmentMetadata, int, memoryview], int] | None = getattr(
            self.rsm, "read_log_segment_range_into", None)
        with self._ranged_get(md, start, end):
            if into is not None:
                got = into(md, start, out)
            else:
                data = self.rsm.read_log_segment_range(md, start, end - 1)
                got = min(len(data), len(out))
                out[:got] = data[:got]
                got = len(data)
        self._check_complete(md, start, end, got)

    @contextmanager
    def _ranged_get(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> Iterator[None]:
        """Range check, quota, and the plugin's errors as the read side's."""
        size = md.segment_size_in_bytes
        if start < 0 or end > size or start >= end:
            raise RemoteRangeError(f"{md.remote_log_segment_id}: range [{start}, {end}) outside the "
                                   f"segment's {size} bytes")
        self.limiter.acquire(end - start)
        try:
            yield
        except RemoteResourceNotFoundError as e:
            raise RemoteSegmentDeletedError(
                f"{md.remote_log_segment_id} (offsets {md.start_offset}..{md.end_offset}) is no longer "
                f"in remote storage: {e}") from e
        except RemoteRangeError as e:
            raise RemoteSegmentIncompleteError(
                f"{md.remote_log_segment_id}: object shorter than its metadata's {size} bytes "
                f"(range [{start}, {end}) refused: {e})") from e

    def _check_complete(self, md: RemoteLogSegmentMetadata, start: int, end: int, got: int) -> None:
        self.stats.add_get(got)
        if got != end - start:
            raise RemoteSegmentIncompleteError(
                f"{md.remote_log_segment_id} (offsets {md.start_offset}..{md.end_offset}): read "
                f"{got} bytes at position {start}, expected {end - start}; the object is shorter "
                f"than its metadata's {md.segment_size_in_bytes} bytes")

    # ---- a scan's read-ahead ---------------------------------------------------------------
    def sequential(self, extents: Sequence[Extent], budget_bytes: int | None = None) -> SequentialRead:
        """A scan's reader of ``extents`` in order, fetched ahead within ``budget_bytes``
        (default ``read_ahead_bytes``; 0: no read-ahead). Close it when the scan ends."""
        return SequentialRead(self, extents, self.read_ahead_bytes if budget_bytes is None else budget_bytes)

    def submit_get(self, fn: Callable[[], Any], priority: Priority) -> GetJob:
        return self._gets.submit(fn, priority)

    def promote_get(self, job: GetJob) -> None:
        self._gets.promote(job)

    # ---- chunked, cached reads -------------------------------------------------------------
    def read(self, md: RemoteLogSegmentMetadata, start: int, end: int, *, sequential: bool = False,
             next_md: RemoteLogSegmentMetadata | None = None) -> bytes:
        """Bytes ``[start, end)``. ``sequential`` reads go through the chunk cache with read-ahead
        (into ``next_md`` past this segment's end); others fetch just their range unless it is
        already cached."""
        end = min(end, md.segment_size_in_bytes)
        if start >= end:
            return b""
        first, last = start // self.chunk_bytes, (end - 1) // self.chunk_bytes
        if not sequential:
            cached = self._cached_range(md, start, end, first, last)
            if cached is not None:
                return cached
            return self.get_range(md, start, end)
        view = self.read_view(md, start, end, next_md=next_md)
        whole = view.obj
        return whole if isinstance(whole, bytes) and len(whole) == len(view) else view.tobytes()

    def read_view(self, md: RemoteLogSegmentMetadata, start: int, end: int, *,
                  next_md: RemoteLogSegmentMetadata | None = None) -> memoryview:
        """A sequential read of ``[start, end)`` as a read-only view (what scans decode).

        Within one chunk the view is the cached chunk itself — no copy, which is what lets a scan
        run at decode speed; across chunks only the asked bytes are copied, once.
        """
        end = min(end, md.segment_size_in_bytes)
        if start >= end:
            return memoryview(b"")
        first, last = start // self.chunk_bytes, (end - 1) // self.chunk_bytes
        futures = [self._chunk(md, i) for i in range(first, last + 1)]
        self._read_ahead(md, last, next_md)
        base = first * self.chunk_bytes
        if len(futures) == 1:
            return memoryview(futures[0].result())[start - base:end - base]
        parts = [memoryview(f.result()) for f in futures]
        lo, hi = start - base, end - last * self.chunk_bytes
        parts[0], parts[-1] = parts[0][lo:], parts[-1][:hi]
        return memoryview(b"".join(parts))

    def _cached_range(self, md: RemoteLogSegmentMetadata, start: int, end: int, first: int,
                      last: int) -> bytes | None:
        sid = str(md.remote_log_segment_id.id)
        with self._lock:
            parts = [self._chunks.get((sid, i)) for i in range(first, last + 1)]
            if any(p is None for p in parts):
                return None
            for i in range(first, last + 1):
                self._chunks.move_to_end((sid, i))
        self.stats.add_chunk(True)
        base = first * self.chunk_bytes
        views = [memoryview(p) for p in parts if p is not None]
        if len(views) == 1:
            return views[0][start - base:end - base].tobytes()
        views[0], views[-1] = views[0][start - base:], views[-1][:end - last * self.chunk_bytes]
        return b"".join(views)

    def _chunk(self, md: RemoteLogSegmentMetadata, index: int, *, ahead: bool = False) -> Future[bytes]:
        """The chunk's bytes (cached, in flight, or a GET now); ``ahead``: nobody waits for it yet."""
        key = (str(md.remote_log_segment_id.id), index)
        with self._lock:
            data = self._chunks.get(key)
            if data is not None:
                self._chunks.move_to_end(key)
                hit: Future[bytes] = Future()
                hit.set_result(data)
                self.stats.add_chunk(True)
                return hit
            job = self._inflight.get(key)
            if job is not None:
                if not ahead:
                    self._gets.promote(job)
                return job.future
            job = self._gets.submit(lambda: self._fetch_chunk(md, index, key),
                                    Priority.READ_AHEAD if ahead else Priority.DEMAND)
            self._inflight[key] = job
        self.stats.add_chunk(False)
        return job.future

    def _fetch_chunk(self, md: RemoteLogSegmentMetadata, index: int, key: _ChunkKey) -> bytes:
        try:
            start = index * self.chunk_bytes
            data = self.get_range(md, start, min(start + self.chunk_bytes, md.segment_size_in_bytes))
            with self._lock:
                if self.cache_bytes >= len(data):
                    self._chunks[key] = data
                    self._cached += len(data)
                    while self._cached > self.cache_bytes and self._chunks:
                        _, old = self._chunks.popitem(last=False)
                        self._cached -= len(old)
            return data
        finally:
            with self._lock:
                self._inflight.pop(key, None)

    def _read_ahead(self, md: RemoteLogSegmentMetadata, last: int,
                    next_md: RemoteLogSegmentMetadata | None) -> None:
        n = self.read_ahead_chunks
        if n <= 0 or self.cache_bytes < self.chunk_bytes * (n + 1):
            return
        total = -(-md.segment_size_in_bytes // self.chunk_bytes)
        for i in range(last + 1, min(total, last + 1 + n)):
            self._chunk(md, i, ahead=True)
            n -= 1
        if n > 0 and next_md is not None and next_md.segment_size_in_bytes > 0:
            total_next = -(-next_md.segment_size_in_bytes // self.chunk_bytes)
            for i in range(min(n, total_next)):
                self._chunk(next_md, i, ahead=True)

    def forget(self, md: RemoteLogSegmentMetadata) -> None:
        """Drop cached chunks of a deleted segment."""
        sid = str(md.remote_log_segment_id.id)
        with self._lock:
            for key in [k for k in self._chunks if k[0] == sid]:
                self._cached -= len(self._chunks.pop(key))
