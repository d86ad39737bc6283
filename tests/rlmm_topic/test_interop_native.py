"""Interop with a real Kafka broker running *native* tiered storage.

The broker uses Kafka's own ``TopicBasedRemoteLogMetadataManager`` and the test storage plugin
``LocalTieredStorage`` (kafka-storage test jar). After it has offloaded several segments of a
topic, our :class:`TopicBasedRemoteLogMetadataManager`, pointed at the same cluster and managing
that partition as a follower (read-only use), must list exactly the segments the broker
tiered: same segment ids (LocalTieredStorage embeds them in its file names), offsets, leader
epochs, sizes and state COPY_SEGMENT_FINISHED. Every record the broker wrote to
``__remote_log_metadata`` must also decode with our serde. And the other direction: records we
write into the broker's metadata partition must not stop the broker's own metadata consumer
(it stops for good on anything it cannot decode), so the broker keeps offloading afterwards.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.cimpl import NewTopic

from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.serde import deserialize
from rlmm.topic import TopicBasedRemoteLogMetadataManager
from tests.services.kafka import DEFAULT_VERSION, KafkaCluster

T = TypeVar("T")

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LTS_FILE = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})\.log$")
METADATA_TOPIC = "__remote_log_metadata"
LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
TIERED_TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "1048576",
                       "local.retention.ms": "1000"}


# Kafka 4.4 moved LogContext to ...utils.internals; 4.1.1's LocalTieredStorage calls the old name
_LOG_CONTEXT_SHIM = """package org.apache.kafka.common.utils;
public class LogContext {
    private final org.apache.kafka.common.utils.internals.LogContext inner;
    public LogContext(String prefix) {
        inner = new org.apache.kafka.common.utils.internals.LogContext(prefix);
    }
    public LogContext() { this(""); }
    public org.slf4j.Logger logger(Class<?> clazz) { return inner.logger(clazz); }
    public String logPrefix() { return inner.logPrefix(); }
}
"""


def _lib_with_test_storage(version: str, tmp: Path) -> Path | None:
    """The broker's jars plus Kafka's test storage plugin (LocalTieredStorage), when its own jars
    lack it: Maven Central has no ``kafka-storage`` test jar for 4.4.0, so 4.1.1's (the same
    RemoteStorageManager interface) stores the 4.4 broker's segments, with a one-class shim for
    the one class it uses that 4.4 moved. It only stores files: the metadata records under test
    are written and read by the 4.4 broker's own TopicBasedRemoteLogMetadataManager."""
    import subprocess
    import zipfile

    from tests.services.proc import java

    own = KafkaCluster(version=version).lib
    if any(j.name.startswith("kafka-storage-") and j.name.endswith("-test.jar") for j in own.iterdir()):
        return None
    lib = tmp / "lib"
    lib.mkdir()
    default = KafkaCluster(version=DEFAULT_VERSION).lib
    for jar in [*own.iterdir(), *(j for j in default.iterdir() if j.name.endswith("-test.jar"))]:
        (lib / jar.name).symlink_to(jar)
    src = tmp / "shim" / "org" / "apache" / "kafka" / "common" / "utils" / "LogContext.java"
    src.parent.mkdir(parents=True)
    src.write_text(_LOG_CONTEXT_SHIM)
    javac = Path(java()).resolve().with_name("javac")
    subprocess.run([str(javac), "-cp", str(own / "*"), "-d", str(tmp / "classes"), str(src)], check=True)
    with zipfile.ZipFile(lib / "log-context-shim.jar", "w") as jar:
        for cls in (tmp / "classes").rglob("*.class"):
            jar.write(cls, cls.relative_to(tmp / "classes").as_posix())
    return lib


@pytest.fixture(scope="module", params=[DEFAULT_VERSION, "4.4.0"])
def tiered_kafka(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KafkaCluster, Path]]:
    """A broker tiering by itself, per version: 4.1.1, and 4.4.0 (the first release after KIP-1266
    was voted: its metadata records are still unkeyed, see test_lists_exactly_what_the_broker_tiered)."""
    version: str = request.param
    rsm_dir = tmp_path_factory.mktemp("local-tiered-storage")
    lib = _lib_with_test_storage(version, tmp_path_factory.mktemp(f"kafka-{version}-lib"))
    cluster = KafkaCluster(nodes=1, name=f"kafka-tiered-{version}", version=version, _lib=lib, extra={
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
        "rsm.config.dir": str(rsm_dir),
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "log.retention.check.interval.ms": "1000",
        "remote.log.manager.task.interval.ms": "1000",
    }).start()
    try:
        yield cluster, rsm_dir
    finally:
        cluster.stop()


