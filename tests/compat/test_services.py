"""The test services start every Kafka version of tests.services.kafka.VERSIONS, in each mode."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from tests.daemon.helpers import create_topic, produce_txn
from tests.services.kafka import KafkaCluster
from tests.services.proc import ServiceError


@pytest.mark.parametrize(("version", "zk"), [("3.5.2", True)], ids=["3.5.2-zk"])
def test_zookeeper_mode_of_a_kraft_capable_version(version: str, zk: bool) -> None:
    """3.5's ZooKeeper mode (the compat suite runs 3.5 in KRaft): a transaction lands on disk."""
    c = KafkaCluster(version=version, zookeeper=zk, name="compat-35zk").start()
    try:
        create_topic(c.bootstrap, "zk35")
        produce_txn(c.bootstrap, "zk35", "zk35-txn", 3, commit=True)
        assert (c.log_dir / "zk35-0" / "00000000000000000000.log").stat().st_size > 0
        meta = (c.log_dir / "meta.properties").read_text()
        assert "broker.id=1" in meta and "version=0" in meta  # a ZooKeeper-era log dir
    finally:
        c.stop()


def test_compat_broker_answers(compat_kafka: KafkaCluster) -> None:
    """Each version's broker is reachable and is the version it was asked for (its jars)."""
    md = AdminClient({"bootstrap.servers": compat_kafka.bootstrap}).list_topics(timeout=10)
    assert 1 in md.brokers
    assert any(p.name.startswith(f"kafka_2.13-{compat_kafka.version}") for p in compat_kafka.lib.iterdir())


def test_unknown_version_or_mode_is_refused() -> None:
    with pytest.raises(ServiceError, match="no test jars"):
        _ = KafkaCluster(version="0.10.2").release
    with pytest.raises(ServiceError, match="ZooKeeper mode only"):
        _ = KafkaCluster(version="2.8.2").release
    with pytest.raises(ServiceError, match="no ZooKeeper mode"):
        _ = KafkaCluster(version="4.1.1", zookeeper=True).release
