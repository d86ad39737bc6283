"""The issue's setting: the read side follows a real broker's ``__remote_log_metadata`` topic that
holds the records Kafka's own TopicBasedRemoteLogMetadataManager wrote while Aiven's plugin tiered
(the fixture's raw records, produced byte for byte to their recorded partitions), and reads the
bucket; ``rlm fetch`` returns exactly what the broker's consumer read. Variant ``c`` (zstd +
AES-GCM) — topic names repeat across variants, so one variant per metadata topic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate
from rlmm.partitioner import metadata_partition
from rlmm.serde import deserialize
from tests.aiven.helpers import broker_rsm_lines, expected, metadata_records
from tests.aiven.test_read_faces import _cli_fetch, _partitions
from tests.services.kafka import KafkaCluster

METADATA_TOPIC = "__remote_log_metadata"
PARTITIONS = 5  # rlmm.config.remote.log.metadata.topic.num.partitions of the fixture's broker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    c = KafkaCluster(nodes=1, name="aiven-rlmm").start()
    try:
        yield c
    finally:
        c.stop()


def _load_topic(bootstrap: str, variant: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(METADATA_TOPIC, PARTITIONS, 1,
                                        config={"cleanup.policy": "delete", "retention.ms": "-1"})])
    fut[METADATA_TOPIC].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    n = 0
    for partition, key, value in metadata_records(variant):
        md = deserialize(value)
        if isinstance(md, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
            # our partitioner puts each user partition where Kafka's did
            assert metadata_partition(md.topic_id_partition, PARTITIONS) == partition
        producer.produce(METADATA_TOPIC, value=value, key=key, partition=partition)
        n += 1
    assert producer.flush(60) == 0
    return n


def test_fetch_follows_the_brokers_metadata_topic(
        cluster: KafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    variant = "c"
    assert _load_topic(cluster.bootstrap, variant) > 0
    doc = {
        "work_dir": str(tmp_path / "work"),
        **broker_rsm_lines(variant),
        "remote.log.metadata.manager.class.name":
            "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
        "rlmm.config.bootstrap.servers": cluster.bootstrap,
        "rlmm.config.remote.log.metadata.topic.num.partitions": PARTITIONS,
        "rlmm.config.remote.log.metadata.topic.replication.factor": 1,
    }
    config = tmp_path / "rlm.yaml"
    config.write_text(json.dumps(doc))  # JSON is YAML
    for level in ("read_uncommitted", "read_committed"):
        got = []
        for topic, partition in _partitions(variant):
            got += _cli_fetch(config, topic, partition, level, capsys)
        want = expected(variant, level)
        key = lambda r: (r["topic"], r["partition"], r["offset"])  # noqa: E731
        assert sorted(got, key=key) == sorted(want, key=key)
        assert len(got) == len(want) > 0


def test_a_missing_metadata_topic_is_never_created(
        cluster: KafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlm.cli import main as cli_main

    doc = {
        "work_dir": str(tmp_path / "work"),
        **broker_rsm_lines("c"),
        "remote.log.metadata.manager.class.name":
            "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
        "rlmm.config.bootstrap.servers": cluster.bootstrap,
        "rlmm.config.remote.log.metadata.topic.name": "rlm-absent-metadata",
        "rlmm.config.remote.log.metadata.topic.num.partitions": PARTITIONS,
    }
    config = tmp_path / "rlm.yaml"
    config.write_text(json.dumps(doc))
    capsys.readouterr()
    code = cli_main(["fetch", "--config", str(config), "--topic", "tiered-mixed", "--offset", "0"])
    _, err = capsys.readouterr()
    assert code == 3
    assert "'rlm-absent-metadata' does not exist" in err
    topics = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=30).topics
    assert "rlm-absent-metadata" not in topics
