"""Three brokers, three sidecars: only the leader's sidecar copies; after the leader dies the new
leader's sidecar resumes where the old one stopped, with no missing and no duplicated range."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition
from tests.daemon.helpers import create_topic, produce, wait_for
from tests.fixtures.leadership import TOPIC, copied_by, leader_dies_and_new_leader_resumes, leader_of, sidecar
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster3() -> Iterator[KafkaCluster]:
    c = KafkaCluster(nodes=3, name="kafka3").start()
    try:
        yield c
    finally:
        c.stop()


def test_only_leader_copies_and_new_leader_resumes(cluster3: KafkaCluster, tmp_path: Path) -> None:
    c = cluster3
    create_topic(c.bootstrap, TOPIC, rf=3, **{"min.insync.replicas": "1"})
    produce(c.bootstrap, TOPIC, 20000, acks="all")
    pdir = PartitionDir(c.node(leader_of(c.bootstrap, TOPIC)).log_dir / f"{TOPIC}-0")
    wait_for("segments rolled", lambda: len(PartitionDir(pdir.path).segments) >= 4)
    tip = TopicIdPartition(pdir.topic_id, TOPIC, 0)
    daemons = {n: sidecar(c, n, tmp_path) for n in c.node_ids}
    try:
        done = leader_dies_and_new_leader_resumes(c, daemons, tip, more_records=15000, new_segments=2)
        assert all(copied_by(d) == 0 for n, d in daemons.items() if n != done.new)
    finally:
        for d in daemons.values():
            d.stop(10)
