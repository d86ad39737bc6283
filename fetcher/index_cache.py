"""Remote segment indexes cached on local disk, as Kafka's ``RemoteIndexCache`` keeps them.

Layout (Kafka's): ``<dir>/<startOffset>_<segmentIdBase64>.index|.timeindex|.txnindex``, written
as ``.tmp`` then renamed, so a crash never leaves a half file under a real name. The cache is
bounded by total file bytes (``remote.log.index.file.cache.total.size.bytes``), evicts the least
recently used segment, is reloaded from disk after a restart, fetches an entry once however
many readers want it at the same time, and re-fetches a file that fails to parse.

Readers get parsed, in-memory index objects; eviction only removes files, so an entry is never
deleted under a reader (the reader keeps its objects, the next reader fetches again). A missing
remote transaction index is cached as an empty file, as Kafka does.

Several processes may share one directory (``rlm serve``, ``rlm fetch``, Spark executors on one
work dir). So: temporary files are named per process and write (``.<pid>-<random>.tmp``), and only
those older than ``stale_after_s`` are cleaned at start (younger ones may be another process's
write in progress), as are incomplete entries; a fetched entry is parsed from the bytes fetched,
not re-read from disk where another process may already have evicted it; a file that vanished is
fetched again, not an error; and the byte bound is kept for the directory as a whole: eviction
counts other processes' entries too (removing theirs oldest first, then ours least recently used).

A directory that cannot be used (read-only work dir, a file in its place, a full disk) does not
stop a read: the cache then keeps parsed entries in memory only, for this process (warning
``index_cache_off_disk`` once, naming the path and the reason), as a reader without a cache would.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import structlog

from rlm.errors import IndexFormatError, RemoteResourceNotFoundError
from rlm.log.offset_index import OffsetIndex, parse_offset_index
from rlm.log.time_index import TimeIndex, parse_time_index
from rlm.log.txn_index import AbortedTxn, parse_txn_index
from rlm.types import IndexType, RemoteLogSegmentMetadata

log = structlog.get_logger(__name__)

DIR_NAME = "remote-log-index-cache"
_SUFFIX = {IndexType.OFFSET: ".index", IndexType.TIMESTAMP: ".timeindex", IndexType.TRANSACTION: ".txnindex"}

FetchIndex = Callable[[RemoteLogSegmentMetadata, IndexType], BinaryIO]

#: a temporary file or an incomplete entry older than this is a crashed writer's leftover
STALE_AFTER_S = 600.0


@dataclass(frozen=True, slots=True)
class SegmentIndexes:
    """The three parsed indexes of one remote segment."""

    offset: OffsetIndex
    time: TimeIndex
    txn: tuple[AbortedTxn, ...]
    nbytes: int


def entry_stem(md: RemoteLogSegmentMetadata) -> str:
    """``<startOffset>_<segmentIdBase64>`` (Kafka's ``RemoteIndexCache`` file name stem)."""
    return f"{md.start_offset}_{md.remote_log_segment_id.id.text}"


class RemoteIndexCache:
    """Byte-bounded LRU of remote segment indexes on disk; thread-safe."""

    def __init__(self, directory: Path, max_bytes: int, fetch_index: FetchIndex,
                 on_fetch: Callable[[IndexType, int], None] | None = None,
                 stale_after_s: float = STALE_AFTER_S) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.stale_after_s = stale_after_s
        self._fetch_index = fetch_index
        self._on_fetch = on_fetch
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, SegmentIndexes] = OrderedDict()
        self._sizes: OrderedDict[str, int] = OrderedDict()  # stem -> bytes on disk, LRU order
        self._loading: dict[str, threading.Event] = {}
        self._total = 0
        self.hits = 0
        self.misses = 0
        self.on_disk = True  # False: the directory is unusable, entries live in memory only
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if not os.access(directory, os.W_OK | os.X_OK):
                raise PermissionError(13, "not writable by this user", str(directory))
            self._scan_existing()
        except OSError as e:
            self._off_disk(e)

    def _off_disk(self, e: OSError) -> None:
        """Keep going without the directory: entries stay in memory (bounded the same way)."""
        if self.on_disk:
            log.warning("index_cache_off_disk", dir=str(self.directory), error=e.strerror or str(e),
                        note="indexes are kept in memory for this process only")
        self.on_disk = False

    @property
    def total_bytes(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._sizes)

    def _scan_existing(self) -> None:
        """Adopt complete entries found on disk (a previous run's, or another process's); drop
        only stale ``.tmp``/``.deleted`` files and stale incomplete entries (a young one may be
        another process's write in progress)."""
        stale_before = time.time() - self.stale_after_s
        for p in self.directory.iterdir():
            if p.suffix in (".tmp", ".deleted"):
                with contextlib.suppress(FileNotFoundError):
                    if p.stat().st_mtime < stale_before:
                        p.unlink()
        on_disk = self._on_disk()
        for stem, (size, mtime, complete) in sorted(on_disk.items(), key=lambda kv: kv[1][1]):
            if complete:
                self._sizes[stem] = size
                self._total += size
            elif mtime < stale_before:
                self._remove_files(stem)
        self._evict()

    def _on_disk(self) -> dict[str, tuple[int, float, bool]]:
        """stem -> (bytes, newest mtime, all three files present) of every entry in the directory,
        whichever process wrote it; files removed meanwhile are skipped."""
        found: dict[str, tuple[int, float, int]] = {}
        with os.scandir(self.directory) as it:
            for e in it:
                stem, dot, suffix = e.name.rpartition(".")
                if not dot or f".{suffix}" not in _SUFFIX.values():
                    continue
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue
                size, mtime, files = found.get(stem, (0, 0.0, 0))
                found[stem] = (size + st.st_size, max(mtime, st.st_mtime), files + 1)
        return {stem: (size, mtime, files == len(_SUFFIX)) for stem, (size, mtime, files) in found.items()}

    def get(self, md: RemoteLogSegmentMetadata) -> SegmentIndexes:
        """The indexes of ``md``: from memory, from disk, or fetched once from remote storage."""
        stem = entry_stem(md)
        while True:
            with self._lock:
                entry = self._entries.get(stem)
                if entry is not None:
                    self._entries.move_to_end(stem)
                    self._sizes.move_to_end(stem)
                    self.hits += 1
                    return entry
                waiter = self._loading.get(stem)
                if waiter is None:
                    done = threading.Event()
                    self._loading[stem] = done
                    break
            waiter.wait()
        try:
            entry = self._load(md, stem)
            with self._lock:
                self._entries[stem] = entry
                if stem not in self._sizes:
                    self._sizes[stem] = entry.nbytes
                    self._total += entry.nbytes
                self._sizes.move_to_end(stem)
                self._evict(keep=stem)
            return entry
        finally:
            with self._lock:
                self._loading.pop(stem, None)
            done.set()

    def _load(self, md: RemoteLogSegmentMetadata, stem: str) -> SegmentIndexes:
        if self.on_disk and (stem in self._sizes or self._complete_on_disk(stem)):  # ours or another's
            try:
                return self._parse(md, stem, self._read_files(stem))
            except FileNotFoundError:
                log.info("index_cache_entry_gone", entry=stem)  # evicted by another process
                with self._lock:
                    self._total -= self._sizes.pop(stem, 0)
            except (IndexFormatError, OSError) as e:
                log.warning("index_cache_entry_corrupt", entry=stem, error=str(e))
                with self._lock:
                    self._total -= self._sizes.pop(stem, 0)
                self._remove_files(stem)
        self.misses += 1
        raw: dict[IndexType, bytes] = {}
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for index_type in _SUFFIX:
            raw[index_type] = self._fetch(md, index_type)
        if self.on_disk:
            self._store(stem, tag, raw)
        return self._parse(md, stem, raw)

    def _store(self, stem: str, tag: str, raw: dict[IndexType, bytes]) -> None:
        """Write one entry's files (temporary name, then rename); a file system that refuses
        (full, read-only) turns the cache off for this process instead of failing the read."""
        for index_type, suffix in _SUFFIX.items():
            tmp = self.directory / f"{stem}{suffix}.{tag}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(raw[index_type])
                os.replace(tmp, self.directory / f"{stem}{suffix}")
            except OSError as e:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                self._remove_files(stem)
                self._off_disk(e)
                return

    def _complete_on_disk(self, stem: str) -> bool:
        return all((self.directory / f"{stem}{s}").exists() for s in _SUFFIX.values())

    def _read_files(self, stem: str) -> dict[IndexType, bytes]:
        return {t: (self.directory / f"{stem}{s}").read_bytes() for t, s in _SUFFIX.items()}

    def _fetch(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        try:
            with self._fetch_index(md, index_type) as stream:
                data = stream.read()
        except RemoteResourceNotFoundError:
            if index_type is not IndexType.TRANSACTION:
                raise
            data = b""
        if self._on_fetch is not None:
            self._on_fetch(index_type, len(data))
        return data

    def _parse(self, md: RemoteLogSegmentMetadata, stem: str,
               raw: dict[IndexType, bytes]) -> SegmentIndexes:
        base = md.start_offset
        paths = {t: self.directory / f"{stem}{s}" for t, s in _SUFFIX.items()}
        offset = parse_offset_index(raw[IndexType.OFFSET], base, path=paths[IndexType.OFFSET])
        time_index = parse_time_index(raw[IndexType.TIMESTAMP], base, path=paths[IndexType.TIMESTAMP])
        txn = parse_txn_index(raw[IndexType.TRANSACTION], base_offset=base, path=paths[IndexType.TRANSACTION])
        if len(offset) and int(offset.positions[-1]) >= md.segment_size_in_bytes:
            raise IndexFormatError(
                f"offset index points at position {int(offset.positions[-1])}, past the segment's "
                f"{md.segment_size_in_bytes} bytes", path=paths[IndexType.OFFSET])
        return SegmentIndexes(offset, time_index, tuple(txn), sum(len(b) for b in raw.values()))

    def _evict(self, keep: str | None = None) -> None:
        """Drop entries until the directory is within the byte bound: other processes' entries
        first, oldest first (their readers keep their parsed copies in memory), then ours, least
        recently used first (caller holds the lock, or runs single-threaded at start-up)."""
        if not self.on_disk:
            while self._total > self.max_bytes and len(self._sizes) > 1:
                stem = next(s for s in self._sizes if s != keep)
                self._total -= self._sizes.pop(stem)
                self._entries.pop(stem, None)
            return
        on_disk = self._on_disk()
        for stem in [s for s in self._sizes if s not in on_disk and s != keep]:
            self._total -= self._sizes.pop(stem)  # removed by another process
            self._entries.pop(stem, None)
        disk_total = sum(size for size, _, _ in on_disk.values())
        busy = set(self._loading) | {keep}  # entries our own threads are writing now
        foreign = sorted((v[1], stem) for stem, v in on_disk.items()
                         if stem not in self._sizes and stem not in busy)
        for _, stem in foreign:
            if disk_total <= self.max_bytes:
                break
            self._remove_files(stem)
            disk_total -= on_disk[stem][0]
            log.debug("index_cache_evicted", entry=stem, owner="other")
        while (self._total > self.max_bytes or disk_total > self.max_bytes) and self._sizes:
            stem = next(iter(self._sizes))
            if stem == keep:
                if len(self._sizes) == 1:
                    return
                self._sizes.move_to_end(stem)
                continue
            size = self._sizes.pop(stem)
            self._total -= size
            disk_total -= on_disk[stem][0] if stem in on_disk else 0
            self._entries.pop(stem, None)
            self._remove_files(stem)
            log.debug("index_cache_evicted", entry=stem)

    def _remove_files(self, stem: str) -> None:
        if not self.on_disk:
            return
        for suffix in _SUFFIX.values():
            p = self.directory / f"{stem}{suffix}"
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                p.unlink()

    def invalidate(self, md: RemoteLogSegmentMetadata) -> None:
        """Forget ``md`` (its segment was deleted remotely)."""
        stem = entry_stem(md)
        with self._lock:
            self._entries.pop(stem, None)
            self._total -= self._sizes.pop(stem, 0)
            self._remove_files(stem)
