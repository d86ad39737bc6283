"""Where ``remote.storage.enable`` can live, checked against real Kafka 4.1 brokers.

* Native tiered storage off (``remote.log.storage.system.enable=false``, the default): the broker
  rejects ``remote.storage.enable=true`` as a topic config, at creation and when altered, as it
  rejects any unknown topic config; so the sidecar's own per-topic config is the switch.
* Native tiered storage on: the topic config is accepted and the daemon reads it when its own
  config says nothing about the topic; the sidecar's explicit setting wins.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from rlm.config import load_config
from rlm.daemon.discovery import TieringPolicy
from rlm.daemon.leadership import Cluster, ClusterView
from tests.daemon.helpers import wait_for
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"


def refreshed(cluster: Cluster, topics: set[str]) -> ClusterView:
    """A cluster view that already holds the configs of ``topics`` (metadata propagates asynchronously)."""
    views: list[ClusterView] = []

    def ready() -> bool:
        views.append(cluster.refresh(topics))
        return topics <= set(views[-1].topic_configs)

    wait_for("topic configs visible", ready, timeout=30)
    return views[-1]


def test_broker_without_native_tiering_rejects_the_topic_config(kafka: Any, unique_topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    with pytest.raises(KafkaException, match="Tiered Storage functionality is disabled"):
        admin.create_topics([NewTopic(unique_topic, 1, 1, config={"remote.storage.enable": "true"})])[
            unique_topic
        ].result(30)
    with pytest.raises(KafkaException, match="Unknown topic config name"):
        admin.create_topics([NewTopic(unique_topic, 1, 1, config={"rlm.tiered": "true"})])[
            unique_topic
        ].result(30)
    admin.create_topics([NewTopic(unique_topic, 1, 1)])[unique_topic].result(30)
    alter = ConfigResource(
        ResourceType.TOPIC,
        unique_topic,
        incremental_configs=[
            ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException, match="Tiered Storage functionality is disabled"):
        admin.incremental_alter_configs([alter])[alter].result(30)

    # so the sidecar's config is the switch; the broker reports the topic as not tiered
    view = refreshed(Cluster(kafka.bootstrap, {}), {unique_topic})
    assert view.topic_configs[unique_topic]["remote.storage.enable"] == "false"
    quiet = TieringPolicy(load_config(None, log_dirs=["/x"]))
    assert not quiet.is_tiered(unique_topic, quiet.topic_config(unique_topic, view))
    on = TieringPolicy(
        load_config(None, log_dirs=["/x"], topics=[{"pattern": unique_topic, "remote.storage.enable": True}])
    )
    assert on.is_tiered(unique_topic, on.topic_config(unique_topic, view))


@pytest.fixture(scope="module")
def native_tiering(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    rsm_dir = tmp_path_factory.mktemp("lts")
    c = KafkaCluster(
        nodes=1,
        name="kafka-native-ts",
        extra={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
            "rsm.config.dir": str(rsm_dir),
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        },
    ).start()
    try:
        yield c
    finally:
        c.stop()


def test_broker_with_native_tiering_topic_config_is_read(
    native_tiering: KafkaCluster, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": native_tiering.bootstrap})
    futs = admin.create_topics(
        [
            NewTopic("ts-on", 1, 1, config={"remote.storage.enable": "true"}),
            NewTopic("ts-off", 1, 1),
            NewTopic("ts-compact", 1, 1, config={"cleanup.policy": "compact"}),
        ]
    )
    for fut in futs.values():
        fut.result(30)
    with pytest.raises(KafkaException):  # Kafka itself refuses tiering a compacted topic
        admin.create_topics(
            [NewTopic("ts-bad", 1, 1, config={"remote.storage.enable": "true", "cleanup.policy": "compact"})]
        )["ts-bad"].result(30)
    view = refreshed(Cluster(native_tiering.bootstrap, {}), {"ts-on", "ts-off", "ts-compact"})
    policy = TieringPolicy(load_config(None, log_dirs=["/x"]))
    assert policy.is_tiered("ts-on", policy.topic_config("ts-on", view))
    assert not policy.is_tiered("ts-off", policy.topic_config("ts-off", view))
    compact = TieringPolicy(
        load_config(None, log_dirs=["/x"], topics=[{"pattern": "ts-*", "remote.storage.enable": True}])
    )
    assert compact.topic_config("ts-compact", view).cleanup_policy == "compact"
    # the sidecar tiers it beside the broker, below the cleaner checkpoint (docs/compacted-topics.md)
    assert compact.is_tiered("ts-compact", compact.topic_config("ts-compact", view))
    veto = TieringPolicy(
        load_config(None, log_dirs=["/x"], topics=[{"pattern": "ts-on", "remote.storage.enable": False}])
    )
    assert not veto.is_tiered("ts-on", veto.topic_config("ts-on", view))