def _retry_unknown_topic(call: Callable[[], T]) -> T:
    """Retry ``call`` while the broker says UNKNOWN_TOPIC_OR_PART.

    Right after start the broker's own metadata manager may still be initialising, and right
    after CreateTopics the new topic may not have reached the broker's metadata cache yet.
    """
    deadline = time.monotonic() + 120
    while True:
        try:
            return call()
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _create_tiered_topic(cluster: KafkaCluster, topic: str) -> TopicIdPartition:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def create() -> None:
        try:
            admin.create_topics([NewTopic(topic, 1, 1, config=TIERED_TOPIC_CONFIG)])[topic].result(60)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    _retry_unknown_topic(create)
    desc = _retry_unknown_topic(lambda: admin.describe_topics(TopicCollection([topic]))[topic].result(60))
    topic_id = KafkaUuid.from_bits(desc.topic_id.get_most_significant_bits(),
                                   desc.topic_id.get_least_significant_bits())
    return TopicIdPartition(topic_id, topic, 0)


def _tiered_files(rsm_dir: Path, tp: TopicIdPartition) -> dict[str, tuple[int, int]]:
    """segment id -> (start offset, .log size) from LocalTieredStorage's file names."""
    part_dir = rsm_dir / "kafka-tiered-storage" / f"{tp.topic}-{tp.partition}-{tp.topic_id.text}"
    out: dict[str, tuple[int, int]] = {}
    if part_dir.is_dir():
        for f in part_dir.iterdir():
            if m := LTS_FILE.match(f.name):
                out[m[2]] = (int(m[1]), f.stat().st_size)
    return out


