"""Bad input and failures: undecodable records, a mismatched topic, unmanaged partitions, broker down."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from structlog.testing import capture_logs

from rlm.errors import ConfigError, MetadataTimeoutError, MetadataUnavailableError, RemoteLogMetadataError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.serde import RemoteLogSegmentMetadataSnapshot, serialize
from rlmm.topic import TopicBasedRemoteLogMetadataManager
from tests.rlmm_topic.helpers import store_config, ten_offset_segment
from tests.services.kafka import KafkaCluster
from tests.services.proc import kill

pytestmark = pytest.mark.kafka

S = RemoteLogSegmentState


def test_undecodable_records_are_logged_and_skipped(
    kafka: KafkaCluster, metadata_topic: str, tmp_path: Path
) -> None:
    with TopicBasedRemoteLogMetadataManager(
        store_config(kafka.bootstrap, metadata_topic, tmp_path, partitions=2)
    ) as m:
        tp = TopicIdPartition(KafkaUuid.random(), "faulty", 0)
        mp = m.metadata_partition(tp)
        good = ten_offset_segment(tp, 0)
        bad_values = [
            b"\x00garbage",  # unknown frame version
            b"",  # what a null value reads as
            serialize(good)[:-5],  # truncated
            serialize(good) + b"\x00",  # trailing byte (Kafka rejects it too)
            b"\x01\x07\x00\x00",  # unknown apiKey
        ]
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
        for v in bad_values:
            producer.produce(metadata_topic, value=v or None, partition=mp)
        producer.produce(
            metadata_topic, value=serialize(RemoteLogSegmentMetadataSnapshot.create(good)), partition=mp
        )
        producer.produce(metadata_topic, value=serialize(good), partition=mp)
        assert producer.flush(30) == 0

        with capture_logs() as logs:
            m.on_partition_leadership_changes({tp}, set())
            listed = [s.remote_log_segment_id for s in m.list_remote_log_segments(tp)]
        assert listed == [good.remote_log_segment_id]
        m.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(good.remote_log_segment_id, 2, S.COPY_SEGMENT_FINISHED, 3)
        )
        assert m.remote_log_segment_metadata(tp, 0, 5) is not None
        assert m.stats.decode_errors == len(bad_values)
        assert m.stats.records_skipped == 1
        undecodable = [e for e in logs if e["event"] == "rlmm_undecodable_record"]
        where = [(e["partition"], e["offset"]) for e in undecodable]
        assert where == [(mp, o) for o in range(len(bad_values))]
        assert all(f"{metadata_topic}-{mp}@" in e["error"] for e in undecodable)
        assert any(
            e["event"] == "rlmm_unexpected_snapshot_record" and e["offset"] == len(bad_values) for e in logs
        )


def test_existing_topic_with_other_partition_count_is_refused(
    kafka: KafkaCluster, metadata_topic: str, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(metadata_topic, 5, 1)])[metadata_topic].result(60)
    with pytest.raises(ConfigError, match="exists with 5 partitions"):
        TopicBasedRemoteLogMetadataManager(
            store_config(kafka.bootstrap, metadata_topic, tmp_path, partitions=2)
        )


def test_created_topic_has_kafkas_settings(kafka: KafkaCluster, metadata_topic: str, tmp_path: Path) -> None:
    from confluent_kafka.admin._config import ConfigResource

    with TopicBasedRemoteLogMetadataManager(
        store_config(kafka.bootstrap, metadata_topic, tmp_path, partitions=2)
    ):
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        md = admin.list_topics(metadata_topic, timeout=30).topics[metadata_topic]
        assert len(md.partitions) == 2
        assert all(len(p.replicas) == 1 for p in md.partitions.values())  # min(3, 1 broker)
        res = ConfigResource(ConfigResource.Type.TOPIC, metadata_topic)
        cfg = admin.describe_configs([res])[res].result(60)
        assert cfg["retention.ms"].value == "-1"
        assert cfg["cleanup.policy"].value == "delete"
        assert cfg["remote.storage.enable"].value == "false"


def test_unmanaged_partitions_are_refused(kafka: KafkaCluster, metadata_topic: str, tmp_path: Path) -> None:
    with TopicBasedRemoteLogMetadataManager(
        store_config(kafka.bootstrap, metadata_topic, tmp_path, partitions=2)
    ) as m:
        tp = TopicIdPartition(KafkaUuid.random(), "unmanaged", 0)
        with pytest.raises(RemoteLogMetadataError, match="not managed"):
            m.add_remote_log_segment_metadata(ten_offset_segment(tp, 0))
        with pytest.raises(RemoteLogMetadataError, match="not managed"):
            m.highest_offset_for_epoch(tp, 0)


def test_unreachable_cluster_at_start_is_a_retriable_error(tmp_path: Path) -> None:
    from tests.services.proc import free_port

    cfg = store_config(
        f"127.0.0.1:{free_port()}",
        "__rlmm_nowhere",
        tmp_path,
        partitions=2,
        **{"remote.log.metadata.initialization.retry.max.timeout.ms": 1500},
    )
    with pytest.raises(MetadataUnavailableError) as e:
        TopicBasedRemoteLogMetadataManager(cfg)
    assert e.value.retriable


@pytest.mark.slow
def test_broker_down_gives_retriable_errors_and_catches_up(tmp_path: Path) -> None:
    cluster = KafkaCluster(nodes=1, name="kafka-rlmm-down").start()
    try:
        cfg = store_config(
            cluster.bootstrap, "__remote_log_metadata", tmp_path / "a", partitions=2, wait_ms=3000
        )
        m = TopicBasedRemoteLogMetadataManager(cfg)
        tp = TopicIdPartition(KafkaUuid.random(), "down", 0)
        m.on_partition_leadership_changes({tp}, set())
        first = ten_offset_segment(tp, 0)
        m.add_remote_log_segment_metadata(first)

        node = cluster.node(1)
        assert node.proc is not None
        kill(node.proc)  # a crash, not a clean shutdown
        node.proc = None
        with pytest.raises((MetadataTimeoutError, MetadataUnavailableError)) as e:
            m.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(first.remote_log_segment_id, 2, S.COPY_SEGMENT_FINISHED, 3)
            )
        assert e.value.retriable
        # reads are served from memory meanwhile
        assert [s.state for s in m.list_remote_log_segments(tp)] == [S.COPY_SEGMENT_STARTED]

        cluster.start_node(1)
        update = RemoteLogSegmentMetadataUpdate(first.remote_log_segment_id, 2, S.COPY_SEGMENT_FINISHED, 3)
        deadline = time.monotonic() + 120
        while True:  # the caller's retry loop
            try:
                m.update_remote_log_segment_metadata(update)
                break
            except (MetadataTimeoutError, MetadataUnavailableError) as err:
                assert err.retriable and time.monotonic() < deadline
                time.sleep(0.5)
        second = ten_offset_segment(tp, 10)
        m.add_remote_log_segment_metadata(second)
        state = list(m.list_remote_log_segments(tp))
        assert [s.state for s in state] == [S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED]
        m.close()

        # A fresh instance replaying the topic sees exactly the same thing: nothing lost or doubled.
        with TopicBasedRemoteLogMetadataManager({**cfg, "log.dir": str(tmp_path / "b")}) as fresh:
            fresh.on_partition_leadership_changes(set(), {tp})
            assert list(fresh.list_remote_log_segments(tp)) == state
    finally:
        cluster.stop()
