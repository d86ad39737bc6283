"""Create or verify the ``__remote_log_metadata`` topic, the way Kafka's RLMM initializes it.

Kafka's ``TopicBasedRemoteLogMetadataManager`` creates the topic with the configured partition
count and replication factor and the configs ``retention.ms``, ``cleanup.policy=delete`` and
``remote.storage.enable=false``; if the topic already exists with another partition count it
refuses to start, because the partitioner would then send events to partitions nobody reads.
We do the same, retrying transient failures every ``initialization.retry.interval.ms`` until
``initialization.retry.max.timeout.ms``. One difference, asked for by the issue: when the
replication factor is not configured we create with ``min(3, live brokers)`` so a one-broker
dev cluster works out of the box. Another: ``remote.storage.enable`` is sent only to brokers that
know it (Kafka 3.6+, KIP-405); Kafka 2.8-3.5 refuse a CreateTopics naming an unknown topic config.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]
from confluent_kafka.cimpl import NewTopic

from rlm.errors import ConfigError, MetadataUnavailableError
from rlmm.topic_config import TopicRlmmConfig

log = structlog.get_logger(__name__)


REMOTE_STORAGE_ENABLE = "remote.storage.enable"
# A broker config every broker with tiered storage has (3.6+), on or off: DescribeConfigs lists it
TIERED_STORAGE_BROKER_CONFIG = "remote.log.storage.system.enable"


def topic_configs(cfg: TopicRlmmConfig, *, remote_storage_known: bool = True) -> dict[str, str]:
    """The topic-level configs Kafka sets on the metadata topic; without ``remote_storage_known``
    (a broker before 3.6) ``remote.storage.enable``, which such a broker refuses, is left out."""
    configs = {"retention.ms": str(cfg.retention_ms), "cleanup.policy": "delete"}
    if remote_storage_known:
        configs[REMOTE_STORAGE_ENABLE] = "false"
    return configs


def broker_knows_remote_storage(admin: AdminClient, timeout: float) -> bool:
    """Does the cluster's broker know the topic config ``remote.storage.enable`` (Kafka 3.6+)?

    Asked by DescribeConfigs of one live broker: brokers with tiered storage list
    ``remote.log.storage.system.enable`` whether it is on or off. When the broker cannot be asked
    (DescribeConfigs denied), the answer is yes: the CreateTopics then fails with the broker's own
    message instead of the sidecar guessing.
    """
    brokers = sorted(admin.list_topics(timeout=timeout).brokers)
    if not brokers:
        return True
    res = ConfigResource(ResourceType.BROKER, str(brokers[0]))
    try:
        entries = admin.describe_configs([res], request_timeout=timeout)[res].result(timeout=timeout + 1)
    except KafkaException as e:
        log.warning("rlmm_broker_configs_unreadable", broker=brokers[0], error=str(e))
        return True
    return TIERED_STORAGE_BROKER_CONFIG in entries


def new_metadata_topic(
    cfg: TopicRlmmConfig, live_brokers: int, *, remote_storage_known: bool = True
) -> NewTopic:
    """The CreateTopics request the daemon sends (``rlm check`` sends the same one validate-only,
    so what it accepts is what the daemon will create): the configured partitions, the configured
    replication factor or ``min(3, live brokers)``, and :func:`topic_configs` (asked of the broker
    with :func:`broker_knows_remote_storage`)."""
    rf = cfg.replication_factor or min(3, max(1, live_brokers))
    return NewTopic(cfg.topic_name, num_partitions=cfg.num_partitions, replication_factor=rf,
                    config=topic_configs(cfg, remote_storage_known=remote_storage_known))


def _existing_partitions(admin: AdminClient, topic: str, timeout: float) -> int | None:
    md = admin.list_topics(topic=topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        if t is not None and t.error is not None and t.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaException(t.error)
        return None
    return len(t.partitions)


def _broker_count(admin: AdminClient, timeout: float) -> int:
    return max(1, len(admin.list_topics(timeout=timeout).brokers))


def ensure_metadata_topic(cfg: TopicRlmmConfig, admin: AdminClient | None = None) -> int:
    """Create the metadata topic if absent; return its partition count (always the configured one).

    Raises :class:`ConfigError` if it exists with another partition count (not retriable: the
    operator must fix the config) and :class:`MetadataUnavailableError` if the cluster cannot be
    reached before the initialization timeout.
    """
    if admin is None:
        try:
            conf: dict[str, Any] = {**cfg.admin_config(), "logger": logging.getLogger("rlmm.kafka.admin")}
            admin = AdminClient(conf)
        except KafkaException as e:
            raise ConfigError(f"invalid metadata admin client configuration: {e}") from e
    deadline = time.monotonic() + cfg.init_retry_max_timeout_ms / 1000
    interval = max(cfg.init_retry_interval_ms / 1000, 0.01)
    last: Exception | None = None
    while True:
        remaining = max(deadline - time.monotonic(), 0.0)
        try:
            return _ensure_once(cfg, admin, timeout=min(max(remaining, 1.0), 10.0))
        except ConfigError:
            raise
        except (KafkaException, TimeoutError, RuntimeError) as e:
            last = e
            log.warning("rlmm_topic_init_retry", topic=cfg.topic_name, error=str(e))
        if time.monotonic() >= deadline:
            raise MetadataUnavailableError(
                f"could not create or describe metadata topic {cfg.topic_name!r} at {cfg.bootstrap_servers} "
                f"within {cfg.init_retry_max_timeout_ms} ms: {last}") from last
        time.sleep(interval)


def _ensure_once(cfg: TopicRlmmConfig, admin: AdminClient, *, timeout: float) -> int:
    existing = _existing_partitions(admin, cfg.topic_name, timeout)
    if existing is None and not cfg.create_topic:
        raise ConfigError(
            f"metadata topic {cfg.topic_name!r} does not exist at {cfg.bootstrap_servers} and "
            "remote.log.metadata.topic.create is false (a reader of a broker's own tiered storage "
            "never creates it): check the bootstrap servers and the topic name")
    if existing is None:
        known = broker_knows_remote_storage(admin, timeout)
        if not known:
            log.info("rlmm_topic_config_omitted", topic=cfg.topic_name, config=REMOTE_STORAGE_ENABLE,
                     reason=f"the broker has no {TIERED_STORAGE_BROKER_CONFIG} (Kafka before 3.6)")
        new = new_metadata_topic(cfg, _broker_count(admin, timeout), remote_storage_known=known)
        rf = new.replication_factor
        fut = admin.create_topics([new], request_timeout=timeout)[cfg.topic_name]
        try:
            fut.result(timeout=timeout + 5)
            log.info("rlmm_topic_created", topic=cfg.topic_name, partitions=cfg.num_partitions,
                     replication_factor=rf, retention_ms=cfg.retention_ms)
        except KafkaException as e:
            err: Any = e.args[0] if e.args else None
            # TOPIC_ALREADY_EXISTS is success: another sidecar started at the same moment won the
            # race (issue 20). A listing right after may not show it yet, or show it without
            # leaders: both raise below and are retried by ensure_metadata_topic's loop.
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                if isinstance(err, KafkaError) and err.code() in (
                        KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_CONFIG,
                        KafkaError.INVALID_PARTITIONS, KafkaError.POLICY_VIOLATION,
                        KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                    raise ConfigError(f"cannot create metadata topic {cfg.topic_name!r}: {err.str()}") from e
                raise
        existing = _existing_partitions(admin, cfg.topic_name, timeout)
        if existing is None:
            raise RuntimeError(f"metadata topic {cfg.topic_name!r} not visible yet after creation")
    if existing != cfg.num_partitions:
        raise ConfigError(
            f"metadata topic {cfg.topic_name!r} exists with {existing} partitions but "
            f"remote.log.metadata.topic.num.partitions is {cfg.num_partitions}; they must match")
    return existing