def _produce_until_offloaded(cluster: KafkaCluster, rsm_dir: Path, tp: TopicIdPartition,
                             segments: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(4000):  # ~4 MB in 1 MiB segments: at least 3 closed segments get offloaded
        producer.produce(tp.topic, value=os.urandom(1000))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    deadline = time.monotonic() + 120
    while len(_tiered_files(rsm_dir, tp)) < segments:
        assert time.monotonic() < deadline, f"the broker did not offload {segments} segments of {tp}"
        time.sleep(0.5)


Listing = tuple[list[RemoteLogSegmentMetadata], dict[str, tuple[int, int]]]


def _agreed_listing(rlmm: TopicBasedRemoteLogMetadataManager, rsm_dir: Path, tp: TopicIdPartition) -> Listing:
    """Our listing once it names exactly the segment files the broker wrote, all FINISHED."""
    deadline = time.monotonic() + 60
    while True:  # the broker may still be finishing a copy
        files = _tiered_files(rsm_dir, tp)
        ours = list(rlmm.list_remote_log_segments(tp))
        finished = all(s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in ours)
        if finished and {s.remote_log_segment_id.id.text for s in ours} == set(files):
            return ours, files
        assert time.monotonic() < deadline, (files, ours)
        time.sleep(0.5)


def _config(cluster: KafkaCluster, log_dir: Path) -> dict[str, object]:
    return {"remote.log.metadata.common.client.bootstrap.servers": cluster.bootstrap, "broker.id": 1001,
            "log.dir": str(log_dir), "remote.log.metadata.consume.wait.ms": 60000}


def test_lists_exactly_what_the_broker_tiered(tiered_kafka: tuple[KafkaCluster, Path],
                                              tmp_path: Path) -> None:
    cluster, rsm_dir = tiered_kafka
    tp = _create_tiered_topic(cluster, "tiered-interop")
    _produce_until_offloaded(cluster, rsm_dir, tp, 3)
    with TopicBasedRemoteLogMetadataManager(_config(cluster, tmp_path)) as rlmm:
        rlmm.on_partition_leadership_changes(set(), {tp})
        ours, files = _agreed_listing(rlmm, rsm_dir, tp)
        assert len(ours) >= 3
        assert [s.start_offset for s in ours] == sorted(start for start, _ in files.values())
        assert ours[0].start_offset == 0
        for prev, nxt in itertools.pairwise(ours):
            assert nxt.start_offset == prev.end_offset + 1
        for s in ours:
            start, size = files[s.remote_log_segment_id.id.text]
            assert s.start_offset == start
            assert s.segment_size_in_bytes == size
            assert s.segment_leader_epochs == ((0, s.start_offset),)
            assert s.broker_id == 1
            assert s.topic_id_partition == tp
            assert rlmm.remote_log_segment_metadata(tp, 0, s.end_offset) == s
        assert rlmm.highest_offset_for_epoch(tp, 0) == ours[-1].end_offset
        assert rlmm.remote_log_size(tp, 0) == sum(size for _, size in files.values())
        assert rlmm.stats.decode_errors == 0

    # Every record the broker wrote to its metadata topic decodes with our serde.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "rlmm-interop-check",
                         "enable.auto.commit": False})
    try:
        parts = sorted(consumer.list_topics(METADATA_TOPIC, timeout=30).topics[METADATA_TOPIC].partitions)
        assert len(parts) == 50  # Kafka's default, which our config defaults to as well
        ends = {p: consumer.get_watermark_offsets(TopicPartition(METADATA_TOPIC, p), timeout=30)[1]
                for p in parts}
        consumer.assign([TopicPartition(METADATA_TOPIC, p, 0) for p in parts if ends[p] > 0])
        total, seen, kinds = sum(ends.values()), 0, set()
        deadline = time.monotonic() + 60
        while seen < total:
            assert time.monotonic() < deadline, f"read {seen} of {total} metadata records"
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error():
                    continue
                assert msg.key() is None
                event = deserialize(msg.value() or b"", partition=msg.partition(), offset=msg.offset())
                kinds.add(type(event).__name__)
                # The broker may go on writing (a later copy, a retention delete) after the ends
                # were taken; those decode too but are not counted against the snapshot.
                seen += msg.offset() < ends[msg.partition()]
        assert seen == total >= 2 * len(ours)
        assert kinds == {"RemoteLogSegmentMetadata", "RemoteLogSegmentMetadataUpdate"}
    finally:
        consumer.close()
    # KIP-1266 (keyed records in a compacted metadata topic, behind a feature version) is not in a
    # released broker yet: 4.4.0 writes unkeyed records (asserted above) to a delete-policy topic
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, METADATA_TOPIC)
    policy = admin.describe_configs([res])[res].result(30)["cleanup.policy"].value
    assert policy == "delete", policy


def test_broker_keeps_tiering_after_reading_our_records(tiered_kafka: tuple[KafkaCluster, Path],
                                                        tmp_path: Path) -> None:
    """Our records land in the metadata partition the broker's consumer reads for a tiered
    partition; if it could not decode them it would stop, and the broker's next copy would hang
    waiting for its own write to be consumed. It must keep offloading."""
    cluster, rsm_dir = tiered_kafka
    tp = _create_tiered_topic(cluster, "tiered-interop-2")
    with TopicBasedRemoteLogMetadataManager(_config(cluster, tmp_path)) as rlmm:
        mp = rlmm.metadata_partition(tp)
        while True:  # a partition of ours that shares the broker partition's metadata partition
            ours_tp = TopicIdPartition(KafkaUuid.random(), "sidecar-topic", 0)
            if rlmm.metadata_partition(ours_tp) == mp:
                break
        rlmm.on_partition_leadership_changes({ours_tp}, {tp})
        sid = RemoteLogSegmentId.generate_new(ours_tp)
        rlmm.add_remote_log_segment_metadata(RemoteLogSegmentMetadata(
            sid, 0, 99, 1_700_000_000_000, 1001, 1_700_000_000_001, 4096, ((0, 0), (2, 50)),
            custom_metadata=b"\x01\x02", txn_index_empty=True))
        for state in list(RemoteLogSegmentState)[1:]:
            rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(sid, 1_700_000_000_002, state, 1001))
        for dstate in RemotePartitionDeleteState:
            rlmm.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(ours_tp, dstate, 1_700_000_000_003, 1001))
        final = rlmm.remote_partition_delete_state(ours_tp)
        assert final is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED

        _produce_until_offloaded(cluster, rsm_dir, tp, 3)
        ours, _files = _agreed_listing(rlmm, rsm_dir, tp)
        assert len(ours) >= 3 and ours[0].start_offset == 0
        assert list(rlmm.list_remote_log_segments(ours_tp)) == []


