"""Shared pieces of the topic-backed metadata manager tests: its configuration and a segment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlm.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition


def store_config(
    bootstrap: str,
    topic: str,
    log_dir: Path,
    *,
    partitions: int = 1,
    broker_id: int = 3,
    wait_ms: int = 30000,
    **extra: Any,
) -> dict[str, Any]:
    """Kafka-named settings of a ``TopicBasedRemoteLogMetadataManager`` on ``topic``."""
    return {
        "bootstrap.servers": bootstrap,
        "remote.log.metadata.topic.name": topic,
        "remote.log.metadata.topic.num.partitions": partitions,
        "broker.id": broker_id,
        "log.dir": str(log_dir),
        "remote.log.metadata.consume.wait.ms": wait_ms,
        **extra,
    }


def ten_offset_segment(tp: TopicIdPartition, start: int, broker: int = 3) -> RemoteLogSegmentMetadata:
    """A COPY_SEGMENT_STARTED segment of offsets ``start..start+9``, epoch 0 from ``start``."""
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp), start, start + 9, 1, broker, 1, 100, ((0, start),)
    )
