"""Leadership and a broker restart beside an old, ZooKeeper-mode cluster (issue 40): three Kafka
2.8.2 brokers (no ``partition.metadata`` anywhere: every sidecar takes the topic id from the
broker), three sidecars. Only the leader's sidecar copies; the leader's machine dies, the new
leader's sidecar resumes right after the old one's last copied offset; the dead broker restarts
(ZooKeeper mode: no controller quorum of its own to recover) and its sidecar, now beside a
follower, copies nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from rlm.log.partition import PartitionDir
from rlm.types import KafkaUuid, TopicIdPartition
from tests.daemon.helpers import create_topic, produce, wait_for
from tests.fixtures.leadership import TOPIC, copied_by, leader_dies_and_new_leader_resumes, leader_of, sidecar
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def zk_cluster3() -> Iterator[KafkaCluster]:
    c = KafkaCluster(nodes=3, name="kafka28x3", version="2.8.2", zookeeper=True, heap="384m").start()
    try:
        yield c
    finally:
        c.stop()


def topic_id(bs: str, topic: str) -> KafkaUuid:
    admin = AdminClient({"bootstrap.servers": bs})  # held: a collected client cancels its futures
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    tid = desc.topic_id
    return KafkaUuid.from_bits(tid.get_most_significant_bits(), tid.get_least_significant_bits())


def test_leader_change_and_restart_on_kafka_28(zk_cluster3: KafkaCluster, tmp_path: Path) -> None:
    c = zk_cluster3
    create_topic(c.bootstrap, TOPIC, 1, 3, **{"min.insync.replicas": "1"})
    produce(c.bootstrap, TOPIC, 12000, acks="all")
    pdir = PartitionDir(c.node(leader_of(c.bootstrap, TOPIC)).log_dir / f"{TOPIC}-0")
    wait_for("segments rolled", lambda: len(PartitionDir(pdir.path).segments) >= 3)
    assert not (pdir.path / "partition.metadata").exists()
    tip = TopicIdPartition(topic_id(c.bootstrap, TOPIC), TOPIC, 0)
    daemons = {n: sidecar(c, n, tmp_path) for n in c.node_ids}
    try:
        old = leader_dies_and_new_leader_resumes(c, daemons, tip, more_records=9000, new_segments=1).old

        # the dead broker comes back (ZooKeeper mode) and follows; its sidecar copies nothing
        c.start_node(old)
        wait_for("restarted broker back in the ISR", lambda: old in _isr(c.bootstrap), timeout=90)
        daemons[old] = sidecar(c, old, tmp_path)
        st = daemons[old].ctx.status  # type: ignore[union-attr]
        wait_for("restarted sidecar sees a follower", lambda: st.partition(TOPIC, 0).role == "follower")
        assert copied_by(daemons[old]) == 0 and st.partition(TOPIC, 0).last_error is None
    finally:
        for d in daemons.values():
            d.stop(10)


def _isr(bs: str) -> list[int]:
    md = AdminClient({"bootstrap.servers": bs}).list_topics(TOPIC, timeout=10)
    return list(md.topics[TOPIC].partitions[0].isrs)
