"""An in-memory RemoteStorageManager: the smallest complete third-party storage plugin.

Segments live in a process-wide dictionary, one per ``namespace``; nothing survives the process.
A copy builds the whole file set first and publishes it with one dictionary assignment, so it is
all-or-nothing for readers without any cleanup code.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, ValidationError

from rsm_plugins.api import (
    ConfigError,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)
from rsm_plugins.streams import check_range

_STORES: dict[str, dict[str, dict[str, bytes]]] = {}
_LOCK = threading.Lock()


class MemoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    namespace: str = "default"
    broker_id: int | None = None


class MemoryRemoteStorageManager(RemoteStorageManager):
    plugin_name = "example-memory"

    def __init__(self) -> None:
        self.namespace = "default"

    def configure(self, config: Mapping[str, Any]) -> None:
        try:
            cfg = MemoryConfig.model_validate({k.replace(".", "_"): v for k, v in config.items()})
        except ValidationError as e:
            raise ConfigError(
                f"example-memory plugin: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}"
            ) from None
        self.namespace = cfg.namespace
        with _LOCK:
            _STORES.setdefault(self.namespace, {})

    @property
    def _store(self) -> dict[str, dict[str, bytes]]:
        with _LOCK:
            return _STORES.setdefault(self.namespace, {})

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
        self._store[self._key(metadata)] = files  # one assignment: all or nothing
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