def _broker_records(cluster: KafkaCluster, topic: str, end: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record below ``end``, read from the broker (which serves its own
    tiered segments through Kafka's remote read path)."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"faces-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 120
    try:
        while not out or out[-1][0] < end - 1:
            assert time.monotonic() < deadline, f"the broker served {len(out)} records below {end}"
            out += [(m.offset(), m.value() or b"") for m in c.consume(1000, timeout=1.0)
                    if m.error() is None and m.offset() < end]
        return out
    finally:
        c.close()


def test_read_faces_follow_a_native_tiered_topic(tiered_kafka: tuple[KafkaCluster, Path],
                                                 tmp_path: Path) -> None:
    """The read side over a cluster that tiers by itself (Kafka's RemoteLogManager with
    LocalTieredStorage and its own metadata topic): nothing of ours writes anything; our reader
    follows the broker's ``__remote_log_metadata`` and reads the broker's objects, and keeps up as
    the broker tiers more (issue 26's live test; the Aiven layout is read the same way)."""
    from fetcher import RemoteFetcher
    from rlm.config import load_config

    cluster, rsm_dir = tiered_kafka
    tp = _create_tiered_topic(cluster, "tiered-faces")
    _produce_until_offloaded(cluster, rsm_dir, tp, 2)
    cfg = load_config(None, work_dir=str(tmp_path / "reader"), http={"enabled": False},
                      storage={"plugin": "local", "config": {"root": str(rsm_dir / "kafka-tiered-storage"),
                                                             "create_root": False}},
                      metadata={"manager": "topic", "config": {
                          "bootstrap.servers": cluster.bootstrap, "log.dir": str(tmp_path / "rlmm"),
                          "remote.log.metadata.topic.num.partitions": 50,
                          "remote.log.metadata.topic.create": False,
                          "remote.log.metadata.consume.wait.ms": 60000}})
    before = {p.name for p in (rsm_dir / "kafka-tiered-storage").rglob("*")}
    with RemoteFetcher.from_config(cfg) as f:

        def remote_end() -> int:
            try:
                return f.plan(tp.topic, 0).log_end
            except Exception:  # not known to the reader yet
                return 0

        def tiered_end() -> int:
            files = _tiered_files(rsm_dir, tp)
            return 0 if not files else max(start for start, _ in files.values())  # last start, at least

        deadline = time.monotonic() + 90
        while remote_end() <= tiered_end():
            assert time.monotonic() < deadline, (remote_end(), tiered_end())
            time.sleep(0.5)
        first_end = remote_end()
        got = [(o, v) for o, v in _scan(f, tp.topic, first_end)]
        assert got == _broker_records(cluster, tp.topic, first_end)
        # the broker tiers more: the same reader follows its metadata topic
        _produce_until_offloaded(cluster, rsm_dir, tp, len(_tiered_files(rsm_dir, tp)) + 2)
        deadline = time.monotonic() + 90
        while remote_end() <= first_end:
            assert time.monotonic() < deadline, "the reader did not follow the broker's new segments"
            time.sleep(0.5)
        end = remote_end()
        assert _scan(f, tp.topic, end) == _broker_records(cluster, tp.topic, end)
    # read-only by construction: no object of ours appeared in the broker's storage
    after = {p.name for p in (rsm_dir / "kafka-tiered-storage").rglob("*")}
    assert not {n for n in after - before if not LTS_FILE.match(n) and not n.endswith(
        (".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint", ".log"))}


def _scan(f: object, topic: str, end: int) -> list[tuple[int, bytes]]:
    """The remote records below ``end``: the broker may tier another segment between reading the
    remote end and scanning, and the comparison is with the broker's records below ``end``."""
    import pyarrow as pa

    tab = pa.Table.from_batches(list(f.scan(topic, 0, end_offset=end)))  # type: ignore[attr-defined]
    return list(zip(tab.column("offset").to_pylist(), tab.column("value").to_pylist(), strict=True))
