"""An in-memory RemoteLogMetadataManager: the smallest complete third-party metadata manager.

State lives in a process-wide dictionary of :class:`rlmm.RemoteLogMetadataCache` (which carries
Kafka's lookup semantics and validates every state transition), one per ``namespace``, so a new
instance on the same namespace sees what an earlier one wrote, as after a restart. Nothing
survives the process: useful for tests and as a template, not for production.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Set
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlmm import RemoteLogMetadataCache
from rlmm.api import (
    ConfigError,
    RemoteLogMetadataError,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

_CACHES: dict[str, RemoteLogMetadataCache] = {}
_LOCK = threading.RLock()


class MemoryRlmmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    namespace: str = Field("default", min_length=1)
    broker_id: int | None = Field(None, alias="broker.id")  # Kafka passes it to every manager


class MemoryRemoteLogMetadataManager(RemoteLogMetadataManager):
    def __init__(self) -> None:
        self._cache: RemoteLogMetadataCache | None = None
        self._closed = False

    def configure(self, config: Mapping[str, Any]) -> None:
        try:
            cfg = MemoryRlmmConfig.model_validate(dict(config))
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
            raise ConfigError(f"example-memory metadata manager: {problems}") from None
        with _LOCK:
            self._cache = _CACHES.setdefault(cfg.namespace, RemoteLogMetadataCache())

    @property
    def cache(self) -> RemoteLogMetadataCache:
        if self._cache is None or self._closed:
            raise RemoteLogMetadataError(
                "example-memory metadata manager is " + ("closed" if self._closed else "not configured")
            )
        return self._cache

    def _store(self, md: Any) -> None:
        with _LOCK:
            cache = self.cache
            cache.validate(md)  # invalid transitions raise and change nothing
            cache.apply(md)

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        self._store(md)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._store(update)

    def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        self._store(md)

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        with _LOCK:
            return self.cache.remote_log_segment_metadata(tp, leader_epoch, offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        with _LOCK:
            return self.cache.highest_offset_for_epoch(tp, leader_epoch)

    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        with _LOCK:
            return iter(list(self.cache.list_remote_log_segments(tp, leader_epoch)))

    def remote_partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        with _LOCK:
            return self.cache.remote_partition_delete_state(tp)

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        with _LOCK:
            return self.cache.remote_log_size(tp, leader_epoch)

    def on_partition_leadership_changes(
        self, leaders: Set[TopicIdPartition], followers: Set[TopicIdPartition]
    ) -> None:
        _ = self.cache  # everything is in memory already

    def on_stopped_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        _ = self.cache

    def close(self) -> None:
        self._closed = True
