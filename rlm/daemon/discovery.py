"""Find the partitions in the broker's log dirs and decide which are tiered (read-only scan).

A partition is tiered when its topic's ``remote.storage.enable`` is true — from the sidecar's own
per-topic config, or (when the sidecar says nothing about the topic and a broker is configured)
from the broker's topic config. Internal topics are never tiered; compacted topics are refused
with a warning, once per topic (KIP-405 non-goal).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog

from rlm.config import DaemonConfig, ResolvedTopicConfig
from rlm.daemon.leadership import ClusterView
from rlm.daemon.local_log import partition_dir_name
from rlm.errors import LogFormatError
from rlm.log.checkpoints import read_partition_metadata
from rlm.types import KafkaUuid, TopicPartition

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class FoundPartition:
    topic_partition: TopicPartition
    dir: Path
    topic_id: KafkaUuid | None


@dataclass(frozen=True)
class ScanResult:
    partitions: dict[TopicPartition, FoundPartition]
    deleting: set[TopicPartition]


def scan_log_dirs(log_dirs: list[Path]) -> ScanResult:
    """Every live partition dir (``<topic>-<n>`` with a ``partition.metadata``) and every ``-delete`` dir."""
    found: dict[TopicPartition, FoundPartition] = {}
    deleting: set[TopicPartition] = set()
    for root in log_dirs:
        try:
            entries = sorted(root.iterdir())
        except FileNotFoundError:
            log.warning("log_dir_missing", log_dir=str(root))
            continue
        for d in entries:
            if not d.is_dir():
                continue
            parsed = partition_dir_name(d.name)
            if parsed is None:
                continue
            tp, suffix = parsed
            if suffix == "delete":
                deleting.add(tp)
            if suffix is not None:
                continue
            topic_id: KafkaUuid | None = None
            meta = d / "partition.metadata"
            try:
                topic_id = read_partition_metadata(meta)
            except LogFormatError as e:
                if meta.exists():
                    log.warning("partition_metadata_unreadable", dir=str(d), error=str(e))
                continue
            found[tp] = FoundPartition(tp, d, topic_id)
    return ScanResult(found, deleting)


def is_internal(topic: str) -> bool:
    return topic.startswith("__")


class TieringPolicy:
    """Decides per topic whether to tier, remembering which refusals were already logged."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self._warned: set[str] = set()

    def topic_config(self, topic: str, view: ClusterView | None) -> ResolvedTopicConfig:
        cfg = self.config.topic_config(topic)
        broker = view.topic_configs.get(topic, {}) if view is not None else {}
        updates: dict[str, object] = {}
        if (
            not self.config.has_topic_setting(topic, "remote_storage_enable")
            and broker.get("remote.storage.enable", "false").lower() == "true"
        ):
            updates["remote_storage_enable"] = True
        if cfg.cleanup_policy is None and "cleanup.policy" in broker:
            updates["cleanup_policy"] = broker["cleanup.policy"]
        # Without native tiering the broker deletes locally at its own retention.*: that is the
        # local retention the copy lag is measured against. Remote retention is the sidecar's.
        for key, fname in (
            ("retention.ms", "local_retention_ms"),
            ("retention.bytes", "local_retention_bytes"),
        ):
            if not self.config.has_topic_setting(topic, fname) and key in broker:
                updates[fname] = int(broker[key])
        return cfg.model_copy(update=updates) if updates else cfg

    def is_tiered(self, topic: str, cfg: ResolvedTopicConfig) -> bool:
        return self.why_not_tiered(topic, cfg) is None

    def why_not_tiered(self, topic: str, cfg: ResolvedTopicConfig) -> str | None:
        """None when ``topic`` is tiered, else the reason in words (shown by ``rlm status``)."""
        if is_internal(topic):
            return "internal topic"
        if not cfg.remote_storage_enable:
            return "remote.storage.enable is not true (sidecar config or broker topic config)"
        if cfg.cleanup_policy is not None and "compact" in cfg.cleanup_policy:
            if topic not in self._warned:
                self._warned.add(topic)
                log.warning(
                    "compacted_topic_refused",
                    topic=topic,
                    cleanup_policy=cfg.cleanup_policy,
                    reason="tiered storage does not support compacted topics (KIP-405 non-goal)",
                )
            return f"compacted (cleanup.policy={cfg.cleanup_policy}; KIP-405 does not tier compacted topics)"
        return None
