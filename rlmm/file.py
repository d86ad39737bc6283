"""Embedded RemoteLogMetadataManager for one machine without Kafka (the README demo's default).

Same interface and semantics as the topic-backed manager; durability comes from an append-only
log of the very records Kafka would put on ``__remote_log_metadata`` (:mod:`rlmm.file_log`,
fdatasync per write) plus periodic snapshots of the in-memory cache, so a restart loads the
snapshot and replays only the records after it. A corrupt or missing snapshot falls back to a
full replay. One process at a time: an exclusive ``flock`` on ``<dir>/.lock``; a second opener
gets :class:`~rlm.errors.MetadataUnavailableError`. Safe to use from several threads.

Configuration keys: ``dir`` (or ``log.dir``, then ``<log.dir>/remote_log_metadata``),
``snapshot.interval.records`` (default 100000), and Kafka's ``broker.id``/``cluster.id``, which
are accepted and ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import time
from collections.abc import Iterator, Mapping, Set
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlmm import snapshot_files
from rlmm.api import (
    ConfigError,
    MetadataDecodeError,
    MetadataUnavailableError,
    RemoteLogMetadataError,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.cache import RemoteLogMetadataCache
from rlmm.file_log import LOG_FILE, MAGIC, FrameLog, LogScan
from rlmm.serde import RemoteLogMetadata, deserialize, serialize

log = structlog.get_logger(__name__)

LOCK_FILE = ".lock"
SNAPSHOT_FILE = "metadata.snapshot"
_SNAP_HEADER = struct.Struct("<4sHQ")
_SNAP_MAGIC = b"RLMF"


class FileRlmmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    dir: Path | None = Field(None, description="Directory of the metadata log, snapshot and lock file.")
    log_dir: Path | None = Field(None, alias="log.dir", description="Kafka's first log dir (fallback).")
    snapshot_interval_records: int = Field(100_000, ge=1, alias="snapshot.interval.records")
    broker_id: int | None = Field(None, alias="broker.id")
    cluster_id: str | None = Field(None, alias="cluster.id")
    read_only: bool = Field(False, alias="read.only",
                            description="Open without the writer lock and follow the log as another "
                            "process (the daemon) appends to it: for the read side.")
    refresh_interval_ms: int = Field(500, ge=0, alias="refresh.interval.ms",
                                     description="Read-only mode: how often reads look for new records.")

    def directory(self) -> Path:
        if self.dir is not None:
            return self.dir
        if self.log_dir is not None:
            return self.log_dir / "remote_log_metadata"
        raise ConfigError("file metadata manager: set 'dir' (or 'log.dir')")


class FileRemoteLogMetadataManager(RemoteLogMetadataManager):
    """The embedded store. ``FileRemoteLogMetadataManager.open(dir)`` = construct + configure."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._cache = RemoteLogMetadataCache()
        self._log: FrameLog | None = None
        self._lock_fd: int | None = None
        self._closed = False
        self._dir: Path | None = None
        self._interval = 100_000
        self._since_snapshot = 0
        self._registered: set[TopicIdPartition] = set()
        self._read_only = False
        self._tail_pos = 0
        self._refresh_s = 0.5
        self._next_refresh = 0.0

    @classmethod
    def open(cls, directory: str | Path, **options: Any) -> FileRemoteLogMetadataManager:
        m = cls()
        m.configure({"dir": str(directory), **options})
        return m

    # ---- lifecycle ---------------------------------------------------------------------------------
    def configure(self, config: Mapping[str, Any]) -> None:
        try:
            cfg = FileRlmmConfig.model_validate(dict(config))
        except ValidationError as e:
            raise ConfigError(f"file metadata manager: {e}") from e
        with self._lock:
            if self._log is not None or self._closed:
                raise RemoteLogMetadataError("file metadata manager is already configured")
            self._dir = cfg.directory()
            self._interval = cfg.snapshot_interval_records
            if cfg.read_only:
                self._open_read_only(self._dir, cfg.refresh_interval_ms)
                return
            self._dir.mkdir(parents=True, exist_ok=True)
            self._acquire_lock(self._dir)
            try:
                self._recover(self._dir)
            except BaseException:
                self._release_lock()
                raise

    def _open_read_only(self, directory: Path, refresh_ms: int) -> None:
        """Load snapshot + log without taking the writer's lock; later reads tail the log."""
        if not directory.is_dir():
            raise MetadataUnavailableError(f"{directory}: no metadata store here (read-only open)")
        log_path = directory / LOG_FILE
        size = log_path.stat().st_size if log_path.exists() else 0
        self._tail_pos = self._load_snapshot(directory, size)
        self._read_only = True
        self._refresh_s = refresh_ms / 1000
        self._replay_tail()
        log.info("rlmm_file_store_opened_read_only", dir=str(directory), segments=self._cache.segment_count())

    def _replay_tail(self) -> None:
        assert self._dir is not None
        log_path = self._dir / LOG_FILE
        if not log_path.exists():
            return
        scan = LogScan(log_path, self._tail_pos)
        try:
            for pos, payload in scan:
                try:
                    md = deserialize(payload, offset=pos, source=str(log_path))
                except MetadataDecodeError as e:
                    log.error("rlmm_record_undecodable", path=str(log_path), position=pos, error=str(e))
                    continue
                self._cache.apply(md)
        except MetadataDecodeError as e:
            log.warning("rlmm_read_only_tail_unreadable", path=str(log_path), error=str(e))
        self._tail_pos = max(self._tail_pos, scan.end)  # a torn tail is re-read on the next refresh

    def refresh(self) -> None:
        """Read-only mode: apply records appended since the last look (no-op for the writer)."""
        with self._lock:
            if self._read_only and not self._closed:
                self._replay_tail()
                self._next_refresh = time.monotonic() + self._refresh_s

    def _acquire_lock(self, directory: Path) -> None:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise MetadataUnavailableError(
                f"{directory}: metadata store is locked by another process (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load_snapshot(self, directory: Path, log_size: int) -> int:
        """Loads the snapshot if usable; returns the log position to replay from."""
        path = directory / SNAPSHOT_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return len(MAGIC)
        try:
            if len(data) < _SNAP_HEADER.size:
                raise MetadataDecodeError("snapshot file shorter than its header", source=str(path))
            magic, version, position = _SNAP_HEADER.unpack_from(data)
            if magic != _SNAP_MAGIC or version != 1:
                raise MetadataDecodeError(f"unknown snapshot header {magic!r} v{version}", source=str(path))
            if position < len(MAGIC) or position > log_size:
                raise MetadataDecodeError(
                    f"snapshot covers log position {position}, log has {log_size} bytes", source=str(path))
            self._cache.load_snapshot_bytes(data[_SNAP_HEADER.size:])
        except MetadataDecodeError as e:
            log.warning("rlmm_snapshot_unusable", path=str(path), error=str(e))
            self._cache = RemoteLogMetadataCache()
            return len(MAGIC)
        return int(position)

    def _recover(self, directory: Path) -> None:
        snapshot_files.remove_stale_temp_files(directory)
        log_path = directory / LOG_FILE
        size = log_path.stat().st_size if log_path.exists() else 0
        start = self._load_snapshot(directory, size)
        scan = LogScan(log_path, start)
        replayed = skipped = 0
        if log_path.exists():
            for pos, payload in scan:
                try:
                    md = deserialize(payload, offset=pos, source=str(log_path))
                except MetadataDecodeError as e:
                    log.error("rlmm_record_undecodable", path=str(log_path), position=pos, error=str(e))
                    skipped += 1
                    continue
                self._cache.apply(md)
                replayed += 1
        if scan.torn_at is not None:
            log.warning("rlmm_log_torn_tail_dropped", path=str(log_path), position=scan.torn_at,
                        dropped_bytes=size - scan.torn_at)
        self._log = FrameLog.open(log_path, scan.end if size >= len(MAGIC) else None)
        self._since_snapshot = replayed
        log.info("rlmm_file_store_opened", dir=str(directory), snapshot_position=start, replayed=replayed,
                 skipped=skipped, segments=self._cache.segment_count())
        if replayed >= self._interval:
            self._write_snapshot()

    def _write_snapshot(self) -> None:
        assert self._log is not None and self._dir is not None
        body = self._cache.to_snapshot_bytes()
        snapshot_files.atomic_write(self._dir / SNAPSHOT_FILE,
                                    _SNAP_HEADER.pack(_SNAP_MAGIC, 1, self._log.end) + body)
        self._since_snapshot = 0
        log.info("rlmm_snapshot_written", dir=str(self._dir), position=self._log.end, bytes=len(body))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._log is not None and self._since_snapshot:
                    self._write_snapshot()
            finally:
                if self._log is not None:
                    self._log.close()
                    self._log = None
                self._release_lock()

    # ---- writes ----------------------------------------------------------------------------------
    def _store(self, md: RemoteLogMetadata) -> None:
        with self._lock:
            if self._read_only:
                raise RemoteLogMetadataError(f"{self._dir}: the metadata store is open read-only")
            if self._log is None:
                raise RemoteLogMetadataError("file metadata manager is " + ("closed" if self._closed
                                                                             else "not configured"))
            self._cache.validate(md)
            self._log.append(serialize(md))
            self._cache.apply(md)
            self._since_snapshot += 1
            if self._since_snapshot >= self._interval:
                try:
                    self._write_snapshot()
                except OSError as e:  # the record is durable; a later snapshot will catch up
                    log.error("rlmm_snapshot_failed", dir=str(self._dir), error=str(e))

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        self._store(md)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._store(update)

    def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        self._store(md)

    # ---- reads and registration ------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._read_only and not self._closed:
            if time.monotonic() >= self._next_refresh:
                self.refresh()
            return
        if self._log is None:
            raise RemoteLogMetadataError("file metadata manager is " + ("closed" if self._closed
                                                                         else "not configured"))

    def remote_log_segment_metadata(self, tp: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        self._check_open()
        return self._cache.remote_log_segment_metadata(tp, leader_epoch, offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        self._check_open()
        return self._cache.highest_offset_for_epoch(tp, leader_epoch)

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        self._check_open()
        return self._cache.list_remote_log_segments(tp, leader_epoch)

    def remote_partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        self._check_open()
        return self._cache.remote_partition_delete_state(tp)

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        self._check_open()
        return self._cache.remote_log_size(tp, leader_epoch)

    def on_partition_leadership_changes(self, leaders: Set[TopicIdPartition],
                                        followers: Set[TopicIdPartition]) -> None:
        """Bookkeeping only: the embedded store always holds every partition's state."""
        self._check_open()
        with self._lock:
            self._registered |= set(leaders) | set(followers)

    def known_partitions(self) -> set[TopicIdPartition]:
        self._check_open()
        return self._cache.partitions()

    def on_stopped_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        """Bookkeeping only: the state stays (it is durable here and nothing needs re-reading)."""
        self._check_open()
        with self._lock:
            self._registered -= set(partitions)

    @property
    def cache(self) -> RemoteLogMetadataCache:
        """The in-memory state (read-only use: tools, benchmarks)."""
        return self._cache

    def snapshot_now(self) -> None:
        """Writes a snapshot immediately (tests, benchmarks, before a planned restart)."""
        with self._lock:
            self._check_open()
            self._write_snapshot()
