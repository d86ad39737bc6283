"""Fixtures for the topic-backed metadata manager tests."""

from __future__ import annotations

import pytest

from tests.rlmm_topic.golden import KafkaGolden


@pytest.fixture(scope="session")
def kafka_golden(tmp_path_factory: pytest.TempPathFactory) -> KafkaGolden:
    """Kafka's own partitioner and serde, reached through a small compiled Java program."""
    return KafkaGolden.compile(tmp_path_factory.mktemp("rlmm-golden-classes"))
