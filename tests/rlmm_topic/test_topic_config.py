"""Config parsing under Kafka's property names (no broker needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlm.errors import ConfigError
from rlmm.topic_config import TopicRlmmConfig

BOOTSTRAP = "remote.log.metadata.common.client.bootstrap.servers"
BASE = {"broker.id": 4, "log.dir": "/var/lib/rlm", BOOTSTRAP: "k:9092"}


def test_defaults_are_kafkas() -> None:
    c = TopicRlmmConfig.from_mapping(BASE)
    assert (c.topic_name, c.num_partitions, c.replication_factor, c.retention_ms) == (
        "__remote_log_metadata", 50, None, -1)
    assert (c.init_retry_max_timeout_ms, c.init_retry_interval_ms) == (120000, 100)


def test_consume_wait_has_one_default() -> None:
    """Not Kafka's 120 s: the 10 s rlm.yaml's metadata_request_timeout_ms gives it, so the docs
    and the code say one value (docs/metadata.md, docs/configuration.md)."""
    from rlm.config import DaemonConfig

    assert TopicRlmmConfig.from_mapping(BASE).consume_wait_ms == 10000
    assert DaemonConfig.model_fields["metadata_request_timeout_ms"].default == 10000


def test_broker_prefixed_names_and_client_prefixes() -> None:
    c = TopicRlmmConfig.from_mapping({
        "rlmm.config.remote.log.metadata.topic.num.partitions": "7",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "2",
        "rlmm.config.remote.log.metadata.topic.retention.ms": "86400000",
        "broker.id": "4", "log.dir": "/d", "cluster.id": "ignored",
        "remote.log.metadata.common.client.bootstrap.servers": "k:9092",
        "remote.log.metadata.common.client.security.protocol": "PLAINTEXT",
        "remote.log.metadata.producer.linger.ms": "3",
        "remote.log.metadata.producer.acks": "1",  # forced back to all
        "remote.log.metadata.consumer.fetch.wait.max.ms": "50",
        "remote.log.metadata.consumer.key.deserializer": "org.apache.kafka...ByteArrayDeserializer",
    })
    assert (c.num_partitions, c.replication_factor, c.retention_ms) == (7, 2, 86400000)
    p, q, a = c.producer_config(), c.consumer_config(), c.admin_config()
    assert p["acks"] == "all" and p["enable.idempotence"] == "true" and p["linger.ms"] == "3"
    assert p["client.id"] == "__remote_log_metadata_client_4_producer"
    assert q["client.id"] == "__remote_log_metadata_client_4_consumer"
    assert q["enable.auto.commit"] == "false" and q["auto.offset.reset"] == "earliest"
    assert q["fetch.wait.max.ms"] == "50" and "key.deserializer" not in q and "linger.ms" not in q
    assert a["security.protocol"] == "PLAINTEXT" and a["bootstrap.servers"] == "k:9092"


@pytest.mark.parametrize(("extra", "message"), [
    ({"remote.log.metadata.topic.retention.ms": 0}, "retention"),
    ({"remote.log.metadata.topic.num.partitions": 0}, "num.partitions"),
    ({"remote.log.metadata.topic.replication.factor": 0}, "replication.factor"),
    ({"remote.log.metadata.consume.wait.ms": -1}, "consume.wait.ms"),
    ({"remote.log.metadata.topic.num.partitons": 3}, "unknown metadata manager property"),
    ({"log.dir": ""}, "log.dir"),
])
def test_invalid_values_name_the_key(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TopicRlmmConfig.from_mapping({**BASE, **extra})


@pytest.mark.parametrize("missing", ["broker.id", "log.dir", BOOTSTRAP])
def test_required_keys(missing: str) -> None:
    with pytest.raises(ConfigError):
        TopicRlmmConfig.from_mapping({k: v for k, v in BASE.items() if k != missing})


def test_client_keys_librdkafka_rejects_are_config_errors(tmp_path: Path) -> None:
    from rlmm.topic import TopicBasedRemoteLogMetadataManager

    with pytest.raises(ConfigError, match=re.escape("no.such.client.key")):
        TopicBasedRemoteLogMetadataManager({**BASE, "log.dir": str(tmp_path),
                                            "remote.log.metadata.common.client.no.such.client.key": "1"})
