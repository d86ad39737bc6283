"""Cold reads against a metadata topic with Kafka's default 50 partitions (issue 39).

The project's other tests create the metadata topic with 1-3 partitions, where loading every
partition one after the other costs nothing; with Kafka's default 50 a cold `rlm fetch` spent
~25 s readying them and then failed. Here a fresh reader of one user partition must consume
only the metadata partition Kafka's partitioner maps it to, a reader of every partition must
load them all together, and every cold read must answer correctly. Nothing is timed: the
assertions are on which metadata partitions were consumed and on what was read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.errors import MetadataUnavailableError, RemoteLogMetadataError
from rlm.log.record_json import b64
from rlm.log.records import Record, iter_records
from rlm.types import KafkaUuid, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState, TopicIdPartition
from rlmm.partitioner import RemoteLogMetadataTopicPartitioner
from rlmm.topic import TopicBasedRemoteLogMetadataManager
from tests.daemon.helpers import create_topic, produce
from tests.rlmm_topic.helpers import store_config, ten_offset_segment
from tests.services.kafka import KafkaCluster

pytestmark = pytest.mark.kafka

KAFKA_DEFAULT_PARTITIONS = 50


def _write_segments(bootstrap: str, topic: str, log_dir: Path, tps: list[TopicIdPartition],
                    per_partition: int) -> None:
    """``per_partition`` finished segments for each of ``tps``, as a writer (a broker) would."""
    with TopicBasedRemoteLogMetadataManager(store_config(
            bootstrap, topic, log_dir, partitions=KAFKA_DEFAULT_PARTITIONS)) as w:
        w.on_partition_leadership_changes(set(tps), set())
        for tp in tps:
            for i in range(per_partition):
                md = ten_offset_segment(tp, 10 * i)
                w.add_remote_log_segment_metadata(md)
                w.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 3))


def _starts(rlmm: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition) -> list[int]:
    return [md.start_offset for md in rlmm.list_remote_log_segments(tp)]


def test_a_read_of_one_partition_loads_only_its_metadata_partition(
        kafka: KafkaCluster, metadata_topic: str, tmp_path: Path) -> None:
    partitioner = RemoteLogMetadataTopicPartitioner(KAFKA_DEFAULT_PARTITIONS)
    topic_id = KafkaUuid(uuid.uuid4().bytes)
    tps = [TopicIdPartition(topic_id, "orders", p) for p in range(6)]
    _write_segments(kafka.bootstrap, metadata_topic, tmp_path / "writer", tps, per_partition=3)
    mps = {tp: partitioner.metadata_partition(tp) for tp in tps}
    target = tps[0]
    others = [tp for tp in tps if mps[tp] != mps[target]]
    assert others, "the six partitions all map to one metadata partition: pick other ids"

    cfg = store_config(kafka.bootstrap, metadata_topic, tmp_path / "reader",
                       partitions=KAFKA_DEFAULT_PARTITIONS)
    with TopicBasedRemoteLogMetadataManager(cfg) as r:
        r.follow({target})
        assert set(r.applied_offsets()) == {mps[target]}  # only its metadata partition was assigned
        same_mp = [tp for tp in tps if mps[tp] == mps[target]]
        assert r.stats.records_consumed == 2 * 3 * len(same_mp)  # add + finish, per segment
        assert _starts(r, target) == [0, 10, 20]
        with pytest.raises(RemoteLogMetadataError, match="not managed"):
            _starts(r, others[0])  # never loaded: refused, not answered empty
        r.follow({others[0]})  # a second read adds just its partition
        assert set(r.applied_offsets()) == {mps[target], mps[others[0]]}
        assert _starts(r, others[0]) == [0, 10, 20]

    # the same reader again: from its snapshot, nothing consumed
    with TopicBasedRemoteLogMetadataManager(cfg) as r:
        r.follow({target})
        assert set(r.applied_offsets()) == {mps[target]}
        assert r.stats.snapshots_loaded == {mps[target]: 2 * 3 * len(same_mp) - 1}
        assert r.stats.records_consumed == 0
        assert _starts(r, target) == [0, 10, 20]

    # every partition, cold: all 50 loaded together, each user partition complete
    with TopicBasedRemoteLogMetadataManager(store_config(
            kafka.bootstrap, metadata_topic, tmp_path / "all", partitions=KAFKA_DEFAULT_PARTITIONS)) as r:
        r.follow_all()
        assert set(r.applied_offsets()) == set(range(KAFKA_DEFAULT_PARTITIONS))
        assert r.known_partitions() == set(tps)
        assert all(_starts(r, tp) == [0, 10, 20] for tp in tps)
        assert r.stats.records_consumed == 2 * 3 * len(tps)

    # again, from the snapshots close() wrote, within the default wait: the old reader asked each
    # partition's end offset behind a Fetch the broker held ~0.5 s, 25 s for 50, and timed out here
    with TopicBasedRemoteLogMetadataManager(store_config(
            kafka.bootstrap, metadata_topic, tmp_path / "all", partitions=KAFKA_DEFAULT_PARTITIONS,
            wait_ms=10000)) as r:
        r.follow_all()
        assert set(r.stats.snapshots_loaded) == set(mps.values())
        assert r.stats.records_consumed == 0
        assert all(_starts(r, tp) == [0, 10, 20] for tp in tps)


def test_timeout_says_what_was_waited_for_and_which_setting(
        kafka: KafkaCluster, metadata_topic: str, tmp_path: Path) -> None:
    tps = [TopicIdPartition(KafkaUuid(uuid.uuid4().bytes), "t", p) for p in range(8)]
    _write_segments(kafka.bootstrap, metadata_topic, tmp_path / "writer", tps, per_partition=1)
    cfg = store_config(kafka.bootstrap, metadata_topic, tmp_path / "reader",
                       partitions=KAFKA_DEFAULT_PARTITIONS, wait_ms=0)
    with TopicBasedRemoteLogMetadataManager(cfg) as r, \
            pytest.raises(MetadataUnavailableError) as err:
        r.follow_all()  # a zero wait: the consumer cannot have read 50 partitions yet
    text = str(err.value)
    assert "every metadata partition" in text and metadata_topic in text
    assert "remote.log.metadata.consume.wait.ms" in text and "metadata_request_timeout_ms" in text
    assert "try again" not in text
    assert "of 50" in text  # how many of the needed partitions were late


# ---- the read side, as `rlm fetch` opens it --------------------------------------------------

def _tiered(kafka: KafkaCluster, tmp: Path, partitions: int) -> tuple[str, dict[str, Any]]:
    """A topic of ``partitions`` partitions, tiered by the daemon to local storage with the metadata
    topic at 50 partitions; returns the topic and a reader's configuration."""
    bs = kafka.bootstrap
    topic = f"cold-{uuid.uuid4().hex[:8]}"
    def metadata(work: Path) -> dict[str, Any]:
        return {"manager": "topic", "config": {
            "bootstrap.servers": bs, "log.dir": str(work / "rlmm"),
            "remote.log.metadata.topic.name": f"__rlmm_{topic}",
            "remote.log.metadata.topic.num.partitions": KAFKA_DEFAULT_PARTITIONS,
            "remote.log.metadata.topic.replication.factor": 1}}

    create_topic(bs, topic, partitions=partitions)
    for p in range(partitions):  # 2.4 MB each: two rolled 1 MiB segments to tier
        produce(bs, topic, 6000, size=400, partition=p)
    writer = {"log_dirs": [str(kafka.log_dir)], "work_dir": str(tmp / "writer"), "bootstrap_servers": bs,
              "storage": {"plugin": "local", "config": {"root": str(tmp / "remote")}},
              "metadata": metadata(tmp / "writer"), "http": {"enabled": False},
              "topics": [{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1,
                          "retention.bytes": -1}]}
    d = Daemon(load_config(None, **writer), once=True).start()
    assert d.run_once() == 0
    assert d.stop()
    reader = {**writer, "work_dir": str(tmp / "reader"), "metadata": metadata(tmp / "reader")}
    return topic, reader


