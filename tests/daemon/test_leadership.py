"""Three brokers, three sidecars: only the leader's sidecar copies; after the leader dies the new
leader's sidecar resumes where the old one stopped, with no missing and no duplicated range."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition
from tests.daemon.helpers import create_topic, finished, produce, topic_rlmm, wait_for
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
TOPIC = "tiered-ha"


@pytest.fixture(scope="module")
def cluster3() -> Iterator[KafkaCluster]:
    c = KafkaCluster(nodes=3, name="kafka3").start()
    try:
        yield c
    finally:
        c.stop()


def leader_of(bs: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10)
    return int(md.topics[topic].partitions[0].leader)


def sidecar(c: KafkaCluster, node_id: int, tmp: Path) -> Daemon:
    work = tmp / f"work{node_id}"
    cfg = load_config(
        None,
        log_dirs=[str(c.node(node_id).log_dir)],
        work_dir=str(work),
        bootstrap_servers=c.bootstrap,
        storage={"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
        metadata=topic_rlmm(c.bootstrap, work)
        | {
            "config": {
                **topic_rlmm(c.bootstrap, work)["config"],
                "remote.log.metadata.topic.replication.factor": 3,
            }
        },
        topics=[{"pattern": TOPIC, "remote.storage.enable": True}],
        task_interval_ms=200,
        leadership_refresh_interval_ms=300,
        rescan_interval_ms=300,
        http={"enabled": False},
    )
    return Daemon(cfg).start()


def copied_by(d: Daemon) -> float:
    return sum(
        s.value for m in d.metrics.segments_copied.collect() for s in m.samples if s.name.endswith("_total")
    )


def test_only_leader_copies_and_new_leader_resumes(cluster3: KafkaCluster, tmp_path: Path) -> None:
    c = cluster3
    create_topic(c.bootstrap, TOPIC, rf=3, **{"min.insync.replicas": "1"})
    produce(c.bootstrap, TOPIC, 20000, acks="all")
    old = leader_of(c.bootstrap, TOPIC)
    pdir = PartitionDir(c.node(old).log_dir / f"{TOPIC}-0")
    wait_for("segments rolled", lambda: len(PartitionDir(pdir.path).segments) >= 4)
    tip = TopicIdPartition(pdir.topic_id, TOPIC, 0)
    daemons = {n: sidecar(c, n, tmp_path) for n in c.node_ids}
    try:
        rlmm = daemons[old].ctx.rlmm  # type: ignore[union-attr]
        pdir.refresh()
        first = [s.base_offset for s in pdir.inactive_segments()]
        wait_for("leader tiered its segments", lambda: [m.start_offset for m in finished(rlmm, tip)] == first)
        segs_before = finished(rlmm, tip)
        assert {m.broker_id for m in segs_before} == {old}
        # the counter moves right after the FINISHED record is written: wait for it, not a race
        wait_for("the leader counted its copies", lambda: copied_by(daemons[old]) == len(first))
        assert all(copied_by(d) == 0 for n, d in daemons.items() if n != old)

        # the leader's machine dies: its sidecar and its broker
        daemons.pop(old).stop(10)
        c.stop_node(old)
        wait_for("new leader", lambda: leader_of(c.bootstrap, TOPIC) not in (old, -1), timeout=60)
        new = leader_of(c.bootstrap, TOPIC)
        produce(c.bootstrap, TOPIC, 15000, acks="all")
        new_pdir = PartitionDir(c.node(new).log_dir / f"{TOPIC}-0")
        wait_for(
            "new segments rolled",
            lambda: len(PartitionDir(new_pdir.path).inactive_segments()) > len(first) + 1,
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
        assert all(copied_by(d) == 0 for n, d in daemons.items() if n != new)
        # resumed right after the old leader's last copied offset: no gap, no duplicate range
        old_end = max(m.end_offset for m in segs_before)
        assert mine[0].start_offset <= old_end + 1 <= mine[0].end_offset
        assert len({(m.start_offset, m.end_offset) for m in segs}) == len(segs)
        covered = -1
        for m in segs:
            assert m.start_offset <= covered + 1, f"gap before {m.start_offset}"
            covered = max(covered, m.end_offset)
        assert any(e >= 1 for m in mine for e, _ in m.segment_leader_epochs)
    finally:
        for d in daemons.values():
            d.stop(10)
