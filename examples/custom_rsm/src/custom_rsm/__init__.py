"""An in-memory RemoteStorageManager: the smallest complete third-party storage plugin.

Segments live in a process-wide dictionary, one per ``namespace``; nothing survives the process.
A copy builds the whole file set first and publishes it with one dictionary assignment, so it is
all-or-nothing for readers without any cleanup code.

What the base class does for it: validating the config block with ``config_model`` (every bad
key reported at once, ``broker.id`` accepted), the "used before configure()" guard on
``self.config``, and pickling.
"""

from __future__ import annotations

import io
import threading
from typing import BinaryIO

from pydantic import Field

from rsm_plugins.api import (
    IndexType,
    LogSegmentData,
    PluginConfig,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    check_range,
)

_STORES: dict[str, dict[str, dict[str, bytes]]] = {}
_LOCK = threading.Lock()


class MemoryConfig(PluginConfig):
    namespace: str = Field("default", min_length=1, description="Segments of one namespace are shared.")
    max_segments: int = Field(1_000_000, ge=1, description="A copy beyond this many segments fails.")


class MemoryRemoteStorageManager(RemoteStorageManager[MemoryConfig]):
    plugin_name = "example-memory"
    config_model = MemoryConfig

    def on_configure(self, config: MemoryConfig) -> None:
        with _LOCK:
            _STORES.setdefault(config.namespace, {})

    @property
    def _store(self) -> dict[str, dict[str, bytes]]:
        with _LOCK:
            return _STORES.setdefault(self.config.namespace, {})

    @staticmethod
    def _key(md: RemoteLogSegmentMetadata) -> str:
        return md.remote_log_segment_id.id.text

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        try:
            files: dict[str, bytes] = {}
            for name, path in (
                ("OFFSET", segment_data.offset_index),
                ("TIMESTAMP", segment_data.time_index),
                ("TRANSACTION", segment_data.transaction_index),
                ("PRODUCER_SNAPSHOT", segment_data.producer_snapshot_index),
                ("SEGMENT", segment_data.log_segment),
            ):
                if path is not None:
                    with self.open_source(path) as f:
                        files[name] = f.read()
            files["LEADER_EPOCH"] = bytes(segment_data.leader_epoch_index)
        except OSError as e:
            self._store.pop(self._key(metadata), None)
            raise RemoteStorageError(
                f"copy of {metadata.remote_log_segment_id} failed: {e}", retriable=True
            ) from e
        store = self._store
        if len(store) >= self.config.max_segments and self._key(metadata) not in store:
            raise RemoteStorageError(f"namespace {self.config.namespace!r} is full", retriable=False)
        store[self._key(metadata)] = files  # one assignment: all or nothing
        return None

    def _file(self, md: RemoteLogSegmentMetadata, name: str) -> bytes:
        files = self._store.get(self._key(md))
        if files is None or name not in files:
            raise RemoteResourceNotFoundError(f"{name} of {md.remote_log_segment_id} not found")
        return files[name]

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        data = self._file(metadata, "SEGMENT")
        start, stop = check_range(start_position, end_position, len(data), f"memory:{self._key(metadata)}")
        return io.BytesIO(data[start:stop])

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        return io.BytesIO(self._file(metadata, index_type.name))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._store.pop(self._key(metadata), None)
