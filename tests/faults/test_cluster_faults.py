"""Cluster faults on three real KRaft nodes: a leadership change in the middle of a copy (also with
the wall clock jumping a day forward and back), and the metadata topic becoming unavailable.

Sidecars run in-process (one per node, each with its own work dir and log dir) so the test can
read their status and metrics; the storage plugin holds chosen copies at a gate
(``tests.faults.gated_rsm``). Every test ends with ``rlm verify --deep`` passing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from rlm.daemon import clock
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tests.daemon.helpers import create_topic, produce, wait_for
from tests.faults import gated_rsm
from tests.faults.cluster_helpers import leader_of, listed, sidecar, verify_config
from tests.faults.proc_helpers import all_segments, rolled_end, stored_segment_ids, verify
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.slow]
S = RemoteLogSegmentState
DAY_MS = 24 * 3600 * 1000


def all_finished_to(segs: list[RemoteLogSegmentMetadata], end: int) -> bool:
    return bool(segs) and segs[-1].end_offset >= end and all(m.state is S.COPY_SEGMENT_FINISHED for m in segs)


def assert_one_lineage(segs: list[RemoteLogSegmentMetadata], up_to: int) -> None:
    """All FINISHED, no duplicate or overlapping range, no gap, from offset 0 to ``up_to``."""
    assert all(m.state is S.COPY_SEGMENT_FINISHED for m in segs), segs
    covered = -1
    for m in segs:
        assert m.start_offset == covered + 1, f"gap or overlap at {m.start_offset}: {segs}"
        covered = m.end_offset
    assert covered >= up_to, (covered, up_to, segs)


def leadership_change_mid_copy(
    c: KafkaCluster, tmp: Path, topic: str, during: Callable[[Daemon, str], None] | None = None
) -> None:
    """The partition's leader's sidecar is held in the middle of a copy; the leader's broker stops;
    the new leader's sidecar tiers the partition; then the old copy is let go. ``during(new
    leader's daemon, held segment id)`` runs while the old copy is held, after the new leader
    caught up."""
    meta_topic = f"__rlm_meta_{topic}"
    create_topic(c.bootstrap, topic, rf=3, **{"min.insync.replicas": "1"})
    produce(c.bootstrap, topic, 12000, acks="all")
    old = leader_of(c.bootstrap, topic)
    wait_for("segments rolled", lambda: len(PartitionDir(c.node(old).log_dir / f"{topic}-0").segments) >= 3)
    tip = TopicIdPartition(PartitionDir(c.node(old).log_dir / f"{topic}-0").topic_id, topic, 0)
    root = tmp / "remote"
    for n in c.node_ids:
        if n != old:
            gated_rsm.open_gate(root, n)
    daemons = {n: sidecar(c, n, tmp, topic, meta_topic) for n in c.node_ids}
    try:
        wait_for("the leader's copy held mid-way", lambda: bool(gated_rsm.started(root, old)), timeout=90)
        [held] = gated_rsm.started(root, old)
        c.stop_node(old)  # the old leader's broker goes; its sidecar keeps running, copy in flight
        wait_for("a new leader", lambda: leader_of(c.bootstrap, topic) not in (old, -1), timeout=60)
        new = leader_of(c.bootstrap, topic)
        new_pdir = c.node(new).log_dir / f"{topic}-0"
        wait_for(
            "new leader tiered the partition",
            lambda: any(
                m.end_offset >= rolled_end(new_pdir)
                and m.broker_id == new
                and m.state is S.COPY_SEGMENT_FINISHED
                for m in listed(daemons[new], tip)
            ),
            timeout=120,
        )
        assert [m.state for m in listed(daemons[new], tip) if m.remote_log_segment_id.id.text == held] == [
            S.COPY_SEGMENT_STARTED
        ], "another node's copy in flight is left alone"
        if during is not None:
            during(daemons[new], held)
        gated_rsm.open_gate(root, old)
        wait_for(
            "the old leader undid its late copy",
            lambda: held not in {m.remote_log_segment_id.id.text for m in listed(daemons[new], tip)},
            timeout=60,
        )
        st = daemons[old].ctx.status.partition(topic, 0)  # type: ignore[union-attr]
        wait_for("the old leader's task error", lambda: "LeadershipLostError" in (st.last_error or ""))
        wait_for("old leader's sidecar sees it is a follower", lambda: st.role == "follower", timeout=30)
        segs = listed(daemons[new], tip)
    finally:
        for d in daemons.values():
            d.stop(10)
        if c.node(old).proc is None:
            c.start_node(old)
    assert_one_lineage(segs, rolled_end(new_pdir))
    assert {m.broker_id for m in segs} == {new}, f"a FINISHED segment from the old leader {old}: {segs}"
    cfg = verify_config(c, tmp, topic, meta_topic)
    assert [m.remote_log_segment_id for m in all_segments(cfg, tip, tmp / "reader")] == [
        m.remote_log_segment_id for m in segs
    ]
    assert stored_segment_ids(root) == {m.remote_log_segment_id.id.text for m in segs}, "no orphan object"
    verify(cfg, topic)


def test_leadership_change_mid_copy_leaves_one_lineage(cluster3: KafkaCluster, tmp_path: Path) -> None:
    """Leadership moves mid-copy: the new leader resumes, the old one undoes its late copy; one lineage.

    The leader's broker stops while its sidecar's upload is held; afterwards: one contiguous
    lineage, no duplicate range, no FINISHED segment from the old leader, no orphan object.
    """
    leadership_change_mid_copy(cluster3, tmp_path, "lead-move")


def test_wall_clock_jumps_do_not_delete_copies_in_flight(
    cluster3: KafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Wall clock jumps a day forward, then back, mid-copy: no copy in flight is deleted, tiering goes on.

    Another node's copy is in flight during both jumps; it is not taken for abandoned, the new
    leader keeps copying after each jump, retention deletes nothing, and the result is one lineage.
    """

    def jumps(new_leader: Daemon, held: str) -> None:
        assert new_leader.ctx is not None
        tip = next(iter(new_leader.managed()))
        copied = new_leader.metrics.segments_copied.labels(tip.topic, str(tip.partition))
        # the jumps come after the new leader first saw the copy in flight (its age is fixed then)
        wait_for(
            "the copy in flight seen",
            lambda: held in {s.id.text for s in new_leader.expirer.stale.watching()},
        )
        for offset in (DAY_MS, -DAY_MS):
            clock.set_offset_ms(offset)
            before = copied._value.get()
            produce(new_leader.config.bootstrap_servers or "", tip.topic, 5000, acks="all")
            wait_for(
                "the new leader keeps copying after the jump",
                lambda b=before: copied._value.get() > b,
                timeout=60,
            )
            state = {m.remote_log_segment_id.id.text: m.state for m in listed(new_leader, tip)}
            assert state[held] is S.COPY_SEGMENT_STARTED, "the copy in flight survived the jump"
        clock.set_offset_ms(0)

    try:
        leadership_change_mid_copy(cluster3, tmp_path, "clock-jump", during=jumps)
    finally:
        clock.set_offset_ms(0)
    out = capsys.readouterr().out  # the in-process daemons' log (console format)
    assert "segment_copied" in out and "stale_copy_cleanup" not in out, "no copy taken for abandoned"
    assert "reason=retention_ms" not in out, "no segment deleted by retention after the jumps"


