"""Fixtures for the topic-backed metadata manager tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tests.rlmm_topic.golden import KafkaGolden
from tests.services.kafka import KafkaCluster


@pytest.fixture(scope="session")
def kafka_golden(tmp_path_factory: pytest.TempPathFactory) -> KafkaGolden:
    """Kafka's own partitioner and serde, reached through a small compiled Java program."""
    return KafkaGolden.compile(tmp_path_factory.mktemp("rlmm-golden-classes"))


@pytest.fixture
def metadata_topic(kafka: KafkaCluster, unique_topic: str) -> Iterator[str]:
    """A metadata topic name of this test's own (the store creates it); deleted afterwards."""
    topic = f"__rlmm_{unique_topic}"[:249]
    yield topic
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_topics([topic])[topic].result(60)
