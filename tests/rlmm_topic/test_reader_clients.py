"""A reader of the metadata topic opens only what it reads with (issue 39: cold ``rlm offsets``).

A cold command (``rlm fetch``, ``rlm offsets``) only consumes the metadata topic. It used to open
an admin client to check the topic and an idempotent producer it never wrote with, beside its
consumer; both cost it connections and a client shutdown on every run. Now the topic is checked
on the consumer's own connection (the admin client only when the topic must be created or
refused) and the producer starts when writing does: leaders assigned, or a first write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rlmm.topic
import rlmm.topic_admin
from rlm.errors import ConfigError
from rlm.types import KafkaUuid, TopicIdPartition
from rlmm.topic import TopicBasedRemoteLogMetadataManager
from tests.rlmm_topic.helpers import store_config, ten_offset_segment
from tests.services.kafka import KafkaCluster

pytestmark = pytest.mark.kafka


def _count_admin_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each topic check that goes through the admin client (the real one still runs)."""
    calls: list[str] = []
    real = rlmm.topic_admin.ensure_metadata_topic

    def counted(cfg: Any, admin: Any = None) -> int:
        calls.append(cfg.topic_name)
        return real(cfg, admin)

    monkeypatch.setattr(rlmm.topic_admin, "ensure_metadata_topic", counted)
    monkeypatch.setattr(rlmm.topic, "ensure_metadata_topic", counted, raising=False)  # a name bound there
    return calls


def test_a_reader_makes_no_admin_client_and_no_producer(
    kafka: KafkaCluster, metadata_topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin_checks = _count_admin_checks(monkeypatch)
    tp = TopicIdPartition(KafkaUuid.random(), "orders", 3)
    seg = ten_offset_segment(tp, 0)
    with TopicBasedRemoteLogMetadataManager(
        store_config(kafka.bootstrap, metadata_topic, tmp_path / "writer", partitions=2)
    ) as writer:
        assert admin_checks == [metadata_topic]  # absent: created through the admin client
        writer.on_partition_leadership_changes({tp}, set())
        assert writer._publisher is not None and writer._publisher._producer is not None
        writer.add_remote_log_segment_metadata(seg)

        with TopicBasedRemoteLogMetadataManager(
            store_config(kafka.bootstrap, metadata_topic, tmp_path / "reader", partitions=2)
        ) as reader:
            reader.follow({tp})
            listed = [s.remote_log_segment_id for s in reader.list_remote_log_segments(tp)]
            assert listed == [seg.remote_log_segment_id]
            assert admin_checks == [metadata_topic]  # the topic was there: checked by the consumer
            assert reader._publisher is not None and reader._publisher._producer is None


def test_a_bad_producer_setting_fails_when_writing_starts(
    kafka: KafkaCluster, metadata_topic: str, tmp_path: Path
) -> None:
    bad = store_config(kafka.bootstrap, metadata_topic, tmp_path, partitions=2,
                       **{"remote.log.metadata.producer.linger.ms": "soon"})
    tp = TopicIdPartition(KafkaUuid.random(), "orders", 0)
    with TopicBasedRemoteLogMetadataManager(bad) as m:  # a reader never uses the producer
        m.follow({tp})
        assert list(m.list_remote_log_segments(tp)) == []
        # a leader is refused before its first write, naming the producer's configuration
        with pytest.raises(ConfigError, match="invalid metadata producer configuration"):
            m.on_partition_leadership_changes({tp}, set())