def test_metadata_topic_unavailable_stops_copying_then_resumes(
    cluster3: KafkaCluster, tmp_path: Path
) -> None:
    """Metadata topic offline (its only replica stopped): nothing stored, not ready, then catches up.

    No object reaches storage without its metadata while the topic is offline, ``/ready`` says
    ``metadata``, and every segment is tiered once the topic is back.
    """
    c, topic = cluster3, "meta-down"
    meta_topic = f"__rlm_meta_{topic}"
    create_topic(c.bootstrap, topic, rf=3, **{"min.insync.replicas": "1"})
    produce(c.bootstrap, topic, 8000, acks="all")
    leader = leader_of(c.bootstrap, topic)
    meta_node = next(n for n in c.node_ids if n != leader)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics(
        [
            NewTopic(
                meta_topic, num_partitions=1, replica_assignment=[[meta_node]], config={"retention.ms": "-1"}
            )
        ]
    )[meta_topic].result(timeout=60)
    pdir_path = c.node(leader).log_dir / f"{topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 2)
    tip = TopicIdPartition(PartitionDir(pdir_path).topic_id, topic, 0)
    root = tmp_path / "remote"
    gated_rsm.open_gate(root)
    d = sidecar(
        c,
        leader,
        tmp_path,
        topic,
        meta_topic,
        rf=1,
        metadata_request_timeout_ms=1500,
        health_check_interval_ms=300,
        http={"port": 0},
    )
    try:
        assert d.ctx is not None
        wait_for(
            "tiered",
            lambda: bool(listed(d, tip)) and listed(d, tip)[-1].end_offset >= rolled_end(pdir_path),
            timeout=90,
        )
        wait_for("ready", lambda: d.ready()[0], timeout=30)
        stored_before = stored_segment_ids(root)
        c.stop_node(meta_node)
        wait_for(
            "not ready: metadata",
            lambda: not d.ready()[0] and "metadata" in d.ready()[1]["problems"],
            timeout=60,
        )
        end_before = rolled_end(pdir_path)
        produce(c.bootstrap, topic, 8000, acks="all")
        wait_for("new segments rolled", lambda: rolled_end(pdir_path) > end_before, timeout=60)
        st = d.ctx.status.partition(topic, 0)
        wait_for("a copy attempt failed", lambda: st.last_error is not None, timeout=60)
        assert stored_segment_ids(root) == stored_before, "nothing stored without its metadata"
        c.start_node(meta_node)
        wait_for("ready again", lambda: d.ready()[0], timeout=90)
        wait_for("caught up", lambda: all_finished_to(listed(d, tip), rolled_end(pdir_path)), timeout=120)
        segs = listed(d, tip)
    finally:
        d.stop(10)
        if c.node(meta_node).proc is None:
            c.start_node(meta_node)
    assert_one_lineage(segs, rolled_end(pdir_path))
    assert stored_segment_ids(root) == {m.remote_log_segment_id.id.text for m in segs}, "no orphan object"
    verify(verify_config(c, tmp_path, topic, meta_topic, rf=1), topic)