def _broker_record(bootstrap: str, topic: str, partition: int,
                   offset: int) -> tuple[bytes | None, bytes | None]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cold-reads", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        msg = c.poll(30)
        assert msg is not None and msg.error() is None and msg.offset() == offset
        return msg.key(), msg.value()
    finally:
        c.close()


def test_cold_reads_load_only_the_metadata_partitions_they_read(kafka: KafkaCluster, tmp_path: Path) -> None:
    from fetcher import RemoteFetcher

    topic, reader = _tiered(kafka, tmp_path, partitions=4)
    cfg = load_config(None, **reader)
    partitioner = RemoteLogMetadataTopicPartitioner(KAFKA_DEFAULT_PARTITIONS)
    for p in range(4):  # each cold, a fresh reader: its own metadata partition only
        with RemoteFetcher.from_config(cfg, load_all=False) as f:
            result = f.fetch(topic, p, 100)
            tp = f.partition(topic, p)
            assert set(f.rlmm.applied_offsets()) == {partitioner.metadata_partition(tp)}  # type: ignore[attr-defined]
            got = {r.offset: (r.key, r.value) for _, r in iter_records(result.records)
                   if isinstance(r, Record)}
            assert got[100] == _broker_record(kafka.bootstrap, topic, p, 100)
    no_log_dirs = load_config(None, **{k: v for k, v in reader.items() if k != "log_dirs"})
    with RemoteFetcher.from_config(no_log_dirs, load_all=False) as f:  # the topic id from the broker
        tp = f.partition(topic, 2)
        assert set(f.rlmm.applied_offsets()) == {partitioner.metadata_partition(tp)}  # type: ignore[attr-defined]
        assert f.plan(tp).log_end > 100
    with RemoteFetcher.from_config(cfg, load_all=False) as f:  # a whole topic (rlm offsets without -p)
        assert [tp.partition for tp in f.topic_partitions(topic)] == [0, 1, 2, 3]
        assert set(f.rlmm.applied_offsets()) == {  # type: ignore[attr-defined]
            partitioner.metadata_partition(tp) for tp in f.topic_partitions(topic)}
    with RemoteFetcher.from_config(cfg) as f:  # a server: every metadata partition, together
        assert set(f.rlmm.applied_offsets()) == set(range(KAFKA_DEFAULT_PARTITIONS))  # type: ignore[attr-defined]
        assert [tp.partition for tp in f.topics()[topic]] == [0, 1, 2, 3]

    # the command itself, cold, in a new process
    path = tmp_path / "reader.yaml"
    path.write_text(yaml.safe_dump(reader))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_") or k == "RLM_DISABLE_JIT"}
    out = subprocess.run([sys.executable, "-m", "rlm.cli", "fetch", "--config", str(path), "--topic", topic,
                          "--partition", "3", "--offset", "7", "--count", "1", "--format", "json"],
                         capture_output=True, text=True, timeout=300, env=env, check=False)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.splitlines()[0])
    key, value = _broker_record(kafka.bootstrap, topic, 3, 7)
    assert (rec["offset"], rec["key"], rec["value"]) == (7, b64(key), b64(value))
