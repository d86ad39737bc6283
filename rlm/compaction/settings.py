"""The topic and cleaner settings remote compaction honours, with Kafka's defaults.

A pydantic model inside this package (not in :mod:`rlm.config`): the engine is a library the
daemon calls with the topic's effective configuration; :meth:`CompactionSettings.from_kafka`
takes Kafka's property names (topic configs and the cleaner's broker configs).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KAFKA_NAMES", "CompactionSettings", "is_due"]

KAFKA_NAMES = {
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "log.cleaner.dedupe.buffer.size": "offset_map_memory_bytes",
    "log.cleaner.io.buffer.load.factor": "load_factor",
    "index.interval.bytes": "index_interval_bytes",
}


class CompactionSettings(BaseModel):
    """Per-topic and cleaner settings (Kafka's names in :data:`KAFKA_NAMES`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    delete_retention_ms: int = Field(
        default=86_400_000, ge=0,
        description="How long a tombstone (and an empty transaction's marker) is kept after the "
                    "compaction that first saw it (delete.retention.ms).")
    min_compaction_lag_ms: int = Field(
        default=0, ge=0, description="Segments holding a record younger than this are not compacted.")
    max_compaction_lag_ms: int = Field(
        default=2**63 - 1, ge=1,
        description="A log with dirty data older than this is due whatever its dirty ratio.")
    min_cleanable_dirty_ratio: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Compact when dirty bytes / all bytes exceeds this.")
    offset_map_memory_bytes: int = Field(
        default=128 * 1024 * 1024, ge=40,
        description="Memory of the key -> offset map (20 bytes per slot; at least one key).")
    load_factor: float = Field(
        default=0.9, gt=0.0, le=0.95, description="How full the offset map may get before a pass ends.")
    index_interval_bytes: int = Field(
        default=4096, ge=0, description="Bytes between offset-index entries of the output.")
    record_cache_records: int = Field(
        default=8_000_000, ge=0,
        description="Records whose digests are kept between the map and filter phases of a pass "
                    "(29 bytes each) instead of decoded twice.")

    @classmethod
    def from_kafka(cls, configs: Mapping[str, str | int | float], **overrides: object) -> CompactionSettings:
        """Settings from Kafka property names (unknown names are ignored: a topic has many more)."""
        values: dict[str, object] = {KAFKA_NAMES[k]: v for k, v in configs.items() if k in KAFKA_NAMES}
        values.update(overrides)
        return cls.model_validate(values)


def is_due(settings: CompactionSettings, *, dirty_bytes: int, total_bytes: int,
           oldest_dirty_timestamp: int | None, now_ms: int) -> bool:
    """Whether a log is due for compaction, as ``LogCleanerManager.grabFilthiestCompactedLog``
    decides: its dirty ratio exceeds ``min.cleanable.dirty.ratio``, or it has dirty bytes and the
    oldest dirty record is older than ``max.compaction.lag.ms`` (``needCompactionNow``)."""
    if dirty_bytes <= 0 or total_bytes <= 0:
        return False
    lag = settings.max_compaction_lag_ms
    if oldest_dirty_timestamp is not None and now_ms - oldest_dirty_timestamp > lag:
        return True
    return dirty_bytes / total_bytes > settings.min_cleanable_dirty_ratio
