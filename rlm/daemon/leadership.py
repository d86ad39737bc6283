"""Who leads what: the cluster's view (with a broker) or "this node leads everything" (standalone).

With a broker, one confluent-kafka ``AdminClient`` gives partition leaders (metadata request),
topic ids (DescribeTopics), topic configs (DescribeConfigs: ``remote.storage.enable``,
``cleanup.policy``) and the LSO (ListOffsets, ``read_committed``). The view is refreshed on an
interval by the service; a failed refresh keeps the previous view (the daemon keeps tiering what
it led) and is reported as an error metric.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from rlm.errors import RlmError
from rlm.secrets import reveal_all
from rlm.types import KafkaUuid, TopicPartition

log = structlog.get_logger(__name__)


class ClusterUnavailableError(RlmError):
    """The Kafka cluster could not be asked (metadata, configs or offsets)."""

    retriable = True


@dataclass(frozen=True)
class ClusterView:
    """One refresh of the cluster's metadata. ``topic_ids`` holds every existing topic."""

    leaders: dict[TopicPartition, int] = field(default_factory=dict)
    topic_names: frozenset[str] = frozenset()
    topic_ids: dict[str, KafkaUuid] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    complete: bool = False

    def topic_exists(self, topic: str, topic_id: KafkaUuid | None) -> bool:
        """False only when the cluster says so: the name is gone, or it now has another id."""
        if topic not in self.topic_names:
            return False
        known = self.topic_ids.get(topic)
        return known is None or topic_id is None or known == topic_id


class Cluster:
    """Thin, thread-safe wrapper over the admin client (one per daemon)."""

    def __init__(
        self, bootstrap_servers: str, client_config: Mapping[str, Any], timeout_s: float = 10.0
    ) -> None:
        from rlm.daemon.probes import LoginFailures, admin_client

        conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "client.id": "rlm-sidecar"}
        conf.update(reveal_all(client_config))  # secrets in clear for librdkafka only
        self._login = LoginFailures()
        self._admin = admin_client(conf, "cluster", self._login)
        self._timeout = timeout_s
        self._lock = threading.Lock()

    def refresh(self, topics_of_interest: set[str]) -> ClusterView:
        """Leaders of every partition, ids of every topic, configs of ``topics_of_interest``."""
        from confluent_kafka import KafkaException, TopicCollection
        from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

        try:
            md = self._admin.list_topics(timeout=self._timeout)
            leaders: dict[TopicPartition, int] = {}
            names = []
            for name, t in md.topics.items():
                names.append(name)
                if t.error is not None:
                    continue
                for pid, p in t.partitions.items():
                    leaders[TopicPartition(name, int(pid))] = int(p.leader)
            ids: dict[str, KafkaUuid] = {}
            if names:
                futs = self._admin.describe_topics(TopicCollection(names), request_timeout=self._timeout)
                for name, fut in futs.items():
                    try:
                        desc = fut.result()
                    except KafkaException:
                        continue
                    tid = desc.topic_id
                    ids[name] = KafkaUuid.from_bits(
                        tid.get_most_significant_bits(), tid.get_least_significant_bits()
                    )
            configs: dict[str, dict[str, str]] = {}
            wanted = sorted(t for t in topics_of_interest if t in ids)
            if wanted:
                res = [ConfigResource(ResourceType.TOPIC, t) for t in wanted]
                for r, fut in self._admin.describe_configs(res, request_timeout=self._timeout).items():
                    try:
                        entries = fut.result()
                    except KafkaException:
                        continue
                    configs[r.name] = {k: str(v.value) for k, v in entries.items() if v.value is not None}
        except KafkaException as e:
            raise ClusterUnavailableError(f"cluster metadata refresh failed: {self._reason(e)}") from e
        finally:
            self._admin.poll(0)  # hands librdkafka's queued log lines to the (rate-limited) logger
        return ClusterView(leaders, frozenset(names), ids, configs, complete=True)

    def _reason(self, e: Exception) -> str:
        """The client's error, or the refused login behind it (a transport failure says nothing)."""
        self._admin.poll(0)  # runs the error callback
        failed, self._login.last = self._login.last, None
        return f"authentication failed: {failed}" if failed else str(e)

    def leader_of(self, tp: TopicPartition) -> int:
        """The partition's leader now (one metadata request); -1 when it has none."""
        from confluent_kafka import KafkaException

        try:
            md = self._admin.list_topics(tp.topic, timeout=self._timeout)
        except KafkaException as e:
            raise ClusterUnavailableError(f"{tp}: metadata request failed: {self._reason(e)}") from e
        finally:
            self._admin.poll(0)
        t = md.topics.get(tp.topic)
        p = None if t is None or t.error is not None else t.partitions.get(tp.partition)
        return -1 if p is None else int(p.leader)

    def last_stable_offset(self, tp: TopicPartition) -> int:
        """ListOffsets LATEST under ``read_committed``: the partition's LSO."""
        from confluent_kafka import IsolationLevel, KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        try:
            futs = self._admin.list_offsets(
                {CkTopicPartition(tp.topic, tp.partition): OffsetSpec.latest()},  # type: ignore[no-untyped-call]
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=self._timeout,
            )
            for fut in futs.values():
                return int(fut.result().offset)
        except KafkaException as e:
            reason = self._reason(e)
            raise ClusterUnavailableError(f"{tp}: ListOffsets(read_committed) failed: {reason}") from e
        raise ClusterUnavailableError(f"{tp}: ListOffsets returned nothing")
