"""Fast restart for the topic-backed manager: per-metadata-partition snapshots + committed offsets.

Files live in ``log.dir`` (written atomically by :mod:`rlmm.snapshot_files`): one snapshot per
metadata partition holding the cache image of its user partitions, and ``_rlmm_committed_offsets``
with lines ``<metadata partition> <offset>`` — the offset of the last record contained in that
partition's snapshot (the layout Kafka <= 3.6 used). On start a partition's snapshot is loaded
and consumption resumes at ``offset + 1``.

Snapshot and offsets file are two files, so a crash can leave them out of step. Each snapshot
therefore starts with its own header (magic, offset); it is used only when that offset equals
the committed one, otherwise — and when a file is missing, truncated or fails its CRC — the
partition is replayed from the beginning of the topic. Never a wrong state, at worst a slower
start.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import structlog

from rlm.errors import RlmError
from rlmm.cache import RemoteLogMetadataCache
from rlmm.snapshot_files import (
    read_committed_offsets,
    read_snapshot,
    remove_stale_temp_files,
    write_committed_offsets,
    write_snapshot,
)

log = structlog.get_logger(__name__)

_MAGIC = b"RLMMTOP1"
_HEADER = struct.Struct(">8sq")


class TopicSnapshotStore:
    """Reads and writes the snapshot files of one manager instance (one writer: its consumer)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        remove_stale_temp_files(directory)
        self._lock = threading.Lock()
        self._committed: dict[int, int] | None = None

    def committed_offsets(self) -> dict[int, int]:
        with self._lock:
            if self._committed is None:
                try:
                    self._committed = dict(read_committed_offsets(self.directory))
                except (OSError, RlmError, ValueError) as e:
                    log.warning("rlmm_committed_offsets_unreadable", dir=str(self.directory), error=str(e))
                    self._committed = {}
            return dict(self._committed)

    def load(self, mp: int, cache: RemoteLogMetadataCache) -> int | None:
        """Loads metadata partition ``mp`` into ``cache``; returns its offset, or None to replay."""
        committed = self.committed_offsets().get(mp)
        if committed is None:
            return None
        try:
            data = read_snapshot(self.directory, mp)
        except (OSError, RlmError, ValueError) as e:
            log.warning("rlmm_snapshot_unreadable", partition=mp, error=str(e))
            return None
        if data is None:
            log.warning("rlmm_snapshot_missing", partition=mp, committed_offset=committed)
            return None
        if len(data) < _HEADER.size:
            log.warning("rlmm_snapshot_corrupt", partition=mp, reason="short header")
            return None
        magic, offset = _HEADER.unpack_from(data)
        if magic != _MAGIC or offset != committed:
            log.warning("rlmm_snapshot_inconsistent", partition=mp, snapshot_offset=offset,
                        committed_offset=committed, magic=magic.hex())
            return None
        try:
            tps = cache.load_snapshot_bytes(data[_HEADER.size:])
        except RlmError as e:
            log.warning("rlmm_snapshot_corrupt", partition=mp, error=str(e))
            return None
        log.info("rlmm_snapshot_loaded", partition=mp, offset=offset, partitions=len(tps))
        return int(offset)

    def save(self, snapshots: dict[int, tuple[int, bytes]]) -> None:
        """Writes the snapshots (``mp -> (offset, cache bytes)``), then the committed offsets."""
        for mp, (offset, data) in sorted(snapshots.items()):
            write_snapshot(self.directory, mp, _HEADER.pack(_MAGIC, offset) + data)
        with self._lock:
            committed = dict(self._committed or {})
        if self._committed is None:
            committed = self.committed_offsets()
        committed.update({mp: off for mp, (off, _) in snapshots.items()})
        write_committed_offsets(self.directory, committed)
        with self._lock:
            self._committed = committed

