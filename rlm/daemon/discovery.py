"""Find the partitions in the broker's log dirs and decide which are tiered (read-only scan).

A partition is tiered when its topic's ``remote.storage.enable`` is true — from the sidecar's own
per-topic config, or (when the sidecar says nothing about the topic and a broker is configured)
from the broker's topic config. Internal topics (``__consumer_offsets``, ``__transaction_state``,
...) are never tiered. Compacted topics (``cleanup.policy`` ``compact`` or ``compact,delete``) are
tiered by the rules of :mod:`rlm.daemon.compacted` (docs/compacted-topics.md).

A partition's topic id comes from its ``partition.metadata`` file, or, where the broker keeps none
(ZooKeeper-mode brokers up to 3.x write it only in some versions: 2.8 never does), from the
broker's Metadata answer (topic ids since 2.8). A partition the sidecar is asked to tier whose id
is known by neither is *unprotected*: :class:`Unprotected` makes that an error in ``rlm status``,
a metric and a log line, never a silent skip.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog

from rlm.compaction.settings import KAFKA_NAMES as COMPACTION_CONFIGS
from rlm.config import DaemonConfig, ResolvedTopicConfig
from rlm.daemon.clock import wall_ms
from rlm.daemon.leadership import ClusterView
from rlm.daemon.local_log import partition_dir_name
from rlm.daemon.metrics import DaemonMetrics
from rlm.daemon.status import StatusBoard
from rlm.errors import LogFormatError
from rlm.log.checkpoints import read_partition_metadata
from rlm.types import KafkaUuid, TopicPartition

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class FoundPartition:
    topic_partition: TopicPartition
    dir: Path
    topic_id: KafkaUuid | None  # None: no partition.metadata (see resolve_topic_ids), or id_error
    id_error: str | None = None  # partition.metadata exists and is not understood (e.g. a future version)


@dataclass(frozen=True)
class ScanResult:
    partitions: dict[TopicPartition, FoundPartition]
    deleting: set[TopicPartition]


def scan_log_dirs(log_dirs: list[Path]) -> ScanResult:
    """Every live partition dir (``<topic>-<n>``) and every ``-delete`` dir.

    A dir without ``partition.metadata`` is found with no topic id (a ZooKeeper-era broker's);
    one whose file exists but is not understood (a format version newer than this sidecar knows)
    is found with ``id_error`` and a warning: it is never guessed from the broker, and never
    skipped silently.
    """
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
                    found[tp] = FoundPartition(tp, d, None, id_error=str(e))
                    continue
            found[tp] = FoundPartition(tp, d, topic_id)
    return ScanResult(found, deleting)


def resolve_topic_ids(
    partitions: dict[TopicPartition, FoundPartition], view: ClusterView | None
) -> dict[TopicPartition, FoundPartition]:
    """``partitions`` with every missing topic id taken from the broker's answer, where it has one."""
    if view is None:
        return partitions
    out = dict(partitions)
    for tp, found in partitions.items():
        if found.topic_id is None and found.id_error is None and tp.topic in view.topic_ids:
            out[tp] = FoundPartition(tp, found.dir, view.topic_ids[tp.topic])
    return out


def unknown_id_reason(found: FoundPartition, has_broker: bool) -> str:
    """Why a partition to be tiered cannot be: the operator's one line."""
    if found.id_error is not None:
        return f"NOT PROTECTED: partition.metadata not understood, the folder is not read: {found.id_error}"
    where = (
        "the broker returned no topic id for it (Kafka before 2.8 keeps none)"
        if has_broker
        else "no bootstrap_servers is configured to ask the broker for it"
    )
    return f"NOT PROTECTED: topic id unknown: {found.dir} has no partition.metadata and {where}"


class Unprotected:
    """Partitions the sidecar was asked to tier and cannot: an error in ``rlm status``
    (``last_error``, ``tiered`` false), the ``rlm_partitions_unprotected`` gauge, one error log line
    when a partition becomes unprotected and one info line when it recovers."""

    def __init__(self, status: StatusBoard, metrics: DaemonMetrics) -> None:
        self._status = status
        self._metrics = metrics
        self._current: dict[TopicPartition, str] = {}

    def update(self, now_unprotected: dict[TopicPartition, str]) -> None:
        for tp, reason in now_unprotected.items():
            st = self._status.partition(tp.topic, tp.partition)
            if self._current.get(tp) != reason:
                log.error("partition_unprotected", topic=tp.topic, partition=tp.partition, reason=reason)
                st.last_error_ms = wall_ms()
            st.tiered, st.last_error = False, reason
            self._metrics.unprotected.labels(tp.topic, str(tp.partition)).set(1)
        for tp in set(self._current) - set(now_unprotected):
            log.info("partition_protected_again", topic=tp.topic, partition=tp.partition)
            self._metrics.unprotected.labels(tp.topic, str(tp.partition)).set(0)
        self._current = dict(now_unprotected)


def is_internal(topic: str) -> bool:
    return topic.startswith("__")


class TieringPolicy:
    """Decides per topic whether to tier, from the sidecar's and the broker's topic configs."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config

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
        compaction = tuple(sorted((k, v) for k, v in broker.items() if k in COMPACTION_CONFIGS))
        if compaction:  # min.cleanable.dirty.ratio, ...: read by remote compaction
            updates["compaction_configs"] = compaction
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
        return None
