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
from tests.daemon.helpers import create_topic, finished, produce, wait_for
from tests.daemon.test_leadership import TOPIC, copied_by, leader_of, sidecar
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
    old = leader_of(c.bootstrap, TOPIC)
    pdir = PartitionDir(c.node(old).log_dir / f"{TOPIC}-0")
    wait_for("segments rolled", lambda: len(PartitionDir(pdir.path).segments) >= 3)
    assert not (pdir.path / "partition.metadata").exists()
    tip = TopicIdPartition(topic_id(c.bootstrap, TOPIC), TOPIC, 0)
    daemons = {n: sidecar(c, n, tmp_path) for n in c.node_ids}
    try:
        rlmm = daemons[old].ctx.rlmm  # type: ignore[union-attr]
        pdir.refresh()
        first = [s.base_offset for s in pdir.inactive_segments()]
        wait_for("leader tiered its segments", lambda: [m.start_offset for m in finished(rlmm, tip)] == first)
        segs_before = finished(rlmm, tip)
        assert {m.broker_id for m in segs_before} == {old}
        wait_for("the leader counted its copies", lambda: copied_by(daemons[old]) == len(first))
        assert all(copied_by(d) == 0 for n, d in daemons.items() if n != old)

        daemons.pop(old).stop(10)
        c.stop_node(old)
        wait_for("new leader", lambda: leader_of(c.bootstrap, TOPIC) not in (old, -1), timeout=60)
        new = leader_of(c.bootstrap, TOPIC)
        produce(c.bootstrap, TOPIC, 9000, acks="all")
        new_pdir = PartitionDir(c.node(new).log_dir / f"{TOPIC}-0")
        wait_for(
            "new segments rolled", lambda: len(PartitionDir(new_pdir.path).inactive_segments()) > len(first)
        )
        new_rlmm = daemons[new].ctx.rlmm  # type: ignore[union-attr]

        def caught_up() -> bool:
            new_pdir.refresh()
            last = new_pdir.inactive_segments()[-1]
            segs = finished(new_rlmm, tip)
            return bool(segs) and segs[-1].start_offset == last.base_offset

        wait_for("new leader tiered the rest", caught_up, timeout=90)
        segs = finished(new_rlmm, tip)
        mine = [m for m in segs if m.broker_id == new]
        assert mine and {m.broker_id for m in segs} == {old, new}
        old_end = max(m.end_offset for m in segs_before)
        assert mine[0].start_offset <= old_end + 1 <= mine[0].end_offset
        covered = -1
        for m in segs:
            assert m.start_offset <= covered + 1, f"gap before {m.start_offset}"
            covered = max(covered, m.end_offset)
        assert any(e >= 1 for m in mine for e, _ in m.segment_leader_epochs)

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
