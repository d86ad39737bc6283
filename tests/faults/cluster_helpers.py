"""Helpers of the three-node cluster tests: in-process sidecars (one per node, each with its own
work dir), their settings, the partition's leader and the metadata store as a sidecar sees it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition
from tests.daemon.helpers import topic_rlmm, wait_for
from tests.faults.proc_helpers import GATED, local_storage, write_config
from tests.services.kafka import KafkaCluster


def leader_of(bs: str, topic: str) -> int:
    """Partition 0's leader; -1 while it has none or the topic is not listed yet (just created)."""
    md = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    p = t.partitions.get(0) if t is not None else None
    return -1 if p is None else int(p.leader)


def settings(
    c: KafkaCluster,
    node_id: int,
    tmp: Path,
    topic: str,
    meta_topic: str,
    rf: int,
    work: Path | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One node's sidecar settings; ``work`` defaults to ``tmp/work<node id>``."""
    work = work or tmp / f"work{node_id}"
    meta = topic_rlmm(c.bootstrap, work, partitions=1)
    meta["config"].update(
        {"remote.log.metadata.topic.name": meta_topic, "remote.log.metadata.topic.replication.factor": rf}
    )
    return {
        "log_dirs": [str(c.node(node_id).log_dir)],
        "work_dir": str(work),
        "bootstrap_servers": c.bootstrap,
        "storage": local_storage(tmp / "remote", GATED),
        "metadata": meta,
        "topics": [{"pattern": topic, "remote.storage.enable": True}],
        "task_interval_ms": 200,
        "leadership_refresh_interval_ms": 300,
        "rescan_interval_ms": 300,
        "retry_backoff_ms": 200,
        "retry_backoff_max_ms": 2000,
        "http": {"enabled": False},
        **extra,
    }


def sidecar(
    c: KafkaCluster,
    node_id: int,
    tmp: Path,
    topic: str,
    meta_topic: str,
    rf: int = 3,
    work: Path | None = None,
    **extra: Any,
) -> Daemon:
    cfg = load_config(None, **settings(c, node_id, tmp, topic, meta_topic, rf, work, **extra))
    return Daemon(cfg).start()


def verify_config(c: KafkaCluster, tmp: Path, topic: str, meta_topic: str, rf: int = 3) -> Path:
    s = settings(c, c.node_ids[0], tmp / "verify", topic, meta_topic, rf)
    s["storage"] = local_storage(tmp / "remote")
    return write_config(tmp / "verify.yaml", **s)


def listed(d: Daemon, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    assert d.ctx is not None
    return sorted(d.ctx.rlmm.list_remote_log_segments(tip), key=lambda m: (m.start_offset, m.end_offset))


def elect(bs: str, topic: str, kind: ElectionType) -> None:
    """Elect the partition's leader (``ELECTION_NOT_NEEDED``: the controller already did)."""
    admin = AdminClient({"bootstrap.servers": bs})
    res = admin.elect_leaders(kind, [TopicPartition(topic, 0)]).result(timeout=60)
    for err in res.values():
        if isinstance(err, KafkaException):
            err = err.args[0]
        assert err is None or err.code() == KafkaError.ELECTION_NOT_NEEDED, err


def tiered_past(d: Daemon, tip: TopicIdPartition, node: int, offset: int) -> dict[str, tuple[int, int]]:
    """The segments ``node`` tiered (as sidecar ``d``'s metadata store lists them) that end past
    ``offset``: after an unclean election, the tail only ``node`` acknowledged. Segment id ->
    (start, end offset)."""
    return {m.remote_log_segment_id.id.text: (m.start_offset, m.end_offset)
            for m in listed(d, tip) if m.broker_id == node and m.end_offset > offset}


def unclean_failover(c: KafkaCluster, topic: str, old: int, old_sidecar: Daemon, new: int) -> None:
    """The unclean election of the cluster tests: ``old`` (the only replica left in the ISR) and
    its sidecar stop, so no replica of the ISR is left; ``new`` (stopped while ``old`` wrote alone)
    starts and is elected uncleanly; returns once ``new`` leads partition 0."""
    old_sidecar.stop(30)
    c.stop_node(old)  # no replica of the ISR is left
    c.start_node(new)
    elect(c.bootstrap, topic, ElectionType.UNCLEAN)
    wait_for(f"node {new} leads after the unclean election", lambda: leader_of(c.bootstrap, topic) == new,
             timeout=90)
