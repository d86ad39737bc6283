"""A topic's id (and partitions) by name, so a read loads only the metadata it needs.

Remote log metadata is keyed by topic *id*, and the metadata topic's partitioner hashes the id:
to load just the metadata partition of ``orders-3`` the reader must know ``orders``' id before
any metadata is read. Two sources, cheapest first: a ``partition.metadata`` file in a configured
log dir (no network), then the broker (one DescribeTopics). The partition list is taken only from
the broker: a log dir holds just this broker's replicas. ``None`` means unknown (no broker, the
topic deleted or never local): the caller then loads every metadata partition and looks the name
up there, as it always could.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from fetcher.broker import BrokerOffsets
from rlm.types import KafkaUuid

log = structlog.get_logger(__name__)

_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TopicInfo:
    """What is known of a topic: its id, and its partitions when the broker said them."""

    topic_id: KafkaUuid
    partitions: tuple[int, ...] | None


class TopicIds:
    """Resolves and remembers topic ids for one read core. Thread-safe."""

    def __init__(self, log_dirs: Sequence[Path], broker: BrokerOffsets | None) -> None:
        self._log_dirs = list(log_dirs)
        self._broker = broker
        self._lock = threading.Lock()
        self._known: dict[tuple[str, bool], TopicInfo | None] = {}
        self._admin: Any = None

    def lookup(self, topic: str, *, with_partitions: bool = False) -> TopicInfo | None:
        """The topic's id (from a log dir or the broker); ``with_partitions``: also every partition
        of it, which only the broker can say (``None`` without one)."""
        key = (topic, with_partitions)
        with self._lock:
            if key in self._known:
                return self._known[key]
        found = None if with_partitions else self._from_log_dirs(topic)
        if found is None and self._broker is not None:
            found = self._from_broker(topic)
        with self._lock:
            self._known[key] = found
        return found

    def _from_log_dirs(self, topic: str) -> TopicInfo | None:
        from rlm.log.checkpoints import read_partition_metadata
        from rlm.log.partition import parse_partition_dir_name

        for root in self._log_dirs:
            try:
                entries = sorted(root.glob(f"{_glob_escape(topic)}-*"))
            except OSError:
                continue
            for d in entries:
                try:
                    tp, suffix = parse_partition_dir_name(d.name)
                    if suffix is not None or tp.topic != topic:
                        continue
                    return TopicInfo(read_partition_metadata(d / "partition.metadata"), None)
                except Exception as e:  # an unreadable dir: the broker (or a full load) answers instead
                    log.debug("topic_id_unreadable", path=str(d), error=str(e))
        return None

    def _from_broker(self, topic: str) -> TopicInfo | None:
        from confluent_kafka import KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient

        assert self._broker is not None
        try:
            with self._lock:
                if self._admin is None:
                    self._admin = AdminClient(self._broker.client_config)
                admin = self._admin
            fut = admin.describe_topics(TopicCollection([topic]), request_timeout=_TIMEOUT_S)[topic]
            desc = fut.result()
        except (KafkaException, ValueError) as e:  # unknown topic, cluster unreachable: not known here
            log.debug("topic_id_unknown_to_broker", topic=topic, error=str(e))
            return None
        tid = desc.topic_id
        topic_id = KafkaUuid.from_bits(tid.get_most_significant_bits(), tid.get_least_significant_bits())
        return TopicInfo(topic_id, tuple(sorted(int(p.id) for p in desc.partitions)))


def _glob_escape(name: str) -> str:
    """Topic names may hold only ``[a-zA-Z0-9._-]``, but never trust that in a glob."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)
