"""The test services start every Kafka version of tests.services.kafka.VERSIONS, in each mode."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from tests.services.kafka import KafkaCluster
from tests.services.proc import ServiceError


def test_compat_broker_answers(compat_kafka: KafkaCluster) -> None:
    """Each version's broker is reachable and is the version it was asked for (its jars), in the
    mode it was asked for (a ZooKeeper-era log dir: meta.properties version 0, broker.id)."""
    md = AdminClient({"bootstrap.servers": compat_kafka.bootstrap}).list_topics(timeout=10)
    assert 1 in md.brokers
    assert any(p.name.startswith(f"kafka_2.13-{compat_kafka.version}") for p in compat_kafka.lib.iterdir())
    meta = (compat_kafka.log_dir / "meta.properties").read_text()
    assert ("version=0" in meta) == compat_kafka.zookeeper, meta


def test_unknown_version_or_mode_is_refused() -> None:
    with pytest.raises(ServiceError, match="no test jars"):
        _ = KafkaCluster(version="0.10.2").release
    with pytest.raises(ServiceError, match="ZooKeeper mode only"):
        _ = KafkaCluster(version="2.8.2").release
    with pytest.raises(ServiceError, match="no ZooKeeper mode"):
        _ = KafkaCluster(version="4.1.1", zookeeper=True).release
