"""The shared RemoteLogMetadataManager contract, run against the topic-backed manager on a real broker.

Each test gets its own metadata topic (3 partitions, deleted afterwards) and its own ``log.dir``,
so tests do not see each other's records or snapshots; calling the factory again after
``close()`` restarts on the same topic and snapshot directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from rlmm.testing import Factory, RemoteLogMetadataManagerContract
from rlmm.topic import TopicBasedRemoteLogMetadataManager
from tests.services.kafka import KafkaCluster

pytestmark = pytest.mark.kafka


@pytest.fixture
def rlmm_factory(kafka: KafkaCluster, unique_topic: str, tmp_path: Path) -> Iterator[Factory]:
    topic = f"__rlmm_contract_{unique_topic}"[:249]
    config = {
        "remote.log.metadata.common.client.bootstrap.servers": kafka.bootstrap,
        "remote.log.metadata.topic.name": topic,
        "remote.log.metadata.topic.num.partitions": 3,
        "remote.log.metadata.consume.wait.ms": 30000,
        "broker.id": 0,
        "log.dir": str(tmp_path / "rlmm"),
    }
    made: list[TopicBasedRemoteLogMetadataManager] = []

    def factory() -> TopicBasedRemoteLogMetadataManager:
        m = TopicBasedRemoteLogMetadataManager(config)
        made.append(m)
        return m

    yield factory
    for m in made:
        m.close()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_topics([topic])[topic].result(60)


class TestTopicBasedContract(RemoteLogMetadataManagerContract):
    pass
