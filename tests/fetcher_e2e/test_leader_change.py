"""A real leader change on three nodes: the old leader's sidecar tiers epoch 0, the leader dies,
the new leader's sidecar tiers the next epoch. Reads by leader epoch are fenced where Kafka's
own epoch history (the new leader's ``leader-epoch-checkpoint``) says the old epoch ended, and
the records across the change equal what a consumer reads from the broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient

from fetcher import RemoteFetcher
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.errors import FencedLeaderEpochError
from rlm.log.partition import PartitionDir
from tests.daemon.helpers import create_topic, produce, topic_rlmm, wait_for
from tests.fetcher_e2e.conftest import consume_all
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
TOPIC = "fetch-leader-change"


@pytest.fixture(scope="module")
def cluster3() -> Iterator[KafkaCluster]:
    c = KafkaCluster(nodes=3, name="kafka3-fetch").start()
    try:
        yield c
    finally:
        c.stop()


def leader_of(bs: str) -> int:
    md = AdminClient({"bootstrap.servers": bs}).list_topics(TOPIC, timeout=10)
    return int(md.topics[TOPIC].partitions[0].leader)


def settings(c: KafkaCluster, tmp: Path, work: str) -> dict[str, Any]:
    rlmm = topic_rlmm(c.bootstrap, tmp / work)
    rlmm["config"]["remote.log.metadata.topic.replication.factor"] = 3
    return {
        "work_dir": str(tmp / work),
        "bootstrap_servers": c.bootstrap,
        "storage": {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
        "metadata": rlmm,
        "topics": [{"pattern": TOPIC, "remote.storage.enable": True, "retention.ms": -1}],
        "http": {"enabled": False},
        "read": {"fetch_max_wait_ms": 30_000},
    }


def tier_on(c: KafkaCluster, node: int, tmp: Path) -> None:
    cfg = load_config(None, log_dirs=[str(c.node(node).log_dir)], **settings(c, tmp, f"work{node}"))
    d = Daemon(cfg, once=True).start()
    assert d.run_once() == 0
    assert d.stop()


def test_reads_by_leader_epoch_across_a_leader_change(cluster3: KafkaCluster, tmp_path: Path) -> None:
    c = cluster3
    bs = c.bootstrap
    create_topic(bs, TOPIC, rf=3, **{"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})
    produce(bs, TOPIC, 14000, acks="all")
    old = leader_of(bs)
    wait_for("segments rolled", lambda: len(PartitionDir(c.node(old).log_dir / f"{TOPIC}-0").segments) >= 3)
    tier_on(c, old, tmp_path)

    c.stop_node(old)
    wait_for("a new leader", lambda: leader_of(bs) not in (old, -1), timeout=60)
    new = leader_of(bs)
    npdir = PartitionDir(c.node(new).log_dir / f"{TOPIC}-0")
    first_new = npdir.segments[-1].base_offset
    produce(bs, TOPIC, 9000, acks="all")
    wait_for(
        "segments rolled on the new leader",
        lambda: PartitionDir(npdir.path).segments[-1].base_offset > first_new,
    )
    tier_on(c, new, tmp_path)

    npdir.refresh()
    broker_epochs = [(e.epoch, e.start_offset) for e in npdir.leader_epochs()]
    assert len(broker_epochs) >= 2, broker_epochs
    with RemoteFetcher.from_config(load_config(None, **settings(c, tmp_path, "reader"))) as f:
        plan = f.plan(TOPIC, 0)
        # the lineage the fetcher derives from remote metadata is the broker's epoch history
        assert [e for e in broker_epochs if e[1] < plan.log_end] == list(plan.lineage)
        (old_epoch, _), (_, old_end) = plan.lineage[-2], plan.lineage[-1]
        assert plan.log_end > old_end + 1, "the new epoch's records must be tiered too"
        # Kafka: OffsetsForLeaderEpoch(old) = the next epoch's start; a reader at or before it
        # continues, one past it has diverged (fenced)
        assert f.fetch(TOPIC, 0, old_end, leader_epoch=old_epoch).records
        with pytest.raises(FencedLeaderEpochError):
            f.fetch(TOPIC, 0, old_end + 1, leader_epoch=old_epoch)
        r = f.fetch(TOPIC, 0, old_end + 1, leader_epoch=plan.latest_epoch)
        assert r.first_batch_offset is not None and r.first_batch_offset <= old_end + 1 < r.next_offset
        # the records across the change equal a consumer's read from the broker
        want = [(m[0], m[3], m[4]) for m in consume_all(bs, TOPIC, "read_uncommitted", plan.log_end)]
        tab = pa.Table.from_batches(list(f.scan(TOPIC, 0)))
        got = list(zip(*(tab.column(n).to_pylist() for n in ("offset", "key", "value")), strict=True))
        assert got == [w for w in want if w[0] < plan.log_end]
